//! The peer row: BullMQ measured in the same run as cronlease's
//! scenario, after it (its replicas and Redis stopped), where `node` and
//! `npm` are on `PATH`; its row printed under cronlease's with the ratios
//! cronlease / BullMQ. `latency` and `throughput` have one (not with
//! `--job-kind true`, nor with `--no-peer`).
//!
//! The set-up: 3 BullMQ worker processes at concurrency 50,
//! a private redis-server of their own, K no-op jobs on job schedulers with
//! `pattern: '* * * * * *'` (BullMQ's default job options: completed jobs
//! are kept), a window of S seconds (default 20; `--seconds` sets it) of
//! whole seconds of Redis time. What is compared, per run started:
//!
//! - started / due: jobs processed for distinct (scheduler, tick) of the
//!   window over K × S; ticks processed twice or more;
//! - lateness: cronlease's tick → claim (`started_ms`, Redis time inside the
//!   claim script) beside BullMQ's tick → `processedOn` (set when a worker
//!   moved the job to active: BullMQ's claim); and tick → handler (embedded
//!   replicas) beside tick → processor called (the worker's wall clock, the
//!   first thing the processor does). A job scheduler's job id ends with
//!   the tick it was made for;
//! - CPU per run of the replicas / workers (all summed) and of
//!   redis-server, from `/proc` over the window; Redis commands per run
//!   (`INFO commandstats`, Lua's inner calls included, the bench's own
//!   taken out); the highest peak RSS (`VmHWM`) of a replica / worker.

mod bullmq;
mod install;

use anyhow::Result;
use serde_json::{Value, json};

use crate::Env;
use crate::common::print_table;
use crate::figures::show_us_per_run;
use crate::handler::{json_us, show_us};
use crate::scenarios::{Report, SingleRun};
use crate::ticks::Percentiles;

/// BullMQ's costs over the window.
pub struct Costs {
    pub commands: u64,
    pub workers_cpu_s: Option<f64>,
    pub redis_cpu_s: Option<f64>,
    pub peak_rss_kb: Vec<Option<u64>>,
}

/// What BullMQ did in its window.
pub struct PeerFigures {
    jobs: usize,
    seconds: u64,
    due: u64,
    started: u64,
    duplicates: u64,
    /// Tick → `processedOn`, ms.
    processed_on_ms: Option<Percentiles>,
    /// Tick → processor called, µs.
    called_us: Option<Percentiles>,
    costs: Costs,
}

impl PeerFigures {
    fn new(
        jobs: usize,
        seconds: u64,
        (t0, t1): (i64, i64),
        notes: &[bullmq::Note],
        costs: Costs,
    ) -> PeerFigures {
        let (started, duplicates, processed_on_ms, called_us) = bullmq::tally(notes, t0, t1);
        PeerFigures {
            jobs,
            seconds,
            due: (jobs as u64) * ((t1 - t0) / 1_000) as u64,
            started,
            duplicates,
            processed_on_ms,
            called_us,
            costs,
        }
    }

    fn per_run(&self, total: Option<f64>, scale: f64) -> Option<f64> {
        (self.started > 0).then_some(total? * scale / self.started as f64)
    }

    fn workers_cpu_us(&self) -> Option<f64> {
        self.per_run(self.costs.workers_cpu_s, 1e6)
    }

    fn redis_cpu_us(&self) -> Option<f64> {
        self.per_run(self.costs.redis_cpu_s, 1e6)
    }

    fn commands_per_run(&self) -> Option<f64> {
        self.per_run(Some(self.costs.commands as f64), 1.0)
    }

    fn peak_kb(&self) -> Option<u64> {
        self.costs.peak_rss_kb.iter().flatten().copied().max()
    }

    fn json(&self, version: &str) -> Value {
        json!({
            "system": format!("BullMQ {version}"),
            "workers": bullmq::WORKERS,
            "concurrency": bullmq::CONCURRENCY,
            "jobs": self.jobs,
            "seconds": self.seconds,
            "due": self.due,
            "started": self.started,
            "duplicates": self.duplicates,
            "tick_to_processed_on": Percentiles::json(self.processed_on_ms),
            "tick_to_processor_called": json_us(self.called_us),
            "redis_commands": self.costs.commands,
            "redis_commands_per_run": self.commands_per_run(),
            "workers_cpu_s_in_window": self.costs.workers_cpu_s,
            "redis_server_cpu_s_in_window": self.costs.redis_cpu_s,
            "workers_cpu_us_per_run": self.workers_cpu_us(),
            "redis_server_cpu_us_per_run": self.redis_cpu_us(),
            "peak_rss_kb": self.costs.peak_rss_kb,
        })
    }
}

/// Runs the peer for `scenario` (whose cronlease run is `run`, on `k`
/// jobs) unless it is off or Node is missing, prints its row beside
/// cronlease's, and adds `peer` to the report.
pub fn attach(env: &Env, scenario: &str, run: &SingleRun, k: usize, report: &mut Report) {
    let peer = if !env.peer {
        println!("\n  BullMQ peer row: skipped (--no-peer)");
        json!({"skipped": "--no-peer"})
    } else if !install::node_found() {
        println!("\n  BullMQ peer row: skipped (node or npm not found on PATH)");
        json!({"skipped": "node or npm not found on PATH"})
    } else {
        match measure(env, scenario, run, k) {
            Ok(json) => json,
            Err(e) => {
                println!("\n  BullMQ peer row: skipped, it failed: {e:#}");
                json!({"skipped": format!("failed: {e:#}")})
            }
        }
    };
    if let Value::Object(fields) = &mut report.json {
        fields.insert("peer".to_string(), peer);
    }
}

