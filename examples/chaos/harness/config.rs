//! The cluster's job table: the probe jobs, the daemon settings every
//! replica gets, and the config file that declares them. The checker reads
//! the constants too: they are what a run promised.

use std::path::Path;

use anyhow::{Context, Result};

use super::Replica;
use crate::common::toml_string;

/// Key prefix of the suite's cluster in its private Redis.
pub const KEY_PREFIX: &str = "chaos";

/// The scheduled probe jobs, every second (`quick` as the union of two
/// expressions): name, extra TOML lines, shell
/// body between the lines. The follower (`FOLLOWER`) is apart: it has no
/// ticks of its own.
/// `grouped-a` and `grouped-b` share the concurrency group `GROUP`, of
/// one slot: each wants a run of 1.2 s every second, so most of their
/// ticks wait for the slot and many are recorded `skipped_capacity`; the
/// checker's G holds the group to its one run at a time.
/// `flaky` fails on its own, so that notifications tell of failures, time
/// outs and recoveries besides what the faults cause: in every ten seconds
/// of ticks, two fail (exit 1, without the `end` line, as a crashed body),
/// one runs past its timeout, the others succeed. Its `misfire = "skip"`
/// records every tick an outage kept everyone from claiming as `missed`
/// (the others' `run_once` runs the latest), so that `missed` is told too.
pub const JOBS: [(&str, &str, &str); 7] = [
    ("quick", "", "true"),
    ("slow", "", "sleep 1.5"),
    ("allowed", "overlap = \"allow\"\n", "sleep 1.5"),
    ("rerun", "on_holder_lost = \"rerun\"\n", "sleep 0.5"),
    (
        "flaky",
        "timeout = \"1s\"\nmisfire = \"skip\"\n",
        "case $((CRONLEASE_TICK_MS / 1000 % 10)) in 0|1) exit 1 ;; 5) sleep 3 ;; *) sleep 0.2 ;; esac",
    ),
    ("grouped-a", "group = \"probe\"\n", "sleep 1.2"),
    ("grouped-b", "group = \"probe\"\n", "sleep 1.2"),
];

/// The concurrency group of `grouped-a` and `grouped-b`, and its `max`.
pub const GROUP: (&str, usize) = ("probe", 1);

/// Every replica's `[daemon] max_runs`: more than the probes need while
/// every replica is up, so that it binds when one is down or frozen.
pub const MAX_RUNS: usize = 4;

/// The follower probe: no schedule of its own (a pure follower), one run
/// for each outcome of a run of `slow` or `rerun`, whatever its status
/// (`after_on = "any"`). `slow` runs past the next tick, so a kill -9 often
/// lands mid-run and the sweep's `abandoned` is what it follows; `rerun`
/// adds the outcomes of reruns (trigger `rerun`) to follow. Its own runs
/// are rerun when their holder is lost, and `overlap` is the default
/// (`skip`): an outcome that arrives while one of its runs is in flight is
/// recorded `skipped_overlap` for that cause. Its `start`/`end` lines
/// carry the upstream run id as an eighth word.
pub const FOLLOWER: (&str, &str, &str) = (
    "chained",
    "after = [\"slow\", \"rerun\"]\nafter_on = \"any\"\non_holder_lost = \"rerun\"\n",
    "sleep 0.5",
);

/// The jobs the follower's `after` names.
pub const FOLLOWER_UPSTREAMS: [&str; 2] = ["slow", "rerun"];

/// Whether an upstream outcome of `status` starts a run of the follower:
/// every status of a run that ended (its `after_on = "any"`), never a tick
/// skipped or missed (prelude.lua's `RAN`).
pub fn follower_follows(status: &str) -> bool {
    matches!(
        status,
        "ok" | "failed" | "timeout" | "lost_lease" | "interrupted" | "abandoned" | "killed"
    )
}

/// Every probe job's name: the scheduled ones (`JOBS`), then the follower.
pub fn all_jobs() -> impl Iterator<Item = &'static str> {
    JOBS.iter().map(|(job, _, _)| *job).chain([FOLLOWER.0])
}

