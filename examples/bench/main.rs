//! The benchmark: how late, how costly and how far from
//! Redis's ceiling cronlease's claims are, beside BullMQ where Node is
//! found.
//!
//! ```sh
//! scripts/bench all                      # every scenario but soak, about 10 minutes
//! scripts/bench latency --seconds 10     # one scenario, shorter windows
//! scripts/bench latency --replica-kind embedded   # replicas embed the library
//! scripts/bench throughput --job-kind true --jobs 20   # real processes, few jobs
//! scripts/bench burst --seconds 10       # one burst of 10,000 ticks
//! scripts/bench footprint                # start-up and RSS at 10,000 and 100,000 idle jobs
//! scripts/bench processes --seconds 10   # 1,000 `true` a second against the spawn floor
//! scripts/bench throughput --no-peer     # without the BullMQ peer row
//! scripts/bench throughput --placement   # and again with groups and tags on
//! scripts/bench throughput --telemetry   # and again exporting spans over OTLP
//! scripts/bench soak                     # Redis keys and memory over 5 minutes
//! ```
//!
//! Each scenario starts a private `redis-server` (free loopback port, no
//! persistence), R replicas (`bench-1` … `bench-R`, each with its own
//! config, state directory and log; `cronlease run`, or with
//! `--replica-kind embedded` a program built on the `cronlease` library API) on K
//! jobs, lets them warm up (every replica ready, plus 3 s), measures a
//! window of S seconds aligned on whole seconds of Redis time, stops the
//! replicas with SIGTERM and reads what they recorded. Then, against the same Redis, `redis-benchmark` runs
//! `EVALSHA` of `return 1`: the ceiling the claims are compared with
//! (printed as context, not a target).
//!
//! Scenarios (S defaults to 30 s, 60 s for `idle`, 15 s for `footprint`,
//! 300 s for `soak`, 20 s for the BullMQ peer; `--seconds` sets it for all
//! of them):
//!
//! - `latency`: 100 jobs every second, 3 replicas; target p99 tick-to-claim
//!   lateness ≤ 10 ms; with embedded replicas, p99
//!   tick-to-handler lateness ≤ 5 ms and no tick's handler called twice.
//!   Then the BullMQ peer row (below).
//! - `throughput`: 10,000 jobs every second, 3 replicas; targets: every due
//!   tick started, no duplicate, p99 lateness ≤ 100 ms,
//!   claim attempts per tick ≤ 1.1, replica CPU ≤ 25 µs per run (all
//!   replicas' CPU in the window summed, over the runs started in it),
//!   redis-server CPU ≤ 25 µs per run (its CPU in the window from `/proc`
//!   over the runs), peak RSS ≤ 60 MB per replica. Then the BullMQ peer
//!   row. Works with `--replica-kind embedded` too. With `--placement`
//!   (daemon replicas), a second cluster in the same run measures the
//!   same window with placement on: every replica tagged `bench`, every
//!   job `run_on = ["bench"]` and in one of 10 concurrency groups (`max`
//!   large enough never to hold a run back, so the cost of taking and
//!   giving back a slot is measured, not waiting); the table compares the
//!   two windows' cost per run (replica and redis-server CPU, Redis
//!   commands), lateness and claim attempts, with ratios. No peer row then.
//!   With `--telemetry` (daemon replicas), the same: the second cluster's
//!   replicas export the spans of every run and claim
//!   (`[daemon.telemetry]`, `http/protobuf`, every trace sampled) to a
//!   sink in the bench (`sink.rs`: an HTTP server on loopback that takes
//!   and counts each request), against a first window with no telemetry.
//! - `burst` (the top-of-the-hour peak): 10,000 jobs on
//!   `*/10 * * * * *`, so all 10,000 are due at the same instant every
//!   10 s and none in between, 3 replicas; after one burst of warm-up, the
//!   window starts 5 s before a burst (30 s: three bursts; `--seconds 10`:
//!   one), so that its snapshots fall between bursts. Targets: every due
//!   tick started, no duplicate, p99 tick-to-claim lateness ≤ 250 ms.
//! - `idle`: 1,000 hourly jobs (`0 * * * *`, or `30 * * * *` etc. when the
//!   run could reach the full hour: no tick is ever due), 3 replicas; target
//!   ≤ 1 Redis command per second per replica, and no run. `--jobs` up to
//!   200,000.
//! - `footprint`: 10,000 and then 100,000 jobs never due in the
//!   run (hourly, as `idle`), 3 replicas each time started one after
//!   another (each once the one before is ready, so their start-ups do not
//!   share the two CPUs); per replica its start-up (spawn until `READY=1`,
//!   polled every 10 ms: config load, Redis, the job loops' start), and
//!   after 3 s of warm-up and S seconds of idling its RSS and peak RSS (`VmHWM`; no `/metrics`
//!   scrape, so the peak is the replica's own), its CPU while idle, Redis's
//!   commands per second per replica and `used_memory`. Targets: peak RSS
//!   ≤ 30 MB per replica at 10,000 jobs, ≤ 150 MB at 100,000; start-up
//!   ≤ 2 s at 100,000 (the slowest replica). `--jobs K` measures K alone.
//! - `processes`: 1,000 jobs every second running `true` (the
//!   `cronlease` binary, `command = ["true"]`; whatever `--job-kind` and
//!   `--replica-kind` say), 3 replicas; then, replicas and Redis stopped,
//!   the spawn floor `examples/bench_spawn_floor.rs` starts as many `true`
//!   processes at each whole second for as long (one thread per CPU,
//!   `std::process::Command` with stdio on `/dev/null`: `posix_spawn`) and
//!   notes, per process, when its spawn returned and when it was reaped.
//!   Targets: every due tick started, no duplicate, cronlease's p99
//!   tick-to-claim lateness ≤ 2× the floor's p99 tick → spawned. Also
//!   printed: tick → run end (the outcome's `finished_ms`, when the replica
//!   saw the process exit) against the floor's tick → reaped, the one
//!   comparison that includes cronlease's own spawning.
//! - `scaling`: 1,000 jobs every second with 1, then 3, then 5 replicas (the
//!   new ones join the running cluster); target ≤ 1.2 claim attempts per tick
//!   at 5. Then one replica is killed with SIGKILL and the lateness of the
//!   ticks in the 5 s after the kill is reported (the takeover).
//! - `soak` (Redis memory is bounded by the job table and the
//!   history kept, not by the run rate): 100 jobs every second, 3 replicas,
//!   `history = 100` (the outcome streams, and the dedup window sized from
//!   `history`, fill within the first 100 s), S seconds with a sample every
//!   10 s: Redis's key count (`DBSIZE`), its keys by kind (a `SCAN` of the
//!   keyspace, each key named by what follows its job's hash tag: `state`,
//!   `runs`, `done`, …), `used_memory`, the outcomes recorded so far (the
//!   streams' `entries-added`) and each replica's RSS. Targets: from the
//!   mean of the middle third of the samples to the mean of the last third,
//!   keys grow ≤ 1.05x and `used_memory` ≤ 1.10x;
//!   and ≥ 90 % of the ticks due between the first and the last sample were
//!   recorded (a soak in which nothing runs is flat for nothing). It also
//!   prints the plateau (means over the last third of the samples) and the
//!   key count the data model allows (`soak_key_bound` in
//!   `scenarios/soak/keys.rs`). Not part of
//!   `all`: it takes 5 minutes of its own, and no window or ceiling is
//!   measured.
//!
//! `all` runs latency, throughput, burst, idle, footprint, processes and
//! scaling with the replicas of `--replica-kind` (default daemon), and
//! after the first latency the latency of embedded replicas too
//! (`bench-latency-embedded.json`, no peer row), unless they were embedded
//! already.
//!
//! The BullMQ peer row (`peer/`), after `latency` and
//! `throughput` unless `--no-peer` or `--job-kind true`: where `node` and
//! `npm` are on `PATH`, the Node project `examples/bench/bullmq/`
//! (`package.json`, its lockfile, `producer.js`, `worker.js`; compiled into
//! the bench) is written to `bench-bullmq/` in the cargo target directory
//! and installed there with `npm ci` when its lockfile changed (nothing
//! else needs Node; without it the row says it was skipped). Then, the
//! scenario's replicas and Redis stopped: a private redis-server of its
//! own, K job schedulers (`upsertJobScheduler`, `pattern: '* * * * * *'`,
//! a no-op job, BullMQ's default job options), 3 worker processes at
//! concurrency 50, 3 s of warm-up, a window of S seconds (default 20)
//! measured as cronlease's (snapshots half a second before each end),
//! 5 s of grace, SIGTERM. Each worker's processor notes, as the first thing
//! it does, its wall clock with the job's scheduler and tick (the job id of
//! a scheduler's job ends with its tick) and `processedOn`. Printed beside
//! cronlease's row of the scenario, with the ratios cronlease / BullMQ:
//! started / due (distinct ticks processed), ticks processed twice,
//! lateness p50 / p99 (cronlease tick → claim, BullMQ tick → `processedOn`,
//! the moment a worker took the job), tick → handler (embedded replicas) /
//! tick → processor called, CPU per run of replicas / workers and of
//! redis-server, Redis commands per run, and the highest peak RSS of a
//! replica / worker.
//!
//! What is measured, per window of ticks `[t0, t1)` (Redis time):
//!
//! - ticks due by the schedule; runs started (`ok` outcomes in the streams
//!   `bench:{<job>}:runs`); duplicates (ticks with more than one `ok`);
//!   missed (due ticks without any outcome of a run);
//! - tick-to-claim lateness = outcome `started_ms` − `tick`: p50, p99, max.
//!   `started_ms` is the Redis time read inside the claim script: it
//!   leaves out the reply's way back, the run's start and the task's (a
//!   process's start, for `--job-kind true`);
//! - with embedded replicas, tick-to-handler lateness: each handler notes
//!   its wall clock (µs) as the first thing it does
//!   (`<state_dir>/handler-calls.tsv`, read after the replicas stopped);
//!   everything runs on one host, so that is the clock Redis's `TIME`
//!   reads, and the offset the bench measures to Redis's clock at start
//!   (the `TIME` with the shortest round trip of five) is applied anyway.
//!   Also the handler calls, ticks whose handler ran twice or more, `ok`
//!   outcomes without a call, and claim → handler (call − `started_ms`,
//!   which is floored to the ms: up to 1 ms high);
//! - Redis commands: the delta of the sum of `calls` in `INFO commandstats`
//!   between `t0 − 500 ms` and `t1 − 500 ms` (the bench's own commands taken
//!   out), per run and per replica per second;
//! - claim attempts: the delta of each replica's `cronlease_claims_total`
//!   (`/metrics`) over the results that reached Redis (`claimed`, `taken`,
//!   `busy`, `paused`), per due tick and per second (the snapshot reads
//!   INFO first, then every replica's /metrics in parallel: with 10,000 jobs
//!   a scrape takes a second or more, which shifts the claims' window; the
//!   table shows how long the snapshots took);
//! - CPU of each replica and of redis-server (utime + stime from
//!   `/proc/PID/stat`, in clock ticks of 10 ms), in the window and in
//!   total; per run started in the window, in µs: the replicas' CPU (all
//!   summed) and redis-server's; each replica's peak RSS (`VmHWM`), read
//!   just before SIGTERM. A replica's CPU in the window leaves out its
//!   first `/metrics` scrape (with 10,000 jobs that render costs the
//!   replicas a second or more of CPU): it is read from the end of that
//!   scrape to the second snapshot (read before its own scrape), scaled to
//!   the window's length; the table shows what the scrapes cost;
//! - tick to the run's end: the outcome's `finished_ms` − tick (when the
//!   replica saw the run end; for processes, after the process exited),
//!   printed by `processes`.
//!
//! The jobs run the in-process no-op task (replicas are
//! `examples/bench_replica.rs`, `cronlease` with `Noop` registered for every
//! job: no process, the coordination alone is measured); `--job-kind true`
//! runs the `cronlease` binary with `command = ["true"]` instead.
//! `--replica-kind embedded` runs `examples/bench_embedded_replica.rs`: a
//! service built on the `cronlease` library API alone, the same config file read
//! as its own settings, a no-op async handler per job, `/metrics` served
//! from the `metrics` facade's Prometheus recorder (so claim attempts are
//! counted as for daemons). Which program a replica runs and what each
//! job's table says are decided in one place, `cluster/job_kind.rs`.
//!
//! Logging: replicas run with `RUST_LOG=warn,cronlease::daemon[{addr}]=info`,
//! which lets through only the one info line that names the metrics port
//! (`metrics listening on http://127.0.0.1:PORT/metrics`): with
//! `cronlease::daemon=info` every claim and every finish is a log line too,
//! which at 10,000 runs a second is a benchmark of the logger. (The
//! embedded replica prints that line on stderr whatever `RUST_LOG` says.) A replica is
//! ready when it says `READY=1` on its `NOTIFY_SOCKET` (sent at the same
//! point as the `ready` log line), or when its log has the `ready` line.
//! `--rust-log` overrides the filter.
//!
//! Output: a table per scenario with the targets and PASS/FAIL, the machine,
//! and `<out>/bench-<scenario>.json` (`--out`, default `bench/` in the cargo
//! target directory). Exit status: 0 when every target passed, 1 when one
//! failed, 2 on an error. Every process is killed on every way out (normal
//! end, error, panic through Drop, Ctrl-C, and the bench itself being killed
//! through `PR_SET_PDEATHSIG`). The work directory (configs, logs) is removed
//! unless `--keep` or an error happened.
//!
//! Files: `main.rs` the command line and the order of things;
//! `scenarios/` one module per scenario (`mod.rs` the single-window ones'
//! shared run and report; `soak/` with its key kinds and samples);
//! `peer/` the BullMQ peer row (`install.rs` the Node project and `npm
//! ci`, `bullmq.rs` its Redis, producer, workers and window, `mod.rs` its
//! figures and the rows beside cronlease's) and `bullmq/` its Node
//! project; `floor.rs` the spawn floor run and read;
//! `cluster/` redis-server and the replicas (`replica.rs` a process and its
//! readiness, `config.rs` the configs, `job_kind.rs` the program and job
//! lines per job kind, `window.rs` the measured windows and their
//! snapshots, `outcomes.rs` the outcome streams, `calls.rs` the handler
//! calls embedded replicas note, `conn.rs` the bench's own counted Redis
//! connection); `figures.rs`, `ticks.rs`, `handler.rs` and `takeover.rs`
//! what the outcomes, calls and snapshots add up to; `targets.rs`,
//! `replica_stats.rs` and `ceiling.rs` what is printed (tables through
//! `common::print_table`); `scrape.rs`
//! `/metrics`, `INFO` and `/proc`; `machine.rs` and `clock.rs` the rest.
//! `examples/common` (shared with the demo) starts redis-server and
//! handles signals.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/measure.rs"]
mod measure;

