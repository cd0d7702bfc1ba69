//! The benchmark of issue 8: how late, how costly and how far from Redis's
//! ceiling cronlease's claims are.
//!
//! ```sh
//! scripts/bench all                      # every scenario but soak, about 5 minutes
//! scripts/bench latency --seconds 10     # one scenario, shorter windows
//! scripts/bench throughput --job-kind true --jobs 20   # real processes, few jobs
//! scripts/bench soak                     # Redis keys and memory over 5 minutes
//! ```
//!
//! Each scenario starts a private `redis-server` (free loopback port, no
//! persistence), R `cronlease run` replicas (`bench-1` … `bench-R`, each with
//! its own config, state directory and log) on K jobs, lets them warm up
//! (every replica ready, plus 3 s), measures a window of S seconds aligned
//! on whole seconds of Redis time, stops the replicas with SIGTERM and reads
//! what they recorded. Then, against the same Redis, `redis-benchmark` runs
//! `EVALSHA` of `return 1`: the ceiling the claims are compared with.
//!
//! Scenarios (S defaults to 30 s, 60 s for `idle`, 300 s for `soak`;
//! `--seconds` sets it for all of them):
//!
//! - `latency`: 100 jobs every second, 3 replicas; target p99 tick-to-start
//!   lateness ≤ 10 ms.
//! - `throughput`: 10,000 jobs every second, 3 replicas; targets: every due
//!   tick started, no duplicate, p99 lateness ≤ 100 ms, claims/s ≥ 50 % of the
//!   ceiling, peak RSS ≤ 30 MB per replica.
//! - `idle`: 1,000 hourly jobs (`0 * * * *`, or `30 * * * *` etc. when the
//!   run could reach the full hour: no tick is ever due), 3 replicas; target
//!   ≤ 1 Redis command per second per replica, and no run.
//! - `scaling`: 1,000 jobs every second with 1, then 3, then 5 replicas (the
//!   new ones join the running cluster); target ≤ 1.2 claim attempts per tick
//!   at 5. Then one replica is killed with SIGKILL and the lateness of the
//!   ticks in the 5 s after the kill is reported (the takeover).
//! - `soak` (issue 16: Redis memory is bounded by the job table and the
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
//!   key count the data model allows ([`soak_key_bound`]). Not part of
//!   `all`: it takes 5 minutes of its own, and no window or ceiling is
//!   measured.
//!
//! What is measured, per window of ticks `[t0, t1)` (Redis time):
//!
//! - ticks due by the schedule; runs started (`ok` outcomes in the streams
//!   `bench:{<job>}:runs`); duplicates (ticks with more than one `ok`);
//!   missed (due ticks without any outcome of a run);
//! - lateness = outcome `started_ms` − `tick`: p50, p99, max;
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
//!   `/proc/PID/stat`), in the window and in total, and each replica's peak
//!   RSS (`VmHWM`), read just before SIGTERM.
//!
//! The jobs are `benchmark_noop = true` (no process: the coordination alone
//! is measured); `--job-kind true` runs `command = ["true"]` instead.
//!
//! Logging: replicas run with `RUST_LOG=warn,cronlease::daemon[{addr}]=info`,
//! which lets through only the one info line that names the metrics port
//! (`metrics listening on http://127.0.0.1:PORT/metrics`): with
//! `cronlease::daemon=info` every claim and every finish is a log line too,
//! which at 10,000 runs a second is a benchmark of the logger. A replica is
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

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::{Parser, ValueEnum};
use common::{
    INTERRUPTED, RedisProcess, cronlease_binary, detach_and_tie_to_parent,
    install_interrupt_handler, on_path, tail,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const KEY_PREFIX: &str = "bench";

/// The default log filter of the replicas: warnings, and the one info line
/// that carries an `addr` field (the metrics port).
const DEFAULT_RUST_LOG: &str = "warn,cronlease::daemon[{addr}]=info";

/// After every replica is ready, before the first window.
const WARMUP: Duration = Duration::from_secs(3);

/// How long replicas may take to be ready (10,000 jobs included).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// After the end of the last window, before the replicas are stopped: the
/// outcomes of the last ticks of a loaded window land in this time.
const GRACE_MS: i64 = 1_500;

/// How long stopping replicas may take after SIGTERM (`shutdown_grace` 5 s
/// plus `kill_grace` 1 s plus slack).
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// The claim results that reached Redis: the claim attempts.
const ATTEMPTS: [&str; 4] = ["claimed", "taken", "busy", "paused"];

/// The after-kill period of the scaling scenario.
const TAKEOVER_MS: i64 = 5_000;

/// How often the soak samples Redis's keys and memory.
const SOAK_SAMPLE_EVERY_MS: i64 = 10_000;

/// `history` of the soak's replicas: small, so the outcome streams (and the
/// dedup window, which issue 16 sizes from `history`) are full after the
/// first 100 s, well before the middle sample of the default 300 s.
const SOAK_HISTORY: u32 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// 100 jobs every second, 3 replicas: tick-to-start lateness.
    Latency,
    /// 10,000 jobs every second, 3 replicas: all started, cost, ceiling.
    Throughput,
    /// 1,000 hourly jobs, 3 replicas, no tick in the window: idle cost.
    Idle,
    /// 1,000 jobs every second at 1, 3, 5 replicas; then one is killed.
    Scaling,
    /// 100 jobs every second, 3 replicas, 300 s: Redis keys and memory
    /// over time (not part of `all`).
    Soak,
    /// Every scenario but `soak`, one after the other.
    All,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Latency => "latency",
            Scenario::Throughput => "throughput",
            Scenario::Idle => "idle",
            Scenario::Scaling => "scaling",
            Scenario::Soak => "soak",
            Scenario::All => "all",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum JobKind {
    /// `benchmark_noop = true`: nothing runs, in process.
    Noop,
    /// `command = ["true"]`: a process per run.
    True,
}

impl JobKind {
    fn name(self) -> &'static str {
        match self {
            JobKind::Noop => "noop",
            JobKind::True => "true",
        }
    }

    fn toml(self) -> &'static str {
        match self {
            JobKind::Noop => "benchmark_noop = true",
            JobKind::True => "command = [\"true\"]",
        }
    }
}

/// Benchmark cronlease replicas against a private Redis.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// Which scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Length of each measured window (default 30 s; 60 s for `idle`; for
    /// `soak` the whole run, default 300 s).
    #[arg(long, value_parser = clap::value_parser!(u64).range(5..=600))]
    seconds: Option<u64>,
    /// What each job runs.
    #[arg(long, value_enum, default_value_t = JobKind::Noop)]
    job_kind: JobKind,
    /// Override the number of jobs of every scenario (for a quick check).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    jobs: Option<u64>,
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
struct Env {
    binary: PathBuf,
    work: PathBuf,
    out: PathBuf,
    args_seconds: Option<u64>,
    jobs: Option<usize>,
    kind: JobKind,
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
}

