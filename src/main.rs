//! The `cronlease` binary: parses the command line and hands over to the
//! library. Exit status: 0 success, 1 runtime failure, 2 invalid input.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cronlease::cli::Cli::parse();
    cronlease::cli::run(cli)
}
