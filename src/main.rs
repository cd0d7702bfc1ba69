//! The `cronlease` binary: parses the command line and hands over to the
//! library. Exit statuses: `cronlease::exit::Exit`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cronlease::cli::Cli::parse();
    cronlease::cli::run(cli).into()
}
