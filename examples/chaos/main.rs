//! The chaos suite, in the spirit of Jepsen: several `cronlease run`
//! replicas share one private Redis, each through its own fault-injecting
//! TCP proxy, and run probe jobs every second (and one that follows two of
//! them: a chain) while the suite kills, stops, partitions, slows, skews,
//! restarts and reloads them, and restarts, pauses and wipes Redis. Afterwards a checker reads what the jobs did (one
//! append-only file of `start`/`end` lines, outside Redis), what the replicas
//! recorded (the outcome streams) and what was injected (the fault log), and
//! reports every breach of the promise in DESIGN.md.
//!
//! ```sh
//! scripts/chaos                                   # builds, then 90 s with a random seed
//! scripts/chaos --duration 3m --seed 42 --replicas 5 --out /tmp/chaos-42
//! scripts/chaos --faults kill9,sigstop            # only these kinds of fault
//! scripts/chaos --replica-kind embedded           # replicas embed the library
//! cargo run --release --example chaos -- --recheck /tmp/chaos-42   # the checker again, offline
//! ```
//!
//! The replicas are `cronlease run` daemons by default; with
//! `--replica-kind embedded` they are the `chaos_replica` example (next to
//! this executable), which runs the same probe jobs in process through
//! the `cronlease` library API with the same command line, signals and log, so the
//! same faults and the same checker apply to embedded schedulers.
//!
//! The seed is printed first; `--seed N` replays the same sequence of fault
//! kinds, parameters and gaps (which replica holds a run at a given instant
//! is still up to the race, so a replay is close, not identical).
//!
//! Everything lives in the output directory (a fresh temporary directory
//! unless `--out` is given), which is kept and printed: `effects.log` (the
//! jobs' side effects), `faults.jsonl` (one JSON object per fault, with
//! start/end wall ms), `rN.log` and `rN/jobs.toml` per replica, `redis/`
//! (data and log), `records.jsonl` (every outcome record the checker read),
//! `meta.json` (seed, timings), `notifications.jsonl` (every request the
//! webhook sink received), `checker.txt` (the full report) and
//! `summary.json`. `--recheck DIR` runs the checker again on those files.
//!
//! What the checker reports (see the `check` module for the exact rules):
//!
//! - **D** ticks started more than once (reruns of abandoned ticks excepted);
//! - **M** ticks with no trace at all (no start, no outcome, not recorded
//!   `missed`/`skipped_overlap`), in total and outside Redis outages;
//! - **F** fence regressions among current outcomes, by tick (a fence handed
//!   out before Redis lost its data still counts after the window);
//! - **S** a run or a tick with two current outcomes;
//! - **O** the most runs of a non-`allow` job at once (outside state-loss
//!   windows: a Redis that forgot a lease lets a second run start);
//! - **L** runs that started but left no outcome record;
//! - **E** replicas that died by themselves or did not exit 0 on SIGTERM;
//! - **N** notifications: every probe job tells the suite's webhook sink
//!   of its failures, recoveries and missed ticks; an event its outcome
//!   records call for and the sink never got, one event under two keys, a
//!   key delivered twice with no replica killed or frozen, or a delivery
//!   no outcome calls for (outside state-loss windows);
//! - **C** chains: the follower `chained` (`after = ["slow", "rerun"]`,
//!   `after_on = "any"`, no schedule) runs exactly once per current
//!   outcome of those jobs' runs: two runs for one outcome count under D,
//!   none under M (outside state-loss windows), and a follower record that
//!   names no such outcome, or carries the wrong context, under C; the
//!   per-second tick properties (D, M, S by tick) leave the follower out;
//! - **G** placement limits: `grouped-a` and `grouped-b` share the
//!   concurrency group `probe` (`max = 1`) and every replica has
//!   `max_runs = 4`: never more than one run of the group at once across
//!   the cluster, nor more than four runs on one replica (reruns aside),
//!   outside state-loss windows and, for the group, a frozen holder's
//!   child running on (daemon replicas only);
//! - takeover time after a holder is killed, and abort latency after a
//!   frozen holder's lease lapses.
//!
//! Redis restarted without its data is a declared state-loss window: ticks
//! within lease + 2 s of it are not held to D, F, S, O and L (the streams are
//! snapshotted just before the wipe so the history before it survives).
//!
//! Processes are killed on every way out: normal end, error, panic (Drop),
//! Ctrl-C (the run stops early, replicas are stopped in order and checked),
//! and the suite itself being killed (`PR_SET_PDEATHSIG`). A replica whose
//! host's clock is skewed runs with libfaketime preloaded, not under the
//! `faketime` wrapper: the wrapper's named semaphore outlives a SIGKILL and
//! makes a later wrapper that gets the same pid refuse to start.
//!
//! The modules, in the order of a run: `harness` (the private Redis, the
//! replicas, their config files and processes), `proxy` (the fault-injecting
//! TCP proxy in front of Redis), `sink` (the webhook receiver), `faults` (the kinds of fault, one module
//! each, and the seeded schedule that injects them), `evidence` (what a run
//! leaves in the output directory, and `--recheck`'s input), `check` (one
//! module per property D/M/F/S/O/L/E/N/C, plus takeover and abort latency and
//! phantom claims) and `report` (the summary, `checker.txt` and
//! `summary.json`). An example cannot import `tests/it/support`: the helpers
//! the examples share (a private Redis, child spawn options, Ctrl-C) are in
//! `examples/common`.