mod ceiling;
mod clock;
mod cluster;
mod figures;
mod floor;
mod handler;
mod machine;
mod peer;
mod replica_stats;
mod scenarios;
mod scrape;
mod sink;
mod takeover;
mod targets;
mod ticks;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use common::{cronlease_binary, install_interrupt_handler, on_path};
use serde_json::Value;

use cluster::{JobKind, Placement, ReplicaKind};
use scenarios::Report;

/// The default log filter of the replicas: warnings, and the one info line
/// that carries an `addr` field (the metrics port).
const DEFAULT_RUST_LOG: &str = "warn,cronlease::daemon[{addr}]=info";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// 100 jobs every second, 3 replicas: tick-to-start lateness.
    Latency,
    /// 10,000 jobs every second, 3 replicas: all started, cost, ceiling.
    Throughput,
    /// 10,000 jobs all due at the same instant every 10 s, 3 replicas.
    Burst,
    /// 1,000 hourly jobs, 3 replicas, no tick in the window: idle cost.
    Idle,
    /// 10,000 then 100,000 idle jobs, 3 replicas: start-up time and RSS.
    Footprint,
    /// 1,000 `true` jobs every second, 3 replicas, against the spawn floor.
    Processes,
    /// 1,000 jobs every second at 1, 3, 5 replicas; then one is killed.
    Scaling,
    /// 100 jobs every second, 3 replicas, 300 s: Redis keys and memory
    /// over time (not part of `all`).
    Soak,
    /// Every scenario but `soak`, one after the other, and `latency` with
    /// embedded replicas too.
    All,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Latency => "latency",
            Scenario::Throughput => "throughput",
            Scenario::Burst => "burst",
            Scenario::Idle => "idle",
            Scenario::Footprint => "footprint",
            Scenario::Processes => "processes",
            Scenario::Scaling => "scaling",
            Scenario::Soak => "soak",
            Scenario::All => "all",
        }
    }

    /// The scenarios this one stands for: `all` is every one but the soak
    /// (five minutes of its own, and about memory, not claims).
    fn expand(self) -> Vec<Scenario> {
        match self {
            Scenario::All => vec![
                Scenario::Latency,
                Scenario::Throughput,
                Scenario::Burst,
                Scenario::Idle,
                Scenario::Footprint,
                Scenario::Processes,
                Scenario::Scaling,
            ],
            one => vec![one],
        }
    }

    /// The scenarios this one stands for, each with what its jobs run:
    /// `kind`, and for `all` the latency of embedded replicas as well
    /// right after the latency of `kind`; and whether it runs
    /// the BullMQ peer (`peer` unless its jobs are processes, and not twice
    /// for one scenario in `all`).
    fn plan(self, kind: JobKind, peer: bool) -> Vec<Step> {
        let peer = peer && kind != JobKind::True;
        let mut plan: Vec<Step> = self
            .expand()
            .into_iter()
            .map(|scenario| Step {
                scenario,
                kind,
                peer,
            })
            .collect();
        if self == Scenario::All && kind != JobKind::Embedded {
            plan.insert(
                1,
                Step {
                    scenario: Scenario::Latency,
                    kind: JobKind::Embedded,
                    peer: false,
                },
            );
        }
        plan
    }

    fn run(self, env: &Env) -> Result<Report> {
        match self {
            Scenario::Latency => scenarios::latency::run(env),
            Scenario::Throughput => scenarios::throughput::run(env),
            Scenario::Burst => scenarios::burst::run(env),
            Scenario::Idle => scenarios::idle::run(env),
            Scenario::Footprint => scenarios::footprint::run(env),
            Scenario::Processes => scenarios::processes::run(env),
            Scenario::Scaling => scenarios::scaling::run(env),
            Scenario::Soak => scenarios::soak::run(env),
            Scenario::All => unreachable!("expanded before it runs"),
        }
    }
}

