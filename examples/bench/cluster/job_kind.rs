//! What a job of the benchmark runs, and so which program a replica is
//! started from and what each job's table says. The one place to change
//! when the job kinds change (`cronlease check` goes through it too).

use std::path::PathBuf;

use anyhow::Result;
use clap::ValueEnum;

use crate::common::cronlease_binary;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobKind {
    /// `benchmark_noop = true`: nothing runs, in process.
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
            JobKind::Noop | JobKind::True => cronlease_binary(),
        }
    }

    /// The TOML lines, after `schedule`, of every job of the table.
    pub fn job_lines(self) -> &'static str {
        match self {
            JobKind::Noop => "benchmark_noop = true",
            JobKind::True => "command = [\"true\"]",
        }
    }

    /// What to add when `check` rejected a config with `stderr`.
    pub fn check_hint(self, stderr: &str) -> &'static str {
        match self {
            JobKind::Noop if stderr.contains("benchmark_noop") => {
                "\n(this cronlease does not know `benchmark_noop` yet: use --job-kind true)"
            }
            _ => "",
        }
    }
}
