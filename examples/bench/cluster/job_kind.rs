//! What a job of the benchmark runs, and so which program a replica is
//! started from and what each job's table says. The one place to change
//! when the job kinds change (`cronlease check` goes through it too).

use std::path::PathBuf;

use anyhow::Result;
use clap::ValueEnum;

use crate::common::{cronlease_binary, example_binary};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobKind {
    /// Nothing runs: `examples/bench_replica.rs` registers the in-process
    /// `Noop` task for every job (the job table's `command` is never run).
    Noop,
    /// `command = ["true"]`: a process per run.
    True,
}

impl JobKind {
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Noop => "noop",
            JobKind::True => "true",
        }
    }

    /// The program a replica runs (`PROGRAM run --config FILE`) and the
    /// config is checked with (`PROGRAM check --config FILE`).
    pub fn replica_program(self) -> Result<PathBuf> {
        match self {
            JobKind::Noop => example_binary("bench_replica"),
            JobKind::True => cronlease_binary(),
        }
    }

    /// The TOML lines, after `schedule`, of every job of the table.
    pub fn job_lines(self) -> &'static str {
        match self {
            JobKind::Noop | JobKind::True => "command = [\"true\"]",
        }
    }
}
