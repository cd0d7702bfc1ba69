//! The replicas' configs: the job table every replica shares, each
//! replica's own file, and `check` on the first one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::{Cluster, JobKind, KEY_PREFIX};
use crate::common::toml_string;
use crate::ticks::Schedule;

pub fn job_name(n: usize) -> String {
    format!("j{n:05}")
}

/// Whether the cluster's jobs are placed: in concurrency groups and on a
/// tag every replica has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// No group, no tag: any replica claims any job, without limit.
    None,
    /// [`PLACEMENT_GROUPS`] groups, each job in one (round robin), each
    /// group's `max` the whole table (so no run waits for a slot), and
    /// every job `run_on` the tag [`PLACEMENT_TAG`] that every replica
    /// has: the cost of the checks, not of waiting.
    GroupsAndTags,
}

/// How many concurrency groups [`Placement::GroupsAndTags`] spreads the
/// jobs over.
pub const PLACEMENT_GROUPS: usize = 10;

/// The tag every replica has and every job runs on under
/// [`Placement::GroupsAndTags`].
const PLACEMENT_TAG: &str = "bench";

impl Placement {
    /// What `[daemon]` says under this placement.
    pub fn daemon_lines(self) -> String {
        match self {
            Placement::None => String::new(),
            Placement::GroupsAndTags => format!("tags = [\"{PLACEMENT_TAG}\"]\n"),
        }
    }

    /// What job `n` says under this placement, beside its schedule.
    fn job_lines(self, n: usize) -> String {
        match self {
            Placement::None => String::new(),
            Placement::GroupsAndTags => format!(
                "run_on = [\"{PLACEMENT_TAG}\"]\ngroup = \"g{}\"\n",
                n % PLACEMENT_GROUPS
            ),
        }
    }

    /// The `[groups.*]` tables of a table of `jobs` jobs.
    fn groups_toml(self, jobs: usize) -> String {
        match self {
            Placement::None => String::new(),
            Placement::GroupsAndTags => (0..PLACEMENT_GROUPS)
                .map(|g| format!("[groups.g{g}]\nmax = {}\n\n", jobs.max(1)))
                .collect(),
        }
    }
}

/// The `[jobs.*]` tables of `jobs` jobs on `schedule`, each running `kind`,
/// placed as `placement` says (with the `[groups.*]` tables it needs).
pub fn jobs_toml(jobs: usize, schedule: Schedule, kind: JobKind, placement: Placement) -> String {
    let mut toml = placement.groups_toml(jobs);
    toml.reserve(jobs * 64);
    for n in 0..jobs {
        toml.push_str(&format!(
            "[jobs.{}]\nschedule = \"{}\"\n{}{}\n\n",
            job_name(n),
            schedule.cron(),
            placement.job_lines(n),
            kind.job_lines()
        ));
    }
    toml
}

impl Cluster<'_> {
    /// Writes `<dir>/<name>.toml`: the shared Redis and jobs, the replica's
    /// own `replica_id` and `state_dir`.
    pub(super) fn write_config(&self, name: &str) -> Result<PathBuf> {
        let state_dir = self.state_dir(name);
        std::fs::create_dir_all(&state_dir)
            .with_context(|| format!("cannot create {}", state_dir.display()))?;
        let text = format!(
            r#"# Written by the cronlease benchmark (examples/bench/), scenario {scenario}.
[redis]
url = {url}
key_prefix = "{KEY_PREFIX}"
command_timeout = "2s"

[daemon]
replica_id = "{name}"
state_dir = {state_dir}
metrics_listen = "127.0.0.1:0"
{kind_lines}
lease = "30s"
heartbeat = "5s"
shutdown_grace = "5s"
kill_grace = "1s"
{daemon_lines}
{jobs}"#,
            scenario = self.name,
            url = toml_string(&self.redis.url()),
            state_dir = toml_string(&state_dir.to_string_lossy()),
            kind_lines = self.env.kind.daemon_lines(),
            daemon_lines = self.daemon_lines,
            jobs = self.jobs_toml,
        );
        let path = self.dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }
}

impl Cluster<'_> {
    /// The replica `name`'s own directory (`[daemon] state_dir`).
    pub(super) fn state_dir(&self, name: &str) -> PathBuf {
        self.dir.join(format!("state-{name}"))
    }
}

/// Runs `check` of the job kind's program on the first config, so a bad
/// one is reported before any replica starts.
pub fn check_config(config: &Path, kind: JobKind) -> Result<()> {
    let program = kind.replica_program()?;
    let output = Command::new(&program)
        .arg("check")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {} check", program.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first_lines: Vec<&str> = stderr.lines().take(10).collect();
        bail!(
            "{} check rejected {} ({}):\n{}",
            program.display(),
            config.display(),
            output.status,
            first_lines.join("\n")
        );
    }
    Ok(())
}