fn run(args: &Args) -> Result<bool> {
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

    let machine = machine(&binary);
    println!("machine: {}", machine_line(&machine));
    println!("cronlease: {}", binary.display());
    println!("work directory: {}", work.display());
    println!(
        "job kind: {}, replicas' RUST_LOG: {}",
        args.job_kind.name(),
        args.rust_log
    );
    let env = Env {
        binary,
        work: work.clone(),
        out,
        args_seconds: args.seconds,
        jobs: args.jobs.map(|k| k as usize),
        kind: args.job_kind,
        rust_log: args.rust_log.clone(),
        machine,
        clk_tck: clk_tck(),
    };
    let scenarios = match args.scenario {
        // Not the soak: five minutes of its own, and about memory, not
        // claims.
        Scenario::All => vec![
            Scenario::Latency,
            Scenario::Throughput,
            Scenario::Idle,
            Scenario::Scaling,
        ],
        one => vec![one],
    };
    let started = Instant::now();
    let mut verdicts = Vec::new();
    for scenario in scenarios {
        let result = match scenario {
            Scenario::Latency => latency(&env),
            Scenario::Throughput => throughput(&env),
            Scenario::Idle => idle(&env),
            Scenario::Scaling => scaling(&env),
            Scenario::Soak => soak(&env),
            Scenario::All => unreachable!("expanded above"),
        };
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                return Err(e.context(format!(
                    "scenario {} failed; configs and logs are kept in {}",
                    scenario.name(),
                    work.display()
                )));
            }
        };
        let path = env.out.join(format!("bench-{}.json", scenario.name()));
        let text = serde_json::to_string_pretty(&report.json).context("cannot encode JSON")?;
        std::fs::write(&path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("  results: {}", path.display());
        verdicts.push((scenario.name(), report.pass));
    }
    println!(
        "\nsummary ({} s): {}",
        started.elapsed().as_secs(),
        verdicts
            .iter()
            .map(|(name, pass)| format!("{name} {}", if *pass { "PASS" } else { "FAIL" }))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if args.keep {
        println!("work directory kept: {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(verdicts.iter().all(|(_, pass)| *pass))
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

/// What a scenario hands back: its JSON and whether every target passed.
struct Report {
    json: Value,
    pass: bool,
}

/// One target: the figure, the bound, the verdict.
struct Target {
    name: String,
    value: String,
    bound: String,
    pass: bool,
}

impl Target {
    fn new(name: &str, value: String, bound: &str, pass: bool) -> Target {
        Target {
            name: name.to_string(),
            value,
            bound: bound.to_string(),
            pass,
        }
    }

    fn json(&self) -> Value {
        json!({"name": self.name, "value": self.value, "target": self.bound, "pass": self.pass})
    }
}

fn latency(env: &Env) -> Result<Report> {
    let k = env.jobs(100);
    let r = 3;
    let seconds = env.seconds(30);
    let title = format!(
        "(a) latency: {k} jobs every second, {r} replicas, {seconds} s window, job kind {}",
        env.kind.name()
    );
    let run = single_window(env, "latency", k, r, seconds, Schedule::EverySecond)?;
    let f = &run.figures;
    let mut targets = vec![duplicates_target(f)];
    targets.push(match f.lateness {
        Some(l) => Target::new(
            "p99 lateness",
            format!("{} ms", l.p99),
            "≤ 10 ms",
            l.p99 <= 10,
        ),
        None => Target::new("p99 lateness", "no run".into(), "≤ 10 ms", false),
    });
    Ok(finish_single(env, "latency", &title, &run, targets))
}

fn throughput(env: &Env) -> Result<Report> {
    let k = env.jobs(10_000);
    let r = 3;
    let seconds = env.seconds(30);
    let title = format!(
        "(b) throughput: {k} jobs every second, {r} replicas, {seconds} s window, job kind {}",
        env.kind.name()
    );
    let run = single_window(env, "throughput", k, r, seconds, Schedule::EverySecond)?;
    let f = &run.figures;
    let mut targets = vec![
        Target::new(
            "all started",
            format!(
                "{} of {} ({} missed)",
                f.ticks.runs_started, f.ticks.due, f.ticks.missed
            ),
            "every due tick",
            f.ticks.missed == 0 && f.ticks.runs_started >= f.ticks.due && f.ticks.due > 0,
        ),
        duplicates_target(f),
    ];
    targets.push(match f.lateness {
        Some(l) => Target::new(
            "p99 lateness",
            format!("{} ms", l.p99),
            "≤ 100 ms",
            l.p99 <= 100,
        ),
        None => Target::new("p99 lateness", "no run".into(), "≤ 100 ms", false),
    });
    let share = run.ceiling.rps.map(|rps| f.claims_per_s / rps);
    targets.push(Target::new(
        "claims/s vs ceiling",
        match (share, run.ceiling.rps) {
            (Some(share), Some(rps)) => format!(
                "{:.0}/s of {:.0}/s = {:.1} %",
                f.claims_per_s,
                rps,
                share * 100.0
            ),
            _ => "ceiling not measured".to_string(),
        },
        "≥ 50 %",
        share.is_some_and(|s| s >= 0.5),
    ));
    let peak = run
        .replicas
        .iter()
        .filter_map(|r| r.hwm_kb)
        .max()
        .unwrap_or(0);
    targets.push(Target::new(
        "peak RSS per replica (max)",
        format!("{:.1} MB", peak as f64 / 1024.0),
        "≤ 30 MB",
        peak > 0 && peak as f64 / 1024.0 <= 30.0,
    ));
    Ok(finish_single(env, "throughput", &title, &run, targets))
}

fn idle(env: &Env) -> Result<Report> {
    let k = env.jobs(1_000);
    let r = 3;
    let seconds = env.seconds(60);
    // `0 * * * *`, unless the scenario (start, warm-up, window, stop, with
    // a margin) could reach the full hour: then another minute of the hour.
    let now = local_ms();
    let span = (seconds as i64 + 120) * 1_000;
    let minute = [0, 30, 15, 45]
        .into_iter()
        .find(|&minute| {
            Schedule::Hourly { minute }
                .ticks(now, now + span)
                .is_empty()
        })
        .expect("a run of at most 12 minutes misses one of four quarter hours");
    let schedule = Schedule::Hourly { minute };
    let title = format!(
        "(c) idle: {k} jobs `{}`, {r} replicas, {seconds} s window, job kind {}",
        schedule.cron(),
        env.kind.name()
    );
    let run = single_window(env, "idle", k, r, seconds, schedule)?;
    let f = &run.figures;
    let targets = vec![
        Target::new(
            "commands/s per idle replica",
            format!("{:.2}", f.commands_per_replica_s),
            "≤ 1",
            f.commands_per_replica_s <= 1.0,
        ),
        Target::new(
            "runs in the window",
            format!(
                "{} (ticks due {})",
                f.ticks.runs_started + f.ticks.other_total(),
                f.ticks.due
            ),
            "0, no tick due",
            f.ticks.due == 0 && f.ticks.runs_started == 0 && f.ticks.other_total() == 0,
        ),
    ];
    Ok(finish_single(env, "idle", &title, &run, targets))
}

fn scaling(env: &Env) -> Result<Report> {
    let k = env.jobs(1_000);
    let seconds = env.seconds(30);
    let steps = [1usize, 3, 5];
    let title = format!(
        "(d) scaling: {k} jobs every second, {} replicas, {seconds} s per step, then kill -9 \
         of one; job kind {}",
        steps.map(|s| s.to_string()).join(" → "),
        env.kind.name()
    );
    let loadavg_before = loadavg();
    println!("\n{title} (load average {loadavg_before})");
    let schedule = Schedule::EverySecond;
    let mut cluster = Cluster::start(env, "scaling", k, schedule)?;
    let mut windows = Vec::new();
    for &r in &steps {
        let add = r - cluster.replicas.len();
        cluster.add_replicas(add)?;
        cluster.warm_up()?;
        windows.push(cluster.window(&format!("R = {r}"), seconds)?);
    }
    // The takeover: kill -9 the first replica mid-second.
    let victim = 0;
    let victim_name = cluster.replicas[victim].name.clone();
    let victim_stats = cluster.replica_stats(victim);
    let kill_ms = cluster.redis_time()?;
    cluster.replicas[victim].kill9();
    println!(
        "  killed {victim_name} with SIGKILL at {}",
        format_ms(kill_ms)
    );
    cluster.sleep_until_redis(kill_ms + TAKEOVER_MS, "takeover")?;
    let end = cluster.stop(kill_ms + TAKEOVER_MS + GRACE_MS)?;
    let mut replicas = end.replicas;
    replicas[victim] = ReplicaStats {
        exit: "killed (SIGKILL)".to_string(),
        log: replicas[victim].log,
        ..victim_stats
    };
    let from = windows[0].t0;
    let outcomes = cluster.read_outcomes(from - 1_000)?;
    let ceiling = cluster.ceiling()?;
    drop(cluster);

    let figures: Vec<Figures> = windows
        .iter()
        .map(|w| Figures::new(w, &outcomes, schedule))
        .collect();
    let takeover = Takeover::new(&outcomes, schedule, kill_ms, &victim_name);

    // The table: one column per step.
    let mut header = vec!["metric".to_string()];
    header.extend(figures.iter().map(|f| format!("R = {}", f.replicas)));
    header.extend(["target".to_string(), "verdict".to_string()]);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let metric_rows = figures_rows(&figures, &ceiling);
    let last = figures.last().expect("three steps");
    let at5 = last.claims_per_tick;
    for (name, values) in metric_rows {
        let mut row = vec![name.clone()];
        row.extend(values);
        if name == "claim attempts per tick" {
            row.push(format!("≤ 1.2 at R = {}", last.replicas));
            row.push(verdict(at5.is_some_and(|c| c <= 1.2)));
        } else if name == "duplicates" {
            row.push("0".to_string());
            row.push(verdict(figures.iter().all(|f| f.ticks.duplicates == 0)));
        } else {
            row.extend([String::new(), String::new()]);
        }
        rows.push(row);
    }
    let targets = vec![
        Target::new(
            "claim attempts per tick at R = 5",
            at5.map_or("no tick".to_string(), |c| format!("{c:.3}")),
            "≤ 1.2",
            at5.is_some_and(|c| c <= 1.2),
        ),
        Target::new(
            "duplicates",
            figures
                .iter()
                .map(|f| f.ticks.duplicates.to_string())
                .collect::<Vec<_>>()
                .join(" / "),
            "0",
            figures.iter().all(|f| f.ticks.duplicates == 0) && takeover.ticks.duplicates == 0,
        ),
    ];
    println!("\n{title}");
    print_table(&header, &rows);
    println!(
        "\n  takeover after kill -9 of {victim_name} at R = 5 (ticks in the {} s after the kill):",
        TAKEOVER_MS / 1000
    );
    print_table(
        &["metric".to_string(), "value".to_string()],
        &takeover.rows(),
    );
    slow_snapshot_note(&figures);
    print_replicas(&replicas);
    print_ceiling(&ceiling, Some(last.claims_per_s));
    let pass = targets.iter().all(|t| t.pass);
    print_targets(&targets);
    let json = json!({
        "scenario": "scaling",
        "title": title,
        "machine": env.machine,
        "job_kind": env.kind.name(),
        "jobs": k,
        "schedule": schedule.cron(),
        "seconds": seconds,
        "loadavg_before": loadavg_before,
        "steps": figures.iter().map(|f| f.json()).collect::<Vec<_>>(),
        "takeover": takeover.json(),
        "replicas": replicas.iter().map(ReplicaStats::json).collect::<Vec<_>>(),
        "ceiling": ceiling.json(Some(last.claims_per_s)),
        "targets": targets.iter().map(Target::json).collect::<Vec<_>>(),
        "pass": pass,
    });
    Ok(Report { json, pass })
}

fn soak(env: &Env) -> Result<Report> {
    let k = env.jobs(100);
    let r = 3;
    let seconds = env.seconds(300);
    let schedule = Schedule::EverySecond;
    let title = format!(
        "(e) soak: {k} jobs every second, {r} replicas, history {SOAK_HISTORY}, {seconds} s, a \
         sample every {} s, job kind {}",
        SOAK_SAMPLE_EVERY_MS / 1_000,
        env.kind.name()
    );
    let loadavg_before = loadavg();
    println!(
        "\n(soak) starting redis-server and {r} replicas with {k} jobs… (load average \
         {loadavg_before})"
    );
    let daemon_lines = format!("history = {SOAK_HISTORY}\n");
    let mut cluster = Cluster::start_with_daemon_lines(env, "soak", k, schedule, &daemon_lines)?;
    cluster.add_replicas(r)?;
    cluster.warm_up()?;
    // Samples half-way between two ticks, when the runs of the last tick
    // have ended (as for the windows' snapshots).
    let begin = ceil_to(cluster.redis_time()? + 700, 1_000) - 500;
    let mut samples = Vec::new();
    for elapsed_ms in soak_sample_offsets(seconds) {
        cluster.sleep_until_redis(begin + elapsed_ms, "soak")?;
        let sample = cluster.soak_sample(elapsed_ms)?;
        println!(
            "  [soak] {} s: {} keys, {:.2} MB used_memory, {} outcomes recorded",
            elapsed_ms / 1_000,
            sample.keys,
            megabytes(sample.used_memory),
            sample.outcomes.map_or("?".to_string(), |n| n.to_string())
        );
        samples.push(sample);
    }
    let names: Vec<String> = cluster.replicas.iter().map(|r| r.name.clone()).collect();
    let end = cluster.stop(begin + seconds as i64 * 1_000)?;
    drop(cluster);

    let first = samples
        .first()
        .context("the soak takes at least two samples")?;
    let middle = &samples[(samples.len() - 1) / 2];
    let last = samples
        .last()
        .context("the soak takes at least two samples")?;
    // Means over thirds, not single samples: a stream allocating its next
    // node shows as a brief ~9 % bump in used_memory that one sample can
    // land on.
    let third = samples.len().div_ceil(3);
    let plateau = &samples[samples.len() - third..];
    let middle_third = &samples[samples.len() - 2 * third..samples.len() - third];
    let mean = |samples: &[SoakSample], value: &dyn Fn(&SoakSample) -> u64| {
        samples.iter().map(|s| value(s) as f64).sum::<f64>() / samples.len().max(1) as f64
    };
    let plateau_keys = mean(plateau, &|s| s.keys);
    let plateau_used_memory = mean(plateau, &|s| s.used_memory);
    let middle_keys = mean(middle_third, &|s| s.keys);
    let middle_used_memory = mean(middle_third, &|s| s.used_memory);
    let growth = |from: f64, to: f64| (from > 0.0).then(|| to / from);
    let keys_growth = growth(middle_keys, plateau_keys);
    let used_memory_growth = growth(middle_used_memory, plateau_used_memory);
    let dedup = DedupKeys::of(last);
    let in_flight = k as u64;
    let bound = soak_key_bound(k as u64, dedup.per_job(), in_flight);
    let due = k as u64 * ((last.elapsed_ms - first.elapsed_ms) / 1_000) as u64;
    let recorded = match (first.outcomes, last.outcomes) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };

    let ratio_text = |ratio: Option<f64>| ratio.map_or("-".to_string(), |g| format!("{g:.2}x"));
    let targets = vec![
        Target::new(
            "keys growth, mean of the middle third → of the last",
            format!(
                "{:.0} → {:.0} = {}",
                middle_keys,
                plateau_keys,
                ratio_text(keys_growth)
            ),
            "≤ 1.05x",
            keys_growth.is_some_and(|g| g <= 1.05),
        ),
        Target::new(
            "used_memory growth, mean of the middle third → of the last",
            format!(
                "{:.2} → {:.2} MB = {}",
                middle_used_memory / 1_048_576.0,
                plateau_used_memory / 1_048_576.0,
                ratio_text(used_memory_growth)
            ),
            "≤ 1.10x",
            used_memory_growth.is_some_and(|g| g <= 1.10),
        ),
        Target::new(
            "outcomes recorded, first → last sample",
            match recorded {
                Some(n) => format!(
                    "{n} of {due} ticks due ({:.1} %)",
                    n as f64 / due.max(1) as f64 * 100.0
                ),
                None => "not reported (Redis < 7 has no entries-added)".to_string(),
            },
            "≥ 90 %",
            recorded.is_some_and(|n| due > 0 && n as f64 >= 0.9 * due as f64),
        ),
    ];

    println!("\n{title}");
    print_soak_samples(&samples, &names);
    let mut rows = vec![
        vec![
            format!(
                "plateau: mean keys (samples {}–{} s)",
                plateau[0].elapsed_ms / 1_000,
                last.elapsed_ms / 1_000
            ),
            format!("{plateau_keys:.0}"),
        ],
        vec![
            "plateau: mean used_memory".to_string(),
            format!("{:.2} MB", plateau_used_memory / 1024.0 / 1024.0),
        ],
        vec![
            "dedup keys per job (from the keys written)".to_string(),
            dedup.describe(),
        ],
        vec![
            "keys at the last sample vs the data model's bound".to_string(),
            last.keys.to_string(),
            format!(
                "≤ {bound} = {k} × (2 + {}) + 2 × {in_flight} + 3",
                dedup.per_job()
            ),
            match dedup {
                DedupKeys::PerRun { .. } => "grows per run".to_string(),
                _ if last.keys <= bound => "under".to_string(),
                _ => "OVER".to_string(),
            },
        ],
    ];
    for target in &targets {
        rows.push(vec![
            format!("▸ {}", target.name),
            target.value.clone(),
            target.bound.clone(),
            verdict(target.pass),
        ]);
    }
    for row in &mut rows {
        row.resize(4, String::new());
    }
    println!();
    print_table(
        &["metric", "value", "target", "verdict"].map(String::from),
        &rows,
    );
    // Until a job has `history` outcomes its stream (and its dedup window)
    // still fills: memory grows then whatever the data model.
    let filled_by_middle = middle
        .outcomes
        .is_some_and(|n| n >= k as u64 * u64::from(SOAK_HISTORY));
    if !filled_by_middle {
        println!(
            "\n  NOTE: at the middle sample ({} s) the jobs had recorded fewer than {SOAK_HISTORY} \
             outcomes each (history = {SOAK_HISTORY}): their streams and dedup windows were still \
             filling, so used_memory grows from there whatever the data model; --seconds 240 or \
             more puts the middle sample after that",
            middle.elapsed_ms / 1_000
        );
    }
    print_replicas(&end.replicas);
    let pass = targets.iter().all(|t| t.pass);
    print_targets(&targets);
    let json = json!({
        "scenario": "soak",
        "title": title,
        "machine": env.machine,
        "job_kind": env.kind.name(),
        "jobs": k,
        "replicas_count": r,
        "schedule": schedule.cron(),
        "history": SOAK_HISTORY,
        "seconds": seconds,
        "sample_every_s": SOAK_SAMPLE_EVERY_MS / 1_000,
        "loadavg_before": loadavg_before,
        "samples": samples.iter().map(|s| s.json(&names)).collect::<Vec<_>>(),
        "plateau": {
            "from_elapsed_s": plateau[0].elapsed_ms / 1_000,
            "samples": plateau.len(),
            "keys_mean": plateau_keys,
            "used_memory_mean_bytes": plateau_used_memory,
        },
        "growth": {
            "from": "mean of the middle third of the samples",
            "from_elapsed_s": middle_third.first().map(|s| s.elapsed_ms / 1_000),
            "to": "mean of the last third",
            "keys": keys_growth,
            "used_memory": used_memory_growth,
            "history_full_at_middle_sample": filled_by_middle,
        },
        "key_bound": {
            "dedup": dedup.describe(),
            "dedup_keys_per_job": dedup.per_job(),
            "runs_in_flight": in_flight,
            "bound": bound,
            "keys_at_last_sample": last.keys,
        },
        "outcomes_recorded": recorded,
        "ticks_due": due,
        "replicas": end.replicas.iter().map(ReplicaStats::json).collect::<Vec<_>>(),
        "targets": targets.iter().map(Target::json).collect::<Vec<_>>(),
        "pass": pass,
    });
    Ok(Report { json, pass })
}

fn duplicates_target(f: &Figures) -> Target {
    Target::new(
        "duplicates",
        f.ticks.duplicates.to_string(),
        "0",
        f.ticks.duplicates == 0,
    )
}

fn verdict(pass: bool) -> String {
    if pass { "PASS" } else { "FAIL" }.to_string()
}

/// A single-window scenario, measured.
struct SingleRun {
    /// `/proc/loadavg` before the scenario: other load skews everything.
    loadavg_before: String,
    figures: Figures,
    replicas: Vec<ReplicaStats>,
    ceiling: Ceiling,
    k: usize,
    seconds: u64,
    schedule: Schedule,
}

fn single_window(
    env: &Env,
    name: &str,
    k: usize,
    r: usize,
    seconds: u64,
    schedule: Schedule,
) -> Result<SingleRun> {
    println!(
        "\n({name}) starting redis-server and {r} replicas with {k} jobs… (load average {})",
        loadavg()
    );
    let loadavg_before = loadavg();
    let mut cluster = Cluster::start(env, name, k, schedule)?;
    cluster.add_replicas(r)?;
    cluster.warm_up()?;
    let window = cluster.window(name, seconds)?;
    let end = cluster.stop(window.t1 + GRACE_MS)?;
    let outcomes = cluster.read_outcomes(window.t0 - 1_000)?;
    let ceiling = cluster.ceiling()?;
    drop(cluster);
    Ok(SingleRun {
        loadavg_before,
        figures: Figures::new(&window, &outcomes, schedule),
        replicas: end.replicas,
        ceiling,
        k,
        seconds,
        schedule,
    })
}

/// Prints the tables of a single-window scenario and builds its report.
fn finish_single(
    env: &Env,
    name: &str,
    title: &str,
    run: &SingleRun,
    targets: Vec<Target>,
) -> Report {
    println!("\n{title}");
    let f = &run.figures;
    let mut rows: Vec<Vec<String>> = figures_rows(std::slice::from_ref(f), &run.ceiling)
        .into_iter()
        .map(|(name, mut values)| {
            let mut row = vec![name];
            row.append(&mut values);
            row
        })
        .collect();
    // The targets next to their figures.
    for target in &targets {
        rows.push(vec![
            format!("▸ {}", target.name),
            target.value.clone(),
            target.bound.clone(),
            verdict(target.pass),
        ]);
    }
    for row in &mut rows {
        row.resize(4, String::new());
    }
    print_table(
        &[
            "metric".to_string(),
            "value".to_string(),
            "target".to_string(),
            "verdict".to_string(),
        ],
        &rows,
    );
    slow_snapshot_note(std::slice::from_ref(f));
    print_replicas(&run.replicas);
    print_ceiling(&run.ceiling, Some(f.claims_per_s));
    if f.ticks.due > 0 && f.ticks.runs_started == 0 {
        println!(
            "\n  NOTE: no tick ran ok; see the replicas' logs (--keep keeps them; the table above \
             counts their WARN/ERROR/panic lines)"
        );
    }
    let pass = targets.iter().all(|t| t.pass);
    print_targets(&targets);
    let json = json!({
        "scenario": name,
        "title": title,
        "machine": env.machine,
        "job_kind": env.kind.name(),
        "jobs": run.k,
        "schedule": run.schedule.cron(),
        "seconds": run.seconds,
        "loadavg_before": run.loadavg_before,
        "window": f.json(),
        "replicas": run.replicas.iter().map(ReplicaStats::json).collect::<Vec<_>>(),
        "ceiling": run.ceiling.json(Some(f.claims_per_s)),
        "targets": targets.iter().map(Target::json).collect::<Vec<_>>(),
        "pass": pass,
    });
    Report { json, pass }
}

/// A snapshot reads INFO and CPU at once, then scrapes /metrics: when that
/// takes longer than the half second before the next tick, the claim counts
/// cover a shifted window.
fn slow_snapshot_note(figures: &[Figures]) {
    let slowest = figures
        .iter()
        .flat_map(|f| f.snapshot_ms)
        .max()
        .unwrap_or(0);
    if slowest > 500 {
        println!(
            "\n  NOTE: a /metrics scrape took up to {slowest} ms (> 500 ms): the claim counts \
             cover a window shifted by up to that much, and rendering /metrics loaded the \
             replicas meanwhile"
        );
    }
}

fn print_targets(targets: &[Target]) {
    let pass = targets.iter().all(|t| t.pass);
    let failed: Vec<&str> = targets
        .iter()
        .filter(|t| !t.pass)
        .map(|t| t.name.as_str())
        .collect();
    if pass {
        println!("  verdict: PASS ({} targets)", targets.len());
    } else {
        println!("  verdict: FAIL ({})", failed.join(", "));
    }
}

// ---------------------------------------------------------------------------
// Schedules and figures
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Schedule {
    /// `* * * * * *`
    EverySecond,
    /// `M * * * *`
    Hourly { minute: u32 },
}

impl Schedule {
    fn cron(self) -> String {
        match self {
            Schedule::EverySecond => "* * * * * *".to_string(),
            Schedule::Hourly { minute } => format!("{minute} * * * *"),
        }
    }

    /// The ticks in `[from, to)`, ms of Redis time (UTC: the jobs use UTC).
    fn ticks(self, from: i64, to: i64) -> Vec<i64> {
        let (offset, period) = match self {
            Schedule::EverySecond => (0, 1_000),
            Schedule::Hourly { minute } => (i64::from(minute) * 60_000, 3_600_000),
        };
        let first = ceil_to(from - offset, period) + offset;
        (first..to).step_by(period as usize).collect()
    }
}

fn ceil_to(x: i64, m: i64) -> i64 {
    let down = x.div_euclid(m) * m;
    if down == x { x } else { down + m }
}

/// One outcome entry, the fields the bench needs.
struct Rec {
    tick: i64,
    started_ms: Option<i64>,
    status: String,
    replica: String,
}

#[derive(Debug, Clone, Copy)]
struct Percentiles {
    p50: i64,
    p99: i64,
    max: i64,
    count: usize,
}

impl Percentiles {
    fn of(mut values: Vec<i64>) -> Option<Percentiles> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let rank = |p: f64| {
            let n = values.len();
            let index = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
            values[index]
        };
        Some(Percentiles {
            p50: rank(0.50),
            p99: rank(0.99),
            max: *values.last().expect("not empty"),
            count: values.len(),
        })
    }

    fn json(p: Option<Percentiles>) -> Value {
        p.map_or(
            Value::Null,
            |p| json!({"p50_ms": p.p50, "p99_ms": p.p99, "max_ms": p.max, "count": p.count}),
        )
    }

    fn show(p: Option<Percentiles>) -> String {
        p.map_or("-".to_string(), |p| {
            format!("{} / {} / {} ms", p.p50, p.p99, p.max)
        })
    }
}

/// What the outcome streams say about the ticks in `[t0, t1)`.
#[derive(Default)]
struct TickStats {
    due: u64,
    runs_started: u64,
    duplicates: u64,
    missed: u64,
    /// Outcomes in the window with another status than `ok`.
    other: BTreeMap<String, u64>,
    lateness_ms: Vec<i64>,
}

impl TickStats {
    fn new(outcomes: &[Vec<Rec>], schedule: Schedule, t0: i64, t1: i64) -> TickStats {
        let due = schedule.ticks(t0, t1);
        let mut stats = TickStats {
            due: (due.len() * outcomes.len()) as u64,
            ..TickStats::default()
        };
        for recs in outcomes {
            let mut ok: HashMap<i64, u32> = HashMap::new();
            let mut ran: HashSet<i64> = HashSet::new();
            for rec in recs.iter().filter(|r| r.tick >= t0 && r.tick < t1) {
                if rec.status == "ok" {
                    *ok.entry(rec.tick).or_default() += 1;
                    stats.runs_started += 1;
                    if let Some(started) = rec.started_ms {
                        stats.lateness_ms.push(started - rec.tick);
                    }
                } else {
                    *stats.other.entry(rec.status.clone()).or_default() += 1;
                    if rec.status != "missed" {
                        ran.insert(rec.tick);
                    }
                }
            }
            stats.duplicates += ok.values().filter(|&&n| n > 1).count() as u64;
            stats.missed += due
                .iter()
                .filter(|t| !ok.contains_key(t) && !ran.contains(t))
                .count() as u64;
        }
        stats
    }

    fn other_total(&self) -> u64 {
        self.other.values().sum()
    }

    fn other_text(&self) -> String {
        if self.other.is_empty() {
            "none".to_string()
        } else {
            self.other
                .iter()
                .map(|(status, n)| format!("{status} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

/// The figures of one measured window.
struct Figures {
    label: String,
    replicas: usize,
    t0: i64,
    t1: i64,
    seconds: f64,
    ticks: TickStats,
    lateness: Option<Percentiles>,
    commands: u64,
    commands_by_name: BTreeMap<String, u64>,
    commands_per_run: Option<f64>,
    commands_per_replica_s: f64,
    claims_by_result: BTreeMap<String, u64>,
    claim_attempts: u64,
    claims_per_tick: Option<f64>,
    claims_per_s: f64,
    /// Per replica (name, CPU seconds in the window).
    cpu: Vec<(String, f64)>,
    redis_cpu: Option<f64>,
    snapshot_ms: [u64; 2],
}

impl Figures {
    fn new(window: &Window, outcomes: &[Vec<Rec>], schedule: Schedule) -> Figures {
        let ticks = TickStats::new(outcomes, schedule, window.t0, window.t1);
        let lateness = Percentiles::of(ticks.lateness_ms.clone());
        let seconds = (window.t1 - window.t0) as f64 / 1000.0;
        let replicas = window.replicas.len();
        let (start, end) = (&window.start, &window.end);
        // The bench's own commands: the first INFO (counted after its
        // reply) and whatever it sent before the second.
        let own = end.issued_before_info - start.issued_after_info + 1;
        let mut commands_by_name = BTreeMap::new();
        for (name, &calls) in &end.commands {
            let before = start.commands.get(name).copied().unwrap_or(0);
            if calls > before {
                commands_by_name.insert(name.clone(), calls - before);
            }
        }
        let total: u64 = commands_by_name.values().sum();
        let commands = total.saturating_sub(own);
        if let Some(info) = commands_by_name.get_mut("info") {
            *info = info.saturating_sub(own);
        }
        let mut claims_by_result: BTreeMap<String, u64> = BTreeMap::new();
        let mut cpu = Vec::new();
        for &i in &window.replicas {
            if let (Some(Some(a)), Some(Some(b))) = (start.claims.get(i), end.claims.get(i)) {
                for (result, &n) in b {
                    let before = a.get(result).copied().unwrap_or(0);
                    *claims_by_result.entry(result.clone()).or_default() +=
                        n.saturating_sub(before);
                }
            }
            if let (Some(Some(a)), Some(Some(b))) = (start.cpu.get(i), end.cpu.get(i)) {
                cpu.push((window.names[i].clone(), b - a));
            }
        }
        let claim_attempts: u64 = ATTEMPTS
            .iter()
            .map(|r| claims_by_result.get(*r).copied().unwrap_or(0))
            .sum();
        Figures {
            label: window.label.clone(),
            replicas,
            t0: window.t0,
            t1: window.t1,
            seconds,
            lateness,
            commands,
            commands_by_name,
            commands_per_run: (ticks.runs_started > 0)
                .then(|| commands as f64 / ticks.runs_started as f64),
            commands_per_replica_s: commands as f64 / replicas.max(1) as f64 / seconds,
            claims_per_tick: (ticks.due > 0).then(|| claim_attempts as f64 / ticks.due as f64),
            claims_per_s: claim_attempts as f64 / seconds,
            claims_by_result,
            claim_attempts,
            cpu,
            snapshot_ms: window.snapshot_ms,
            redis_cpu: match (start.redis_cpu, end.redis_cpu) {
                (Some(a), Some(b)) => Some(b - a),
                _ => None,
            },
            ticks,
        }
    }

    fn cpu_text(&self) -> String {
        if self.cpu.is_empty() {
            return "-".to_string();
        }
        let pct: Vec<f64> = self
            .cpu
            .iter()
            .map(|(_, s)| s / self.seconds * 100.0)
            .collect();
        let mean = pct.iter().sum::<f64>() / pct.len() as f64;
        let max = pct.iter().copied().fold(0.0, f64::max);
        format!("{mean:.1} % / {max:.1} %")
    }

    fn json(&self) -> Value {
        json!({
            "label": self.label,
            "replicas": self.replicas,
            "t0_ms": self.t0,
            "t1_ms": self.t1,
            "t0": format_ms(self.t0),
            "seconds": self.seconds,
            "ticks_due": self.ticks.due,
            "runs_started": self.ticks.runs_started,
            "duplicates": self.ticks.duplicates,
            "missed": self.ticks.missed,
            "other_outcomes": self.ticks.other,
            "lateness": Percentiles::json(self.lateness),
            "redis_commands": self.commands,
            "redis_commands_by_name": self.commands_by_name,
            "redis_commands_per_run": self.commands_per_run,
            "redis_commands_per_replica_per_s": self.commands_per_replica_s,
            "claims_by_result": self.claims_by_result,
            "claim_attempts": self.claim_attempts,
            "claim_attempts_per_tick": self.claims_per_tick,
            "claims_per_s": self.claims_per_s,
            "replica_cpu_s_in_window": self.cpu.iter().map(|(n, s)| json!({"replica": n, "cpu_s": s})).collect::<Vec<_>>(),
            "redis_server_cpu_s_in_window": self.redis_cpu,
            "snapshot_ms": self.snapshot_ms,
        })
    }
}

/// The rows of the figures table: a name and one value per window.
fn figures_rows(figures: &[Figures], ceiling: &Ceiling) -> Vec<(String, Vec<String>)> {
    let row = |name: &str, value: &dyn Fn(&Figures) -> String| {
        (name.to_string(), figures.iter().map(value).collect())
    };
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    vec![
        row("ticks due", &|f| f.ticks.due.to_string()),
        row("runs started (ok)", &|f| f.ticks.runs_started.to_string()),
        row("duplicates", &|f| f.ticks.duplicates.to_string()),
        row("missed", &|f| f.ticks.missed.to_string()),
        row("other outcomes", &|f| f.ticks.other_text()),
        row("lateness p50 / p99 / max", &|f| {
            Percentiles::show(f.lateness)
        }),
        row("Redis commands (Lua inner calls incl.)", &|f| {
            f.commands.to_string()
        }),
        row("Redis commands per run", &|f| opt(f.commands_per_run, 2)),
        row("Redis commands /s per replica", &|f| {
            format!("{:.2}", f.commands_per_replica_s)
        }),
        row("  of which EVALSHA", &|f| {
            f.commands_by_name
                .get("evalsha")
                .copied()
                .unwrap_or(0)
                .to_string()
        }),
        row("claim attempts", &|f| f.claim_attempts.to_string()),
        row("  claim results (all)", &|f| {
            f.claims_by_result
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(result, n)| format!("{result} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }),
        row("claim attempts per tick", &|f| opt(f.claims_per_tick, 3)),
        row("claims/s (all replicas)", &|f| {
            format!("{:.0}", f.claims_per_s)
        }),
        row("claims/s / ceiling", &|f| {
            ceiling.rps.map_or("-".to_string(), |rps| {
                format!("{:.2} %", f.claims_per_s / rps * 100.0)
            })
        }),
        row("replica CPU in window (mean / max)", &|f| f.cpu_text()),
        row("snapshots took (start / end)", &|f| {
            format!("{} / {} ms", f.snapshot_ms[0], f.snapshot_ms[1])
        }),
        row("redis-server CPU in window", &|f| {
            f.redis_cpu.map_or("-".to_string(), |s| {
                format!("{:.1} %", s / f.seconds * 100.0)
            })
        }),
    ]
}

/// The ticks right after the kill in the scaling scenario.
struct Takeover {
    kill_ms: i64,
    victim: String,
    ticks: TickStats,
    lateness: Option<Percentiles>,
    /// Ticks after the kill that started 100 ms or more late: a later rank
    /// claimed them.
    late_100: usize,
    /// For each job whose last run before the kill was the victim's: kill →
    /// start of its next run by another replica.
    handover: Option<Percentiles>,
    handover_jobs: usize,
    handover_never: usize,
}

impl Takeover {
    fn new(outcomes: &[Vec<Rec>], schedule: Schedule, kill_ms: i64, victim: &str) -> Takeover {
        let ticks = TickStats::new(outcomes, schedule, kill_ms + 1, kill_ms + TAKEOVER_MS + 1);
        let lateness = Percentiles::of(ticks.lateness_ms.clone());
        let late_100 = ticks.lateness_ms.iter().filter(|&&l| l >= 100).count();
        let mut handover = Vec::new();
        let mut never = 0;
        for recs in outcomes {
            let mut ok: Vec<&Rec> = recs.iter().filter(|r| r.status == "ok").collect();
            ok.sort_by_key(|r| r.tick);
            let last_before = ok.iter().rev().find(|r| r.tick <= kill_ms);
            if last_before.is_none_or(|r| r.replica != victim) {
                continue;
            }
            match ok.iter().find(|r| r.tick > kill_ms && r.replica != victim) {
                Some(next) => handover.push(next.started_ms.unwrap_or(next.tick) - kill_ms),
                None => never += 1,
            }
        }
        Takeover {
            kill_ms,
            victim: victim.to_string(),
            handover_jobs: handover.len() + never,
            handover: Percentiles::of(handover),
            handover_never: never,
            ticks,
            lateness,
            late_100,
        }
    }

    fn rows(&self) -> Vec<Vec<String>> {
        vec![
            vec![
                "killed".into(),
                format!("{} at {}", self.victim, format_ms(self.kill_ms)),
            ],
            vec!["ticks due".into(), self.ticks.due.to_string()],
            vec![
                "runs started (ok)".into(),
                self.ticks.runs_started.to_string(),
            ],
            vec!["duplicates".into(), self.ticks.duplicates.to_string()],
            vec!["missed".into(), self.ticks.missed.to_string()],
            vec!["other outcomes".into(), self.ticks.other_text()],
            vec![
                "lateness p50 / p99 / max".into(),
                Percentiles::show(self.lateness),
            ],
            vec![
                "ticks started ≥ 100 ms late".into(),
                self.late_100.to_string(),
            ],
            vec![
                format!("jobs last run by {} before the kill", self.victim),
                self.handover_jobs.to_string(),
            ],
            vec![
                "  kill → their next run elsewhere p50 / p99 / max".into(),
                Percentiles::show(self.handover),
            ],
            vec!["  never run again".into(), self.handover_never.to_string()],
        ]
    }

    fn json(&self) -> Value {
        json!({
            "victim": self.victim,
            "kill_ms": self.kill_ms,
            "kill": format_ms(self.kill_ms),
            "window_ms": TAKEOVER_MS,
            "ticks_due": self.ticks.due,
            "runs_started": self.ticks.runs_started,
            "duplicates": self.ticks.duplicates,
            "missed": self.ticks.missed,
            "other_outcomes": self.ticks.other,
            "lateness": Percentiles::json(self.lateness),
            "max_lateness_ms": self.lateness.map(|l| l.max),
            "ticks_late_100ms_or_more": self.late_100,
            "victim_jobs": self.handover_jobs,
            "kill_to_next_run_elsewhere": Percentiles::json(self.handover),
            "victim_jobs_never_run_again": self.handover_never,
        })
    }
}

// ---------------------------------------------------------------------------
// The soak: keys and memory over time
// ---------------------------------------------------------------------------

/// What follows a job's hash tag in the names of its keys
/// (`bench:{j00001}:state`), in the order of the soak's columns.
const JOB_KEY_KINDS: [&str; 7] = [
    "state", "runs", "running", "lease", "reruns", "done", "done_at",
];

/// The kind of `…:{J}:done:<run id>`: the per-run done marker written
/// before issue 16, one string per recorded run.
const PER_RUN_DONE: &str = "done:<run id>";

/// The keys of the deployment, outside every job's hash tag.
const DEPLOYMENT_KEY_KINDS: [&str; 3] = ["replicas", "epoch", "triggers"];

/// A key the soak has no name for: a new key of the data model shows here.
const OTHER_KEY_KIND: &str = "other";

/// The kinds that remember which runs are recorded (so a second delivery
/// of an outcome is a no-op): the dedup window of issue 16 (`done` hash,
/// `done_at` sorted set) and the per-run markers of before.
const DEDUP_KEY_KINDS: [&str; 3] = ["done", "done_at", PER_RUN_DONE];

/// The parts of `INFO memory` the soak keeps beside `used_memory`: the data
/// set, and the overhead (clients' buffers, scripts, the key tables) that
/// moves without the data.
const MEMORY_PARTS: [&str; 5] = [
    "used_memory_dataset",
    "used_memory_overhead",
    "mem_clients_normal",
    "used_memory_scripts",
    "used_memory_startup",
];

/// The soak's columns, in order.
fn key_kinds() -> Vec<&'static str> {
    let mut kinds = JOB_KEY_KINDS.to_vec();
    kinds.push(PER_RUN_DONE);
    kinds.extend(DEPLOYMENT_KEY_KINDS);
    kinds.push(OTHER_KEY_KIND);
    kinds
}

/// The kind of a key: for a job's key, what follows its hash tag
/// (`bench:{j00001}:state` is `state`; `lease:<run id>`, a lease under
/// `overlap = "allow"`, is `lease`; `done:<run id>` is [`PER_RUN_DONE`]);
/// for the deployment's keys their name; anything else
/// [`OTHER_KEY_KIND`].
fn key_kind(key: &str) -> &'static str {
    let Some(rest) = key
        .strip_prefix(KEY_PREFIX)
        .and_then(|rest| rest.strip_prefix(':'))
    else {
        return OTHER_KEY_KIND;
    };
    let known = |kinds: &[&'static str], name: &str| {
        kinds
            .iter()
            .copied()
            .find(|&kind| kind == name)
            .unwrap_or(OTHER_KEY_KIND)
    };
    match job_key_part(rest) {
        Some((_, part)) => match part.split_once(':') {
            Some(("lease", _)) => "lease",
            Some(("done", _)) => PER_RUN_DONE,
            Some(_) => OTHER_KEY_KIND,
            None => known(&JOB_KEY_KINDS, part),
        },
        None => known(&DEPLOYMENT_KEY_KINDS, rest),
    }
}

/// `{job}:part` → (job, part): a job's key without the prefix, split at
/// its hash tag.
fn job_key_part(rest: &str) -> Option<(&str, &str)> {
    let (job, after) = rest.strip_prefix('{')?.split_once('}')?;
    Some((job, after.strip_prefix(':')?))
}

/// The most keys the soak's Redis should hold if memory is bounded by the
/// job table and the history kept (issue 16), from the data model in
/// `src/store.rs`. Per job, the two keys under its hash tag that live as
/// long as the job: `state` (hash) and `runs` (the outcome stream, trimmed
/// to `history`); plus its `dedup_keys_per_job` keys that remember which
/// runs are recorded (the dedup window: since issue 16 at most `done`, a
/// hash, and `done_at`, a sorted set; before it, one `done:<run id>`
/// string per run, kept 7 days, so a count that grows with the runs).
/// Per run in flight, two: its job's `running` hash and its lease (with
/// `overlap = "skip"`, the soak's, at most one run per job). And the three
/// keys of the deployment: `replicas` (heartbeats), `epoch` and `triggers`
/// (the manual-run stream). Not counted: `reruns` (only while an abandoned
/// tick waits for its rerun) and locks' keys; the soak has neither.
fn soak_key_bound(jobs: u64, dedup_keys_per_job: u64, runs_in_flight: u64) -> u64 {
    jobs * (2 + dedup_keys_per_job) + 2 * runs_in_flight + 3
}

/// How the binary under test remembers which runs are recorded, read from
/// the keys it wrote: the dedup term of [`soak_key_bound`].
#[derive(Debug, Clone, Copy)]
enum DedupKeys {
    /// The window of issue 16: per job a `done` hash and a `done_at`
    /// sorted set, whatever the number of runs.
    Window,
    /// One `done:<run id>` string per recorded run, kept 7 days;
    /// `most_per_job` is the most one job had at the sample.
    PerRun { most_per_job: u64 },
    /// No dedup key at all: nothing was recorded.
    Absent,
}

impl DedupKeys {
    fn of(sample: &SoakSample) -> DedupKeys {
        if sample.kind(PER_RUN_DONE) > 0 {
            DedupKeys::PerRun {
                most_per_job: sample.dedup_keys_most_per_job,
            }
        } else if sample.kind("done") + sample.kind("done_at") > 0 {
            DedupKeys::Window
        } else {
            DedupKeys::Absent
        }
    }

    fn per_job(self) -> u64 {
        match self {
            DedupKeys::Window => 2,
            DedupKeys::PerRun { most_per_job } => most_per_job,
            DedupKeys::Absent => 0,
        }
    }

    fn describe(self) -> String {
        match self {
            DedupKeys::Window => "2: a window (`done`, `done_at`)".to_string(),
            DedupKeys::PerRun { most_per_job } => format!(
                "{most_per_job} (the most of one job): one `done:<run id>` per run, for 7 days"
            ),
            DedupKeys::Absent => "0: none written".to_string(),
        }
    }
}

/// The elapsed times (ms) of the soak's samples: 0, every
/// [`SOAK_SAMPLE_EVERY_MS`], and the end when it is not one of those.
fn soak_sample_offsets(seconds: u64) -> Vec<i64> {
    let end = seconds as i64 * 1_000;
    let mut offsets: Vec<i64> = (0..=end).step_by(SOAK_SAMPLE_EVERY_MS as usize).collect();
    if offsets.last() != Some(&end) {
        offsets.push(end);
    }
    offsets
}

/// What Redis and the replicas held at one point of the soak.
struct SoakSample {
    /// Since the first sample, ms of Redis time.
    elapsed_ms: i64,
    /// `DBSIZE`.
    keys: u64,
    /// The keys `SCAN` returned, by [`key_kind`]. A key created or expired
    /// during the scan may be counted or not, so the sum can differ from
    /// `keys` by a few.
    keys_by_kind: BTreeMap<&'static str, u64>,
    /// The most dedup keys ([`DEDUP_KEY_KINDS`]) one job had.
    dedup_keys_most_per_job: u64,
    /// `used_memory` of `INFO memory`, bytes.
    used_memory: u64,
    /// The parts of `used_memory` in [`MEMORY_PARTS`] (for the JSON): what
    /// moved when `used_memory` did.
    memory_parts: BTreeMap<&'static str, u64>,
    redis_rss_kb: Option<u64>,
    /// The sum of the outcome streams' `entries-added` (Redis 7): every
    /// outcome recorded since the start, whatever `history` trimmed since.
    /// `None` when Redis does not report it.
    outcomes: Option<u64>,
    /// Per replica (in start order) its VmRSS; `None` once it exited.
    rss_kb: Vec<Option<u64>>,
}

impl SoakSample {
    fn kind(&self, kind: &str) -> u64 {
        self.keys_by_kind.get(kind).copied().unwrap_or(0)
    }

    fn json(&self, names: &[String]) -> Value {
        json!({
            "elapsed_s": self.elapsed_ms as f64 / 1000.0,
            "keys": self.keys,
            "keys_by_kind": self.keys_by_kind,
            "dedup_keys_most_per_job": self.dedup_keys_most_per_job,
            "used_memory_bytes": self.used_memory,
            "info_memory": self.memory_parts,
            "redis_rss_kb": self.redis_rss_kb,
            "outcomes_recorded": self.outcomes,
            "replica_rss_kb": names
                .iter()
                .zip(&self.rss_kb)
                .map(|(name, kb)| json!({"replica": name, "rss_kb": kb}))
                .collect::<Vec<_>>(),
        })
    }
}

/// The soak's table: one row per sample, one column per key kind that
/// occurs in any sample.
fn print_soak_samples(samples: &[SoakSample], names: &[String]) {
    let kinds: Vec<&str> = key_kinds()
        .into_iter()
        .filter(|kind| samples.iter().any(|s| s.kind(kind) > 0))
        .collect();
    let mut header = vec![
        "elapsed s".to_string(),
        "outcomes".to_string(),
        "keys".to_string(),
    ];
    header.extend(kinds.iter().map(|kind| kind.to_string()));
    header.push("used_memory MB".to_string());
    header.extend(names.iter().map(|name| format!("{name} RSS MB")));
    let first_outcomes = samples.first().and_then(|s| s.outcomes);
    let rows: Vec<Vec<String>> = samples
        .iter()
        .map(|s| {
            let mut row = vec![
                format!("{}", s.elapsed_ms / 1_000),
                match (first_outcomes, s.outcomes) {
                    (Some(a), Some(b)) => format!("+{}", b.saturating_sub(a)),
                    _ => "-".to_string(),
                },
                s.keys.to_string(),
            ];
            row.extend(kinds.iter().map(|kind| s.kind(kind).to_string()));
            row.push(format!("{:.2}", megabytes(s.used_memory)));
            row.extend(s.rss_kb.iter().map(|&kb| kb_as_megabytes(kb)));
            row
        })
        .collect();
    print_table(&header, &rows);
    println!(
        "  (outcomes: recorded since the first sample; keys by kind from a SCAN, which may \
         differ from DBSIZE by the keys written or expired meanwhile)"
    );
}

fn megabytes(bytes: u64) -> f64 {
    bytes as f64 / 1024.0 / 1024.0
}

/// A `/proc` kB figure in MB, one decimal; `-` when it could not be read.
fn kb_as_megabytes(kb: Option<u64>) -> String {
    kb.map_or("-".to_string(), |kb| format!("{:.1}", kb as f64 / 1024.0))
}

// ---------------------------------------------------------------------------
// The cluster: redis-server and replicas
// ---------------------------------------------------------------------------

/// What one replica looked like at the end.
struct ReplicaStats {
    name: String,
    pid: u32,
    cpu_s: Option<f64>,
    hwm_kb: Option<u64>,
    rss_kb: Option<u64>,
    /// VmHWM before the first scrape of /metrics (rendering them allocates).
    hwm_before_scrape_kb: Option<u64>,
    exit: String,
    /// Lines of its log: WARN, ERROR, panics.
    log: LogCounts,
}

#[derive(Debug, Default, Clone, Copy)]
struct LogCounts {
    warn: usize,
    error: usize,
    panics: usize,
}

impl LogCounts {
    fn read(path: &Path) -> LogCounts {
        let text = std::fs::read(path).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let mut counts = LogCounts::default();
        for line in text.lines() {
            if line.contains(" WARN ") {
                counts.warn += 1;
            } else if line.contains(" ERROR ") {
                counts.error += 1;
            } else if line.contains("panicked at") {
                counts.panics += 1;
            }
        }
        counts
    }
}

impl ReplicaStats {
    fn json(&self) -> Value {
        json!({
            "replica": self.name,
            "pid": self.pid,
            "cpu_s": self.cpu_s,
            "peak_rss_kb": self.hwm_kb,
            "rss_kb": self.rss_kb,
            "peak_rss_before_first_scrape_kb": self.hwm_before_scrape_kb,
            "exit": self.exit,
            "log_warn_lines": self.log.warn,
            "log_error_lines": self.log.error,
            "log_panics": self.log.panics,
        })
    }
}

fn print_replicas(replicas: &[ReplicaStats]) {
    let mb =
        |kb: Option<u64>| kb.map_or("-".to_string(), |kb| format!("{:.1}", kb as f64 / 1024.0));
    let rows: Vec<Vec<String>> = replicas
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.pid.to_string(),
                r.cpu_s.map_or("-".to_string(), |s| format!("{s:.2}")),
                mb(r.hwm_kb),
                mb(r.hwm_before_scrape_kb),
                mb(r.rss_kb),
                r.exit.clone(),
                format!("{} / {} / {}", r.log.warn, r.log.error, r.log.panics),
            ]
        })
        .collect();
    println!("\n  replicas (read just before SIGTERM):");
    print_table(
        &[
            "replica",
            "pid",
            "CPU s (total)",
            "peak RSS MB",
            "peak before 1st scrape",
            "RSS MB",
            "exit",
            "log WARN / ERROR / panics",
        ]
        .map(String::from),
        &rows,
    );
}

/// The figures of one point in time.
struct Snapshot {
    /// `INFO commandstats`: calls by command.
    commands: BTreeMap<String, u64>,
    /// Commands the bench had sent before, and after, its INFO.
    issued_before_info: u64,
    issued_after_info: u64,
    /// Per replica index: claims by result (None: not running).
    claims: Vec<Option<BTreeMap<String, u64>>>,
    cpu: Vec<Option<f64>>,
    redis_cpu: Option<f64>,
}

/// A measured window: ticks `[t0, t1)`, snapshots at `t0 − 500` and
/// `t1 − 500` (between ticks).
struct Window {
    label: String,
    replicas: Vec<usize>,
    names: Vec<String>,
    t0: i64,
    t1: i64,
    start: Snapshot,
    end: Snapshot,
    /// How long the two snapshots took: INFO is read first, then every
    /// replica's /metrics, so a slow scrape shifts the claims' window.
    snapshot_ms: [u64; 2],
}

/// How the cluster ended.
struct End {
    replicas: Vec<ReplicaStats>,
}

struct Cluster<'a> {
    env: &'a Env,
    name: String,
    dir: PathBuf,
    redis: RedisProcess,
    conn: Conn,
    replicas: Vec<Replica>,
    jobs_toml: String,
    jobs: usize,
    /// Lines added to `[daemon]` of every replica's config (the soak's
    /// `history`); empty for the other scenarios, which keep the defaults.
    daemon_lines: String,
    /// Redis time − local time, ms.
    offset_ms: i64,
    checked: bool,
    /// VmHWM of each replica before it was first scraped.
    hwm_before_scrape: Vec<Option<u64>>,
}

impl<'a> Cluster<'a> {
    fn start(env: &'a Env, name: &str, jobs: usize, schedule: Schedule) -> Result<Cluster<'a>> {
        Cluster::start_with_daemon_lines(env, name, jobs, schedule, "")
    }

    /// [`Cluster::start`], with `daemon_lines` (TOML, one setting a line)
    /// added to `[daemon]` of every replica's config.
    fn start_with_daemon_lines(
        env: &'a Env,
        name: &str,
        jobs: usize,
        schedule: Schedule,
        daemon_lines: &str,
    ) -> Result<Cluster<'a>> {
        let dir = env.work.join(name);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let redis = RedisProcess::start(&dir)?;
        let conn = Conn {
            inner: redis.connect(Duration::from_secs(60))?,
            issued: 0,
        };
        let mut jobs_toml = String::with_capacity(jobs * 64);
        for n in 0..jobs {
            jobs_toml.push_str(&format!(
                "[jobs.{}]\nschedule = \"{}\"\n{}\n\n",
                job_name(n),
                schedule.cron(),
                env.kind.toml()
            ));
        }
        let mut cluster = Cluster {
            env,
            name: name.to_string(),
            dir,
            redis,
            conn,
            replicas: Vec::new(),
            jobs_toml,
            jobs,
            daemon_lines: daemon_lines.to_string(),
            offset_ms: 0,
            checked: false,
            hwm_before_scrape: Vec::new(),
        };
        cluster.offset_ms = cluster.measure_offset()?;
        Ok(cluster)
    }

    fn measure_offset(&mut self) -> Result<i64> {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..5 {
            let before = local_ms();
            let redis_ms = self.redis_time()?;
            let after = local_ms();
            let rtt = after - before;
            let offset = redis_ms - (before + after) / 2;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, offset));
            }
        }
        Ok(best.expect("five measurements").1)
    }

    fn redis_time(&mut self) -> Result<i64> {
        let (secs, micros): (i64, i64) = self.conn.query(&redis::cmd("TIME"))?;
        Ok(secs * 1_000 + micros / 1_000)
    }

    /// Starts `n` more replicas and waits until every one is ready and has
    /// said where its metrics are.
    fn add_replicas(&mut self, n: usize) -> Result<()> {
        let first = self.replicas.len();
        for i in first..first + n {
            let name = format!("bench-{}", i + 1);
            let config = self.write_config(&name)?;
            if !self.checked {
                check_config(&self.env.binary, &config, self.env.kind)?;
                self.checked = true;
            }
            let replica = Replica::start(
                &self.env.binary,
                &config,
                &name,
                &self.dir,
                &self.env.rust_log,
            )?;
            self.replicas.push(replica);
            self.hwm_before_scrape.push(None);
        }
        let started = Instant::now();
        let deadline = started + READY_TIMEOUT;
        loop {
            check_interrupted()?;
            let mut pending = Vec::new();
            for replica in &mut self.replicas[first..] {
                replica.check_ready()?;
                if !(replica.ready && replica.port.is_some()) {
                    pending.push(replica.name.clone());
                }
            }
            if pending.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let replica = self
                    .replicas
                    .iter()
                    .find(|r| r.name == pending[0])
                    .expect("pending names a replica");
                bail!(
                    "{} not ready within {READY_TIMEOUT:?} (ready: {}, metrics port: {:?}; the \
                     replicas' RUST_LOG must let `metrics listening on` through); last lines \
                     of {}:\n{}",
                    pending.join(", "),
                    replica.ready,
                    replica.port,
                    replica.log.display(),
                    indent(&tail(&replica.log, 15))
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let names: Vec<String> = self.replicas[first..]
            .iter()
            .map(|r| {
                format!(
                    "{} (pid {}, metrics :{})",
                    r.name,
                    r.pid(),
                    r.port.unwrap_or(0)
                )
            })
            .collect();
        println!(
            "  ready after {:.1} s: {}",
            started.elapsed().as_secs_f64(),
            names.join(", ")
        );
        Ok(())
    }

    fn warm_up(&mut self) -> Result<()> {
        let until = Instant::now() + WARMUP;
        while Instant::now() < until {
            check_interrupted()?;
            self.check_alive()?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Fails when a replica that should be running has exited.
    fn check_alive(&mut self) -> Result<()> {
        for replica in &mut self.replicas {
            if !replica.killed && replica.poll() {
                bail!(
                    "{} exited by itself with {}; last lines of {}:\n{}",
                    replica.name,
                    replica.exit.expect("polled"),
                    replica.log.display(),
                    indent(&tail(&replica.log, 15))
                );
            }
        }
        Ok(())
    }

    fn write_config(&self, name: &str) -> Result<PathBuf> {
        let state_dir = self.dir.join(format!("state-{name}"));
        std::fs::create_dir_all(&state_dir)
            .with_context(|| format!("cannot create {}", state_dir.display()))?;
        let text = format!(
            r#"# Written by the cronlease benchmark (examples/bench.rs), scenario {scenario}.
[redis]
url = {url}
key_prefix = "{KEY_PREFIX}"
command_timeout = "2s"

[daemon]
replica_id = "{name}"
state_dir = {state_dir}
metrics_listen = "127.0.0.1:0"
lease = "30s"
heartbeat = "5s"
shutdown_grace = "5s"
kill_grace = "1s"
{daemon_lines}
{jobs}"#,
            scenario = self.name,
            url = toml_string(&self.redis.url()),
            state_dir = toml_string(&state_dir.to_string_lossy()),
            daemon_lines = self.daemon_lines,
            jobs = self.jobs_toml,
        );
        let path = self.dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Sleeps until `target` of Redis time, watching the replicas.
    fn sleep_until_redis(&mut self, target: i64, what: &str) -> Result<()> {
        let mut next_progress = local_ms() + 10_000;
        loop {
            check_interrupted()?;
            self.check_alive()?;
            let now = local_ms() + self.offset_ms;
            if now >= target {
                return Ok(());
            }
            if local_ms() >= next_progress {
                println!("    {what}: {:.0} s to go", (target - now) as f64 / 1000.0);
                next_progress += 10_000;
            }
            std::thread::sleep(Duration::from_millis((target - now).clamp(1, 100) as u64));
        }
    }

    /// Measures `seconds` whole seconds of ticks.
    fn window(&mut self, label: &str, seconds: u64) -> Result<Window> {
        let now = self.redis_time()?;
        let t0 = ceil_to(now + 700, 1_000);
        let t1 = t0 + seconds as i64 * 1_000;
        self.sleep_until_redis(t0 - 500, label)?;
        let taken = Instant::now();
        let start = self.snapshot()?;
        let start_took = taken.elapsed();
        println!(
            "  [{label}] measuring ticks {} … {} ({} replicas; snapshot took {} ms)",
            format_ms(t0),
            format_ms(t1 - 1_000),
            self.live().len(),
            taken.elapsed().as_millis()
        );
        self.sleep_until_redis(t1 - 500, label)?;
        let taken = Instant::now();
        let end = self.snapshot()?;
        let end_took = taken.elapsed();
        println!(
            "  [{label}] window done (snapshot took {} ms)",
            end_took.as_millis()
        );
        Ok(Window {
            label: label.to_string(),
            replicas: self.live(),
            names: self.replicas.iter().map(|r| r.name.clone()).collect(),
            t0,
            t1,
            start,
            end,
            snapshot_ms: [start_took.as_millis() as u64, end_took.as_millis() as u64],
        })
    }

    fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&i| self.replicas[i].exit.is_none())
            .collect()
    }

    fn snapshot(&mut self) -> Result<Snapshot> {
        for i in self.live() {
            if self.hwm_before_scrape[i].is_none() {
                self.hwm_before_scrape[i] = proc_status_kb(self.replicas[i].pid(), "VmHWM");
            }
        }
        let issued_before_info = self.conn.issued;
        let info: String = self.conn.query(redis::cmd("INFO").arg("commandstats"))?;
        let issued_after_info = self.conn.issued;
        let commands = parse_commandstats(&info);
        // CPU next, before the scrapes: rendering /metrics costs CPU too.
        let clk = self.env.clk_tck;
        let cpu = self
            .replicas
            .iter()
            .map(|r| {
                if r.exit.is_none() {
                    proc_cpu_s(r.pid(), clk)
                } else {
                    None
                }
            })
            .collect();
        let redis_cpu = proc_cpu_s(self.redis.pid(), clk);
        let ports: Vec<Option<u16>> = self
            .replicas
            .iter()
            .map(|r| if r.exit.is_none() { r.port } else { None })
            .collect();
        let scraped: Vec<Option<Result<BTreeMap<String, u64>>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = ports
                .iter()
                .map(|port| port.map(|port| scope.spawn(move || scrape_claims(port))))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("scrape thread panicked")))
                    })
                })
                .collect()
        });
        let mut claims = Vec::new();
        for (i, result) in scraped.into_iter().enumerate() {
            claims.push(match result {
                None => None,
                Some(result) => Some(result.with_context(|| {
                    format!("cannot read the metrics of {}", self.replicas[i].name)
                })?),
            });
        }
        Ok(Snapshot {
            commands,
            issued_before_info,
            issued_after_info,
            claims,
            cpu,
            redis_cpu,
        })
    }

    fn replica_stats(&mut self, i: usize) -> ReplicaStats {
        let replica = &mut self.replicas[i];
        let pid = replica.pid();
        // A reaped pid may belong to another process by now.
        let alive = !replica.poll();
        ReplicaStats {
            name: replica.name.clone(),
            pid,
            cpu_s: proc_cpu_s(pid, self.env.clk_tck).filter(|_| alive),
            hwm_kb: proc_status_kb(pid, "VmHWM").filter(|_| alive),
            rss_kb: proc_status_kb(pid, "VmRSS").filter(|_| alive),
            hwm_before_scrape_kb: self.hwm_before_scrape[i],
            exit: String::new(),
            log: LogCounts::default(),
        }
    }

    /// Waits until `until` (Redis time), reads every replica's CPU and
    /// memory, and stops them with SIGTERM.
    fn stop(&mut self, until: i64) -> Result<End> {
        self.sleep_until_redis(until, "last outcomes")?;
        let mut stats: Vec<ReplicaStats> = (0..self.replicas.len())
            .map(|i| self.replica_stats(i))
            .collect();
        for replica in &self.replicas {
            replica.sigterm();
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for (replica, stats) in self.replicas.iter_mut().zip(&mut stats) {
            let was_killed = replica.killed;
            stats.exit = match replica.wait_until(deadline) {
                _ if was_killed => "killed (SIGKILL)".to_string(),
                Some(status) if status.success() => "0 after SIGTERM".to_string(),
                Some(status) => format!("{status} after SIGTERM"),
                None => {
                    replica.kill9();
                    format!("did not stop within {STOP_TIMEOUT:?}: killed")
                }
            };
        }
        for (replica, stats) in self.replicas.iter().zip(&mut stats) {
            stats.log = LogCounts::read(&replica.log);
        }
        Ok(End { replicas: stats })
    }

    /// Every outcome of every job with a stream id from `from_ms` on.
    fn read_outcomes(&mut self, from_ms: i64) -> Result<Vec<Vec<Rec>>> {
        let mut all = Vec::with_capacity(self.jobs);
        let batch = 500;
        for first in (0..self.jobs).step_by(batch) {
            let mut pipe = redis::pipe();
            let last = (first + batch).min(self.jobs);
            for n in first..last {
                pipe.cmd("XRANGE")
                    .arg(format!("{KEY_PREFIX}:{{{}}}:runs", job_name(n)))
                    .arg(from_ms.to_string())
                    .arg("+");
            }
            self.conn.issued += (last - first) as u64;
            let streams: Vec<Vec<(String, Vec<String>)>> = pipe
                .query(&mut self.conn.inner)
                .context("cannot read the outcome streams")?;
            for entries in streams {
                let recs = entries
                    .into_iter()
                    .filter_map(|(_id, flat)| {
                        let fields: HashMap<&str, &str> = flat
                            .chunks_exact(2)
                            .map(|p| (p[0].as_str(), p[1].as_str()))
                            .collect();
                        Some(Rec {
                            tick: fields.get("tick")?.parse().ok()?,
                            started_ms: fields.get("started_ms").and_then(|s| s.parse().ok()),
                            status: fields.get("status").copied().unwrap_or("").to_string(),
                            replica: fields.get("replica").copied().unwrap_or("").to_string(),
                        })
                    })
                    .collect();
                all.push(recs);
            }
        }
        Ok(all)
    }

    /// One sample of the soak: `DBSIZE`, a `SCAN` of the whole keyspace,
    /// `INFO memory`, the outcome streams' `entries-added`, and every
    /// replica's and redis-server's RSS.
    fn soak_sample(&mut self, elapsed_ms: i64) -> Result<SoakSample> {
        let keys: u64 = self.conn.query(&redis::cmd("DBSIZE"))?;
        let mut keys_by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut dedup_keys_by_job: HashMap<String, u64> = HashMap::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, names): (u64, Vec<String>) = self
                .conn
                .query(redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(1_000))?;
            for name in &names {
                let kind = key_kind(name);
                *keys_by_kind.entry(kind).or_default() += 1;
                if DEDUP_KEY_KINDS.contains(&kind)
                    && let Some((job, _)) = name
                        .strip_prefix(KEY_PREFIX)
                        .and_then(|rest| rest.strip_prefix(':'))
                        .and_then(job_key_part)
                {
                    *dedup_keys_by_job.entry(job.to_string()).or_default() += 1;
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let info: String = self.conn.query(redis::cmd("INFO").arg("memory"))?;
        let info_field = |name: &str| {
            info.lines().find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(':')?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        };
        let used_memory = info_field("used_memory").context("INFO memory has no used_memory")?;
        let memory_parts = MEMORY_PARTS
            .iter()
            .filter_map(|&name| Some((name, info_field(name)?)))
            .collect();
        let outcomes = self.outcomes_recorded()?;
        let rss_kb = self
            .replicas
            .iter()
            .map(|r| {
                if r.exit.is_none() {
                    proc_status_kb(r.pid(), "VmRSS")
                } else {
                    None
                }
            })
            .collect();
        Ok(SoakSample {
            elapsed_ms,
            keys,
            keys_by_kind,
            dedup_keys_most_per_job: dedup_keys_by_job.values().copied().max().unwrap_or(0),
            used_memory,
            memory_parts,
            redis_rss_kb: proc_status_kb(self.redis.pid(), "VmRSS"),
            outcomes,
            rss_kb,
        })
    }

    /// The sum over the jobs of their outcome stream's `entries-added`
    /// (`XINFO STREAM`): every outcome recorded so far, however many
    /// `history` trimmed. `None` when this Redis does not report it (before
    /// 7.0); a job without a stream has recorded nothing.
    fn outcomes_recorded(&mut self) -> Result<Option<u64>> {
        let mut total = 0;
        let batch = 500;
        for first in (0..self.jobs).step_by(batch) {
            let last = (first + batch).min(self.jobs);
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for n in first..last {
                pipe.cmd("XINFO")
                    .arg("STREAM")
                    .arg(format!("{KEY_PREFIX}:{{{}}}:runs", job_name(n)));
            }
            self.conn.issued += (last - first) as u64;
            let replies: Vec<redis::RedisResult<HashMap<String, redis::Value>>> = pipe
                .query(&mut self.conn.inner)
                .context("cannot read the outcome streams' XINFO")?;
            for (n, reply) in (first..last).zip(replies) {
                let fields = match reply {
                    Ok(fields) => fields,
                    Err(e) if e.to_string().contains("no such key") => continue,
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("XINFO STREAM of job {} failed", job_name(n))
                        });
                    }
                };
                let Some(added) = fields.get("entries-added") else {
                    return Ok(None);
                };
                total += redis::from_redis_value_ref::<u64>(added)
                    .with_context(|| format!("entries-added of job {}", job_name(n)))?;
            }
        }
        Ok(Some(total))
    }

    /// `redis-benchmark … EVALSHA <sha of "return 1"> 0` against this
    /// cluster's redis-server (the replicas are stopped by now).
    fn ceiling(&mut self) -> Result<Ceiling> {
        let sha: String = self
            .conn
            .query(redis::cmd("SCRIPT").arg("LOAD").arg("return 1"))?;
        let args: Vec<String> = [
            "-h",
            "127.0.0.1",
            "-p",
            &self.redis.port.to_string(),
            "-q",
            "-n",
            "200000",
            "-c",
            "50",
            "-P",
            "16",
            "EVALSHA",
            &sha,
            "0",
        ]
        .map(String::from)
        .to_vec();
        let command_line = format!("redis-benchmark {}", args.join(" "));
        println!("  ceiling: {command_line}");
        let out_path = self.dir.join("redis-benchmark.out");
        let out = File::create(&out_path)
            .with_context(|| format!("cannot create {}", out_path.display()))?;
        let mut command = Command::new("redis-benchmark");
        command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::null());
        detach_and_tie_to_parent(&mut command);
        let child = command.spawn().context("cannot start redis-benchmark")?;
        let mut guard = ChildGuard(child);
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            check_interrupted()?;
            if let Some(status) = guard
                .0
                .try_wait()
                .context("cannot wait for redis-benchmark")?
            {
                break status;
            }
            if Instant::now() >= deadline {
                bail!("redis-benchmark did not finish within 120 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        let rps = parse_rps(&text);
        if !status.success() || rps.is_none() {
            println!(
                "  redis-benchmark exited with {status}; output: {:?}",
                text.trim()
            );
        }
        Ok(Ceiling {
            rps,
            command: command_line,
            output: text
                .rsplit(['\r', '\n'])
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string(),
        })
    }
}

