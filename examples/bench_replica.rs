//! The benchmark's replica: `cronlease` with every job's task replaced by
//! an in-process no-op ([`cronlease::task::Noop`]), so that the benchmark
//! measures the coordination (claims, leases, outcomes) and not process
//! start-up. It takes the same command line as `cronlease`; the job table
//! still needs a valid `command` per job, which is never run.
//!
//! ```sh
//! cargo run --release --example bench_replica -- run --config jobs.toml
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use cronlease::task::{Noop, Tasks};

/// The same allocator, set up the same way, as the `cronlease` binary.
#[path = "../cli/src/allocator.rs"]
mod allocator;

fn main() -> ExitCode {
    allocator::return_freed_memory_at_once();
    let cli = cronlease::cli::Cli::parse();
    cronlease::cli::run_with(cli, Tasks::every_job(Arc::new(Noop))).into()
}