fn measure(env: &Env, scenario: &str, run: &SingleRun, k: usize) -> Result<Value> {
    let installed = install::install()?;
    let seconds = env.seconds(20);
    println!(
        "\n({scenario}, peer) BullMQ {}: redis-server, {k} job schedulers `* * * * * *`, {} \
         workers at concurrency {}, {seconds} s window…",
        installed.bullmq_version,
        bullmq::WORKERS,
        bullmq::CONCURRENCY
    );
    let dir = env.work.join(format!("{scenario}-bullmq"));
    let peer = bullmq::measure(env, &installed, k, seconds, &dir)?;
    print_rows(run, &peer, &installed.bullmq_version);
    Ok(peer.json(&installed.bullmq_version))
}

/// cronlease's row, BullMQ's, and their ratios.
fn print_rows(run: &SingleRun, peer: &PeerFigures, version: &str) {
    let f = &run.figures;
    let cronlease_peak = run.replicas.iter().filter_map(|r| r.hwm_kb).max();
    let handler = run.handler.as_ref().and_then(|h| h.lateness_us);
    let share = |started: u64, due: u64| {
        if due == 0 {
            "-".to_string()
        } else {
            format!(
                "{started} / {due} ({:.2} %)",
                started as f64 / due as f64 * 100.0
            )
        }
    };
    let ms_pair =
        |p: Option<Percentiles>| p.map_or("-".to_string(), |p| format!("{} / {} ms", p.p50, p.p99));
    let us_pair = |p: Option<Percentiles>| {
        p.map_or("-".to_string(), |p| {
            format!(
                "{:.1} / {:.1} ms",
                p.p50 as f64 / 1000.0,
                p.p99 as f64 / 1000.0
            )
        })
    };
    let cpu_pair =
        |a: Option<f64>, b: Option<f64>| format!("{} / {}", show_us_per_run(a), show_us_per_run(b));
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let mb = |kb: Option<u64>| {
        kb.map_or("-".to_string(), |kb| {
            format!("{:.1} MB", kb as f64 / 1024.0)
        })
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".to_string(),
    };
    let p50 = |p: Option<Percentiles>| p.map(|p| p.p50 as f64);
    let p99 = |p: Option<Percentiles>| p.map(|p| p.p99 as f64);
    let rows = vec![
        vec![
            format!("cronlease ({} replicas, {} s)", f.replicas, run.seconds()),
            share(f.ticks.runs_started, f.ticks.due),
            f.ticks.duplicates.to_string(),
            ms_pair(f.lateness),
            us_pair(handler),
            cpu_pair(f.cpu_per_run_us(), f.redis_cpu_per_run_us()),
            opt(f.commands_per_run()),
            mb(cronlease_peak),
        ],
        vec![
            format!(
                "BullMQ {version} ({} × {}, {} s)",
                bullmq::WORKERS,
                bullmq::CONCURRENCY,
                peer.seconds
            ),
            share(peer.started, peer.due),
            peer.duplicates.to_string(),
            ms_pair(peer.processed_on_ms),
            us_pair(peer.called_us),
            cpu_pair(peer.workers_cpu_us(), peer.redis_cpu_us()),
            opt(peer.commands_per_run()),
            mb(peer.peak_kb()),
        ],
        vec![
            "cronlease / BullMQ".to_string(),
            ratio(
                (f.ticks.due > 0).then(|| f.ticks.runs_started as f64 / f.ticks.due as f64),
                (peer.due > 0).then(|| peer.started as f64 / peer.due as f64),
            ),
            String::new(),
            format!(
                "{} / {}",
                ratio(p50(f.lateness), p50(peer.processed_on_ms)),
                ratio(p99(f.lateness), p99(peer.processed_on_ms))
            ),
            format!(
                "{} / {}",
                ratio(p50(handler), p50(peer.called_us)),
                ratio(p99(handler), p99(peer.called_us))
            ),
            format!(
                "{} / {}",
                ratio(f.cpu_per_run_us(), peer.workers_cpu_us()),
                ratio(f.redis_cpu_per_run_us(), peer.redis_cpu_us())
            ),
            ratio(f.commands_per_run(), peer.commands_per_run()),
            ratio(
                cronlease_peak.map(|kb| kb as f64),
                peer.peak_kb().map(|kb| kb as f64),
            ),
        ],
    ];
    println!(
        "\n  peer row (same machine, one after the other; lateness: cronlease tick → claim, BullMQ \
         tick → processedOn; then tick → handler / processor called):"
    );
    print_table(
        &[
            "system",
            "started / due",
            "dup.",
            "lateness p50 / p99",
            "→ handler p50 / p99",
            "CPU per run: replicas or workers / Redis",
            "Redis cmds per run",
            "peak RSS per process (max)",
        ]
        .map(String::from),
        &rows,
    );
    if let Some(p) = peer.called_us {
        println!(
            "  BullMQ tick → processor called p50 / p99 / max: {}",
            show_us(Some(p))
        );
    }
}