/// One scenario of a run, with what its jobs run and whether the BullMQ
/// peer runs after it.
struct Step {
    scenario: Scenario,
    kind: JobKind,
    peer: bool,
}

/// Benchmark cronlease replicas against a private Redis.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// Which scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Length of each measured window (default 30 s; 60 s for `idle`, 15 s
    /// of idling for `footprint`, 20 s for the BullMQ peer; for `soak` the
    /// whole run, default 300 s).
    #[arg(long, value_parser = clap::value_parser!(u64).range(5..=600))]
    seconds: Option<u64>,
    /// What the replicas are: `cronlease run` or a program built on
    /// the `cronlease` library API with a no-op handler per job.
    #[arg(long, value_enum, default_value_t = ReplicaKind::Daemon)]
    replica_kind: ReplicaKind,
    /// What each job of daemon replicas runs.
    #[arg(long, value_enum, default_value_t = JobKind::Noop)]
    job_kind: JobKind,
    /// Override the number of jobs of every scenario (for a quick check;
    /// `footprint` measures this one size instead of its two).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=200_000))]
    jobs: Option<u64>,
    /// Leave out the BullMQ peer row (run where `node` and `npm` are found
    /// after `latency` and `throughput`).
    #[arg(long)]
    no_peer: bool,
    /// Where bench-<scenario>.json goes (default: bench/ in the target dir).
    #[arg(long)]
    out: Option<PathBuf>,
    /// `RUST_LOG` of the replicas. It must let the `metrics listening on`
    /// line of `cronlease::daemon` through.
    #[arg(long, default_value = DEFAULT_RUST_LOG)]
    rust_log: String,
    /// Keep the work directory (configs, logs) afterwards.
    #[arg(long)]
    keep: bool,
    /// `throughput` only: measure it twice in one run, as it is and then
    /// with every job in one of 10 concurrency groups and run on a tag
    /// every replica has, and print the cost per run of both and their
    /// ratios.
    #[arg(long)]
    placement: bool,
    /// `throughput` only: measure it twice in one run, as it is (no
    /// `[daemon.telemetry]`) and then with every span exported over OTLP
    /// to a sink in the bench, and print the cost per run of both and
    /// their ratios.
    #[arg(long, conflicts_with = "placement")]
    telemetry: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bench: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Everything a scenario needs from the command line and the machine.