/// The ceiling: what one redis-server does with the cheapest EVALSHA.
struct Ceiling {
    rps: Option<f64>,
    command: String,
    output: String,
}

impl Ceiling {
    fn json(&self, claims_per_s: Option<f64>) -> Value {
        json!({
            "command": self.command,
            "output": self.output,
            "evalsha_per_s": self.rps,
            "claims_per_s": claims_per_s,
            "ratio": match (claims_per_s, self.rps) {
                (Some(c), Some(r)) if r > 0.0 => Some(c / r),
                _ => None,
            },
        })
    }
}

fn print_ceiling(ceiling: &Ceiling, claims_per_s: Option<f64>) {
    match (ceiling.rps, claims_per_s) {
        (Some(rps), Some(c)) => println!(
            "\n  ceiling (same redis-server, replicas stopped): {rps:.0} EVALSHA/s; cronlease \
             claims {c:.0}/s = {:.2} % of it",
            c / rps * 100.0
        ),
        (Some(rps), None) => println!("\n  ceiling: {rps:.0} EVALSHA/s"),
        (None, _) => println!("\n  ceiling: not measured ({})", ceiling.output),
    }
}

fn parse_rps(text: &str) -> Option<f64> {
    text.split(['\r', '\n'])
        .filter_map(|line| {
            let before = &line[..line.find(" requests per second")?];
            before.split_whitespace().last()?.parse::<f64>().ok()
        })
        .next_back()
}

