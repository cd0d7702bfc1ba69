//! The `cronlease` binary: the library's command line
//! (`cronlease::run_command_line`), on mimalloc (`allocator.rs`, with the
//! default feature `mimalloc`).

#[cfg(feature = "mimalloc")]
mod allocator;

fn main() -> std::process::ExitCode {
    #[cfg(feature = "mimalloc")]
    allocator::return_freed_memory_at_once();
    cronlease::run_command_line()
}