#[derive(Clone)]
struct Env {
    work: PathBuf,
    out: PathBuf,
    args_seconds: Option<u64>,
    jobs: Option<usize>,
    kind: JobKind,
    /// Whether the BullMQ peer runs after this scenario.
    peer: bool,
    /// Whether `throughput` measures a second window with placement on.
    placement: Placement,
    /// Whether `throughput` measures a second window with telemetry on.
    telemetry: bool,
    /// Lines added to `[daemon]` of a single window's replicas (the
    /// `[daemon.telemetry]` table of `--telemetry`'s second window).
    daemon_lines: String,
    rust_log: String,
    machine: Value,
    clk_tck: f64,
}

impl Env {
    fn seconds(&self, default: u64) -> u64 {
        self.args_seconds.unwrap_or(default)
    }

    fn jobs(&self, default: usize) -> usize {
        self.jobs.unwrap_or(default)
    }

    /// The same, with jobs of `kind`.
    fn with_kind(&self, kind: JobKind) -> Env {
        Env {
            kind,
            ..self.clone()
        }
    }

    /// The environment of one step of the plan.
    fn for_step(&self, step: &Step) -> Env {
        Env {
            kind: step.kind,
            peer: step.peer,
            ..self.clone()
        }
    }
}

fn run(args: &Args) -> Result<bool> {
    let env = prepare(args)?;
    let started = Instant::now();
    let mut verdicts = Vec::new();
    for step in args.scenario.plan(env.kind, env.peer) {
        let env = env.for_step(&step);
        let scenario = step.scenario;
        let name = report_name(scenario, env.kind);
        let report = scenario.run(&env).map_err(|e| {
            e.context(format!(
                "scenario {name} failed; configs and logs are kept in {}",
                env.work.display()
            ))
        })?;
        write_report(&env, &name, &report)?;
        verdicts.push((name, report.pass));
    }
    println!(
        "\nsummary ({} s): {}",
        started.elapsed().as_secs(),
        verdicts
            .iter()
            .map(|(name, pass)| format!("{name} {}", targets::verdict(*pass)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if args.keep {
        println!("work directory kept: {}", env.work.display());
    } else {
        let _ = std::fs::remove_dir_all(&env.work);
    }
    Ok(verdicts.iter().all(|(_, pass)| *pass))
}

/// Checks the tools, creates the output and work directories, and prints
/// what the run is made of.
fn prepare(args: &Args) -> Result<Env> {
    let kind = JobKind::of(args.replica_kind, args.job_kind)?;
    let binary = cronlease_binary()?;
    for tool in ["redis-server", "redis-benchmark"] {
        if !on_path(tool) {
            bail!("{tool} is not on PATH: run scripts/install-deps (scripts/bench does)");
        }
    }
    install_interrupt_handler()?;
    let out = match &args.out {
        Some(out) => out.clone(),
        None => binary
            .parent()
            .and_then(Path::parent)
            .context("unexpected location of the cronlease binary")?
            .join("bench"),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let work = tempfile::Builder::new()
        .prefix("cronlease-bench-")
        .tempdir()
        .context("cannot create the bench's temporary directory")?
        .keep();

    let machine = machine::machine(&binary);
    println!("machine: {}", machine::machine_line(&machine));
    println!("cronlease: {}", binary.display());
    println!("work directory: {}", work.display());
    println!(
        "replicas: {}, job kind: {}, replicas' RUST_LOG: {}",
        kind.replica_kind().name(),
        kind.name(),
        args.rust_log
    );
    Ok(Env {
        work,
        out,
        args_seconds: args.seconds,
        jobs: args.jobs.map(|k| k as usize),
        kind,
        peer: !args.no_peer,
        placement: if args.placement {
            Placement::GroupsAndTags
        } else {
            Placement::None
        },
        telemetry: args.telemetry,
        daemon_lines: String::new(),
        rust_log: args.rust_log.clone(),
        machine,
        clk_tck: measure::clk_tck(),
    })
}

/// The scenario's name in the summary and its report's file name:
/// `latency`, or `latency-embedded` for embedded replicas.
fn report_name(scenario: Scenario, kind: JobKind) -> String {
    match kind.replica_kind() {
        // `processes` runs daemon replicas whatever --replica-kind says.
        ReplicaKind::Embedded if scenario != Scenario::Processes => {
            format!("{}-embedded", scenario.name())
        }
        _ => scenario.name().to_string(),
    }
}

/// `<out>/bench-<name>.json`.
fn write_report(env: &Env, name: &str, report: &Report) -> Result<()> {
    let path = env.out.join(format!("bench-{name}.json"));
    let text = serde_json::to_string_pretty(&report.json).context("cannot encode JSON")?;
    std::fs::write(&path, text + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("  results: {}", path.display());
    Ok(())
}