fn parse_commandstats(info: &str) -> BTreeMap<String, u64> {
    let mut commands = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, stats)) = rest.split_once(':') else {
            continue;
        };
        let calls = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|n| n.trim().parse().ok());
        if let Some(calls) = calls {
            commands.insert(name.to_string(), calls);
        }
    }
    commands
}

fn job_name(n: usize) -> String {
    format!("j{n:05}")
}

/// A connection that counts the commands the bench sends, so they can be
/// taken out of Redis's command counts.
struct Conn {
    inner: redis::Connection,
    issued: u64,
}

impl Conn {
    fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T> {
        self.issued += 1;
        cmd.query(&mut self.inner)
            .context("a Redis command of the bench failed")
    }
}

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// Kills and reaps a child when dropped.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One `cronlease run` process; dropping it kills it.
struct Replica {
    name: String,
    child: Child,
    log: PathBuf,
    /// Its `NOTIFY_SOCKET`: `READY=1` arrives here.
    notify: UnixDatagram,
    ready: bool,
    port: Option<u16>,
    /// Killed on purpose (the takeover), not a failure.
    killed: bool,
    /// Set once reaped; its pid is never signalled after that.
    exit: Option<ExitStatus>,
}

impl Replica {
    fn start(
        binary: &Path,
        config: &Path,
        name: &str,
        dir: &Path,
        rust_log: &str,
    ) -> Result<Replica> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out
            .try_clone()
            .with_context(|| format!("cannot duplicate the handle of {}", log.display()))?;
        let socket_path = dir.join(format!("{name}.notify"));
        let _ = std::fs::remove_file(&socket_path);
        let notify = UnixDatagram::bind(&socket_path)
            .with_context(|| format!("cannot bind {}", socket_path.display()))?;
        notify
            .set_nonblocking(true)
            .context("cannot make the notify socket non-blocking")?;
        let mut command = Command::new(binary);
        command
            .arg("run")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("RUST_LOG", rust_log)
            .env("NO_COLOR", "1")
            .env("NOTIFY_SOCKET", &socket_path)
            // Symbolizing a backtrace per panic would weigh on CPU and RSS.
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .env_remove("CRONLEASE_CONFIG");
        detach_and_tie_to_parent(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {} run", binary.display()))?;
        Ok(Replica {
            name: name.to_string(),
            child,
            log,
            notify,
            ready: false,
            port: None,
            killed: false,
            exit: None,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads what the replica has said so far: `READY=1` on the notify
    /// socket or `ready` in its log; the metrics port from its log.
    fn check_ready(&mut self) -> Result<()> {
        if self.poll() {
            bail!(
                "{} exited with {} before it was ready; last lines of {}:\n{}",
                self.name,
                self.exit.expect("polled"),
                self.log.display(),
                indent(&tail(&self.log, 15))
            );
        }
        let mut buffer = [0u8; 4096];
        while let Ok(n) = self.notify.recv(&mut buffer) {
            let message = String::from_utf8_lossy(&buffer[..n]);
            if message.lines().any(|l| l == "READY=1") {
                self.ready = true;
            }
        }
        if self.ready && self.port.is_some() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        for line in text.lines() {
            if line.contains("cronlease::daemon: ready") {
                self.ready = true;
            }
            if self.port.is_none()
                && let Some(rest) = line.split("metrics listening on http://").nth(1)
                && let Some(addr) = rest.split('/').next()
                && let Ok(addr) = addr.parse::<SocketAddr>()
            {
                self.port = Some(addr.port());
            }
        }
        Ok(())
    }

    fn poll(&mut self) -> bool {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit.is_some()
    }

    fn sigterm(&self) {
        if self.exit.is_none() {
            let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGTERM);
        }
    }

    fn kill9(&mut self) {
        if self.exit.is_none() {
            self.killed = true;
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        while !self.poll() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.exit
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `text` as a TOML basic string, quotes included.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// Runs `cronlease check` on the first config, so a bad one is reported
/// before any replica starts.
fn check_config(binary: &Path, config: &Path, kind: JobKind) -> Result<()> {
    let output = Command::new(binary)
        .arg("check")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {} check", binary.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if kind == JobKind::Noop && stderr.contains("benchmark_noop") {
            "\n(this cronlease does not know `benchmark_noop` yet: use --job-kind true)"
        } else {
            ""
        };
        let first_lines: Vec<&str> = stderr.lines().take(10).collect();
        bail!(
            "cronlease check rejected {} ({}):\n{}{hint}",
            config.display(),
            output.status,
            first_lines.join("\n")
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// /metrics, /proc, the machine
// ---------------------------------------------------------------------------

/// `cronlease_claims_total` of one replica, summed over jobs, by result.
fn scrape_claims(port: u16) -> Result<BTreeMap<String, u64>> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("cannot connect to {addr}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .context("cannot set a read timeout")?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .context("cannot send the request")?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .context("cannot read the response")?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers in the response")?;
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let status_line = head.lines().next().unwrap_or("");
    if !status_line.contains(" 200") {
        bail!("GET /metrics answered {status_line:?}");
    }
    let raw = &response[split + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(raw)?
    } else {
        raw.to_vec()
    };
    let body = String::from_utf8_lossy(&body);
    let mut claims = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("cronlease_claims_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Some(result) = labels
            .split("result=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
        else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        *claims.entry(result.to_string()).or_default() += value as u64;
    }
    Ok(claims)
}

fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("truncated chunked body")?;
        let size_text = String::from_utf8_lossy(&raw[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .context("bad chunk size")?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if raw.len() < size + 2 {
            bail!("truncated chunk");
        }
        body.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// utime + stime of a process, in seconds.
fn proc_cpu_s(pid: u32, clk_tck: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: the first one is field 3 (state); utime is 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clk_tck)
}

/// A `kB` line of `/proc/PID/status` (`VmHWM`, `VmRSS`).
fn proc_status_kb(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// `sysconf(_SC_CLK_TCK)` through `getconf`; 100 (Linux's) if that fails.
fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

fn machine(binary: &Path) -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let version = |program: &Path| {
        Command::new(program)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let mem_total_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
    });
    json!({
        "nproc": nproc,
        "model_name": model,
        "mem_total_kb": mem_total_kb,
        "redis_server_version": version(Path::new("redis-server")),
        "cronlease_version": version(binary),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
        "date": Utc::now().to_rfc3339(),
    })
}

fn machine_line(machine: &Value) -> String {
    format!(
        "{} × {}, {:.1} GB RAM; {}",
        machine["nproc"],
        machine["model_name"].as_str().unwrap_or("?"),
        machine["mem_total_kb"].as_f64().unwrap_or(0.0) / 1024.0 / 1024.0,
        machine["redis_server_version"]
            .as_str()
            .unwrap_or("redis-server ?")
    )
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// The 1, 5 and 15 minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_string())
}

fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn format_ms(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.format("%H:%M:%S%.3f").to_string())
}

/// Prints rows under a header, columns padded, the first left-aligned.
fn print_table(header: &[String], rows: &[Vec<String>]) {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |row: &[String]| {
        let cells: Vec<String> = (0..columns)
            .map(|i| {
                let cell = row.get(i).map_or("", String::as_str);
                let pad = widths[i] - cell.chars().count();
                format!("{cell}{}", " ".repeat(pad))
            })
            .collect();
        println!("  {}", cells.join(" | ").trim_end());
    };
    line(header);
    println!(
        "  {}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-+-")
    );
    for row in rows {
        line(row);
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("      {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}
