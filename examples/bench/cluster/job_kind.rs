//! What a job of the benchmark runs, and so which program a replica is
//! started from and what each job's table says. The one place to change
//! when the job kinds change (`check` goes through it too).

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::ValueEnum;

use crate::common::{cronlease_binary, example_binary};

/// What the replicas are (`--replica-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplicaKind {
    /// `cronlease run` (the daemon; `--job-kind` says what its jobs run).
    Daemon,
    /// A program built on the `cronlease` library API whose jobs are no-op async
    /// handlers (`examples/bench_embedded_replica.rs`).
    Embedded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobKind {
    /// Nothing runs: `examples/bench_replica.rs` registers the in-process
    /// `Noop` task for every job (the job table's `command` is never run).
    Noop,
    /// `command = ["true"]`: a process per run.
    True,
    /// A no-op async handler in `examples/bench_embedded_replica.rs`, which
    /// notes when it was called (`--replica-kind embedded`; not a
    /// `--job-kind`).
    #[value(skip)]
    Embedded,
}

impl JobKind {
    /// The job kind of `--replica-kind` and `--job-kind`: embedded replicas
    /// run handlers, not what `--job-kind` names.
    pub fn of(replica: ReplicaKind, job: JobKind) -> Result<JobKind> {
        match (replica, job) {
            (ReplicaKind::Daemon, job) => Ok(job),
            (ReplicaKind::Embedded, JobKind::Noop | JobKind::Embedded) => Ok(JobKind::Embedded),
            (ReplicaKind::Embedded, job) => bail!(
                "--job-kind {} is for daemon replicas; embedded replicas run a no-op handler",
                job.name()
            ),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            JobKind::Noop => "noop",
            JobKind::True => "true",
            JobKind::Embedded => "embedded handler",
        }
    }

    pub fn replica_kind(self) -> ReplicaKind {
        match self {
            JobKind::Noop | JobKind::True => ReplicaKind::Daemon,
            JobKind::Embedded => ReplicaKind::Embedded,
        }
    }

    /// The program a replica runs (`PROGRAM run --config FILE`) and the
    /// config is checked with (`PROGRAM check --config FILE`).
    pub fn replica_program(self) -> Result<PathBuf> {
        match self {
            JobKind::Noop => example_binary("bench_replica"),
            JobKind::True => cronlease_binary(),
            JobKind::Embedded => example_binary("bench_embedded_replica"),
        }
    }

    /// The replica's own lines of `[daemon]`: daemons serve no dashboard
    /// (several share the host); the embedded replica has none to turn off
    /// and refuses keys it does not read.
    pub fn daemon_lines(self) -> &'static str {
        match self {
            JobKind::Noop | JobKind::True => "dashboard_listen = \"\"",
            JobKind::Embedded => "",
        }
    }

    /// The TOML lines, after `schedule`, of every job of the table.
    pub fn job_lines(self) -> &'static str {
        match self {
            JobKind::Noop | JobKind::True => "command = [\"true\"]",
            // An embedded job is its schedule and its handler.
            JobKind::Embedded => "",
        }
    }

    /// Whether the replicas note when each handler was called (in
    /// `<state_dir>/handler-calls.tsv`).
    pub fn notes_handler_calls(self) -> bool {
        self == JobKind::Embedded
    }
}

impl ReplicaKind {
    pub fn name(self) -> &'static str {
        match self {
            ReplicaKind::Daemon => "daemon",
            ReplicaKind::Embedded => "embedded",
        }
    }
}
