//! The `cronlease` binary: the library's command line
//! ([`cronlease::run_command_line`]).

/// mimalloc, not glibc's malloc, whose `malloc`/`free` were 40 % of a busy
/// replica's CPU profile (README "Benchmark").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cronlease::run_command_line()
}