#[path = "../common/mod.rs"]
#[allow(dead_code)] // shared with the benchmark and the demo; the suite uses part of it
mod common;
#[path = "../common/faketime.rs"]
mod faketime;

mod check;
mod evidence;
mod faults;
mod harness;
mod proxy;
mod records;
mod report;
mod rng;
mod sink;
mod wall;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Parser;

use crate::common::{cronlease_binary, example_binary, install_interrupt_handler, on_path};
use crate::evidence::Evidence;
use crate::faults::FaultKind;
use crate::harness::{Harness, Launcher};
use crate::report::Output;
use crate::rng::Rng;

/// The output directory, for the message on an error.
static OUT_DIR: OnceLock<PathBuf> = OnceLock::new();

/// A Jepsen-style chaos run of cronlease replicas against a private Redis.
#[derive(Debug, Parser)]
#[command(name = "chaos")]
struct Args {
    /// How long the replicas run under faults (then a clean shutdown and the check).
    #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Seed of the fault schedule (random when not given; printed first).
    #[arg(long)]
    seed: Option<u64>,
    /// How many replicas.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=9))]
    replicas: u32,
    /// Output directory (created; must be empty). Default: a new temporary directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only these kinds of fault, comma-separated (default: all): kill9, sigstop,
    /// proxy_delay, proxy_blackhole, proxy_drop, proxy_reset, client_pause,
    /// redis_restart, redis_wipe, clock_skew, sigterm, reload, forge.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Run only the checker again, on the output directory of an earlier run
    /// (its effects.log, faults.jsonl, records.jsonl, meta.json and logs).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["seed", "out", "faults"])]
    recheck: Option<PathBuf>,
    /// What the replicas are: `cronlease run` daemons, or services that
    /// embed the library (the `chaos_replica` example).
    #[arg(long, value_enum, default_value_t = ReplicaKind::Daemon)]
    replica_kind: ReplicaKind,
}

/// The program each replica runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplicaKind {
    /// `cronlease run --config rN/jobs.toml`.
    Daemon,
    /// `chaos_replica run --config rN/jobs.toml` (the `cronlease` library API).
    Embedded,
}

impl ReplicaKind {
    /// The name in `meta.json`.
    pub fn name(self) -> &'static str {
        match self {
            ReplicaKind::Daemon => "daemon",
            ReplicaKind::Embedded => "embedded",
        }
    }

    /// The replica program: the `cronlease` binary, or the `chaos_replica`
    /// example next to this executable.
    fn program(self, cronlease: &Path) -> Result<PathBuf> {
        match self {
            ReplicaKind::Daemon => Ok(cronlease.to_path_buf()),
            ReplicaKind::Embedded => example_binary("chaos_replica"),
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("chaos: error: {e:#}");
            if let Some(out) = OUT_DIR.get() {
                eprintln!("chaos: logs are in {}", out.display());
            }
            ExitCode::FAILURE
        }
    }
}

/// The whole run; `Ok(false)` when the checker found violations.
fn run(args: &Args) -> Result<bool> {
    if let Some(dir) = &args.recheck {
        let evidence = Evidence::load(dir)?;
        return evidence.report(&evidence.check(), Output::Print);
    }
    let kinds = FaultKind::enabled(&args.faults)?;
    let cronlease = cronlease_binary()?;
    let program = args.replica_kind.program(&cronlease)?;
    if !on_path("redis-server") {
        bail!("redis-server is not on PATH: run scripts/install-deps (scripts/chaos does)");
    }
    let libfaketime = match kinds.iter().any(|(k, _)| *k == FaultKind::ClockSkew) {
        true => Some(faketime::libfaketime().context(
            "libfaketime.so.1 is not installed under /usr/lib (clock_skew needs it): \
             run scripts/install-deps (scripts/chaos does)",
        )?),
        false => None,
    };
    let seed = args.seed.unwrap_or_else(random_seed);
    println!("seed: {seed}   (replay with --seed {seed})");
    install_interrupt_handler()?;
    let out = prepare_out(args.out.as_deref())?;
    let _ = OUT_DIR.set(out.clone());
    println!("output directory: {}", out.display());
    println!("replicas: {:?} ({})", args.replica_kind, program.display());

    let launcher = Launcher {
        program,
        cronlease,
        libfaketime,
    };
    let mut harness = Harness::start(args.replicas, &out, launcher, seed, kinds)?;
    harness.inject_faults(args.duration)?;
    harness.shutdown();
    let evidence = Evidence::collect(&harness, seed, args.duration, args.replica_kind)?;
    drop(harness);
    let passed = evidence.report(&evidence.check(), Output::PrintAndWrite)?;
    println!("\nlogs: {}", out.display());
    Ok(passed)
}

fn random_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = Rng(nanos ^ (u64::from(std::process::id()) << 32));
    rng.next() % 1_000_000_000
}

fn prepare_out(out: Option<&Path>) -> Result<PathBuf> {
    let Some(out) = out else {
        let dir = tempfile::Builder::new()
            .prefix("cronlease-chaos-")
            .tempdir()
            .context("cannot create a temporary directory")?
            // Kept on purpose: the logs are the suite's second output.
            .keep();
        return Ok(dir);
    };
    if out.exists() {
        let mut entries = std::fs::read_dir(out)
            .with_context(|| format!("cannot read the directory {}", out.display()))?;
        if entries.next().is_some() {
            bail!(
                "the output directory {} is not empty: give a new one",
                out.display()
            );
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    out.canonicalize()
        .with_context(|| format!("cannot resolve {}", out.display()))
}
