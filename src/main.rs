//! The `cronlease` binary: the library's command line
//! ([`cronlease::run_command_line`]).

fn main() -> std::process::ExitCode {
    cronlease::run_command_line()
}