/// The name of the webhook channel every probe job notifies.
pub const SINK_CHANNEL: &str = "sink";

/// Every probe job's `repeat_every`, ms: zero, so every failure of a
/// streak is told (the checker applies the scripts' rule with it).
pub const REPEAT_EVERY_MS: i64 = 0;

/// The job whose runs may overlap by design.
pub const ALLOW_JOB: &str = "allowed";

/// The daemon's lease (`[daemon] lease`), ms.
pub const LEASE_MS: i64 = 2_000;

impl Replica {
    /// Writes the replica's `jobs.toml`: every probe job appends a `start`
    /// and an `end` line to `effects` around its body.
    pub fn write_config(&self, effects: &Path) -> Result<()> {
        let state_dir = self.dir.join("state");
        std::fs::create_dir_all(&state_dir)?;
        let mut text = format!(
            "# Written by the cronlease chaos suite (examples/chaos/).\n\
             [redis]\n\
             url = \"redis://127.0.0.1:{port}/0\"\n\
             key_prefix = \"{KEY_PREFIX}\"\n\
             command_timeout = \"300ms\"\n\
             \n\
             [daemon]\n\
             replica_id = \"{name}\"\n\
             lease = \"2s\"\n\
             heartbeat = \"1s\"\n\
             shutdown_grace = \"3s\"\n\
             kill_grace = \"1s\"\n\
             state_dir = {state_dir}\n\
             metrics_listen = \"\"\n\
             dashboard_listen = \"\"\n\
             # Keep every outcome of a long run for the checker.\n\
             history = 1000000\n\
             max_runs = {MAX_RUNS}\n\
             \n\
             [groups.{group}]\n\
             max = {group_max}\n\
             \n\
             [notify.{SINK_CHANNEL}]\n\
             kind = \"webhook\"\n\
             url = {url}\n\
             timeout = \"2s\"\n",
            port = self.proxy_port,
            name = self.name,
            state_dir = toml_string(&state_dir.to_string_lossy()),
            url = toml_string(&self.sink_url),
            group = GROUP.0,
            group_max = GROUP.1,
        );
        let file = shell_quote(&effects.to_string_lossy());
        let rules =
            format!("notify = [\"{SINK_CHANNEL}\"]\nrepeat_every = \"{REPEAT_EVERY_MS}ms\"\n");
        for &(job, extra, body) in JOBS.iter().chain([&FOLLOWER]) {
            // The upstream run id is empty but for the follower's runs.
            let line = |what: &str| {
                format!(
                    "echo \"{what} {job} $CRONLEASE_TICK_MS $CRONLEASE_FENCE $CRONLEASE_REPLICA \
                     $CRONLEASE_RUN_ID $(LD_PRELOAD= date +%s%3N) $CRONLEASE_UPSTREAM_RUN_ID\" \
                     >> {file}"
                )
            };
            let script = format!("{}; {body}; {}", line("start"), line("end"));
            let schedule = match job {
                _ if job == FOLLOWER.0 => "",
                // Every second too, as the union of two expressions that
                // share the even seconds: each such instant is one tick
                // (a second run of it counts under D).
                "quick" => "schedule = [\"* * * * * *\", \"*/2 * * * * *\"]\n",
                _ => "schedule = \"* * * * * *\"\n",
            };
            text.push_str(&format!(
                "\n[jobs.{job}]\n{schedule}misfire_grace = \"10s\"\n{rules}{extra}\
                 shell = {}\n",
                toml_string(&script)
            ));
            if job == "quick" && self.quick_timeout {
                text.push_str("timeout = \"30s\"\n");
            }
        }
        // Written whole, then renamed: a reload never reads half a file.
        let partial = self.config.with_extension("toml.new");
        std::fs::write(&partial, text)
            .with_context(|| format!("cannot write {}", partial.display()))?;
        std::fs::rename(&partial, &self.config)
            .with_context(|| format!("cannot write {}", self.config.display()))?;
        Ok(())
    }
}

/// `text` as one shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
