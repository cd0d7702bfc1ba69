//! The scenarios, one module each, and what the single-window ones
//! (latency, throughput, idle) share: one cluster, one window, one table.

pub mod burst;
pub mod footprint;
pub mod idle;
pub mod latency;
pub mod processes;
pub mod scaling;
pub mod soak;
pub mod throughput;

use anyhow::Result;
use serde_json::{Value, json};

use crate::Env;
use crate::ceiling::{Ceiling, print_ceiling};
use crate::cluster::{Cluster, Placement};
use crate::common::print_table;
use crate::figures::{Figures, figures_rows};
use crate::handler::HandlerFigures;
use crate::machine::loadavg;
use crate::replica_stats::{ReplicaStats, print_replicas};
use crate::targets::{Target, print_targets, target_rows};
use crate::ticks::{Schedule, ceil_to};

/// After the end of the last window, before the replicas are stopped: the
/// outcomes of the last ticks of a loaded window land in this time.
pub const GRACE_MS: i64 = 1_500;

/// What a scenario hands back: its JSON and whether every target passed.
pub struct Report {
    pub json: Value,
    pub pass: bool,
}

/// A single-window scenario, measured.
pub struct SingleRun {
    /// `/proc/loadavg` before the scenario: other load skews everything.
    loadavg_before: String,
    pub figures: Figures,
    /// Tick-to-handler figures, when the replicas note their handlers'
    /// calls (embedded replicas).
    pub handler: Option<HandlerFigures>,
    pub replicas: Vec<ReplicaStats>,
    pub ceiling: Ceiling,
    k: usize,
    seconds: u64,
    schedule: Schedule,
}

impl SingleRun {
    /// The window's length.
    pub fn seconds(&self) -> u64 {
        self.seconds
    }
}

/// The shape of a single-window scenario: `r` replicas on `k` jobs, one
/// window of `seconds`.
pub struct SingleShape {
    pub k: usize,
    pub r: usize,
    pub seconds: u64,
    pub schedule: Schedule,
    pub placement: Placement,
}

/// Starts the cluster, measures one window, stops it and measures the
/// ceiling.
pub fn single_window(env: &Env, name: &str, shape: SingleShape) -> Result<SingleRun> {
    let SingleShape {
        k,
        r,
        seconds,
        schedule,
        placement,
    } = shape;
    println!(
        "\n({name}) starting redis-server and {r} replicas with {k} jobs… (load average {})",
        loadavg()
    );
    let loadavg_before = loadavg();
    let mut cluster = Cluster::start_placed(env, name, k, schedule, &env.daemon_lines, placement)?;
    cluster.add_replicas(r)?;
    cluster.warm_up()?;
    if let Schedule::EveryNSeconds { .. } = schedule {
        // One burst before the window, as a daemon that has run for a
        // while has seen: the first one also makes every job's metrics.
        let now = cluster.redis_time()?;
        let next = ceil_to(now + 1, schedule.period_ms());
        cluster.sleep_until_redis(next + 2_000, "warm-up burst")?;
    }
    // A burst's window starts half a period (at most half the window)
    // before a burst: the snapshots (and their /metrics scrapes) fall
    // between bursts.
    let (align_ms, lead_ms) = match schedule {
        Schedule::EveryNSeconds { .. } => {
            let period = schedule.period_ms();
            (period, (period / 2).min(seconds as i64 / 2 * 1_000))
        }
        Schedule::EverySecond | Schedule::Hourly { .. } => (1_000, 0),
    };
    let window = cluster.window_aligned(name, seconds, align_ms, lead_ms)?;
    let end = cluster.stop(window.t1 + GRACE_MS)?;
    let outcomes = cluster.read_outcomes(window.t0 - 1_000)?;
    let handler = if env.kind.notes_handler_calls() {
        let calls = cluster.read_calls()?;
        Some(HandlerFigures::new(
            &window,
            &outcomes,
            &calls,
            cluster.offset_us,
        ))
    } else {
        None
    };
    let ceiling = cluster.ceiling()?;
    drop(cluster);
    Ok(SingleRun {
        loadavg_before,
        figures: Figures::new(&window, &outcomes, schedule),
        handler,
        replicas: end.replicas,
        ceiling,
        k,
        seconds,
        schedule,
    })
}

/// Prints the tables of a single-window scenario and builds its report.
pub fn finish_single(
    env: &Env,
    name: &str,
    title: &str,
    run: &SingleRun,
    targets: Vec<Target>,
) -> Report {
    finish_single_with(env, name, title, run, targets, Extra::default())
}

/// What a scenario adds to the single-window table and report: rows
/// before the targets, fields of the JSON.
#[derive(Default)]
pub struct Extra {
    pub rows: Vec<Vec<String>>,
    pub json: serde_json::Map<String, Value>,
}

/// [`finish_single`] with the scenario's own rows and JSON fields.
pub fn finish_single_with(
    env: &Env,
    name: &str,
    title: &str,
    run: &SingleRun,
    targets: Vec<Target>,
    extra: Extra,
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
    if let Some(handler) = &run.handler {
        rows.extend(handler.rows());
    }
    rows.extend(extra.rows);
    // The targets next to their figures.
    rows.extend(target_rows(&targets));
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
    let mut json = json!({
        "scenario": name,
        "title": title,
        "machine": env.machine,
        "replica_kind": env.kind.replica_kind().name(),
        "job_kind": env.kind.name(),
        "jobs": run.k,
        "schedule": run.schedule.cron(),
        "seconds": run.seconds,
        "loadavg_before": run.loadavg_before,
        "window": f.json(),
        "handler": run.handler.as_ref().map(HandlerFigures::json),
        "replicas": run.replicas.iter().map(ReplicaStats::json).collect::<Vec<_>>(),
        "ceiling": run.ceiling.json(Some(f.claims_per_s)),
        "targets": targets.iter().map(Target::json).collect::<Vec<_>>(),
        "pass": pass,
    });
    if let Value::Object(fields) = &mut json {
        fields.extend(extra.json);
    }
    Report { json, pass }
}

/// Every due tick of the window ran (`ok`), none missed.
pub fn all_started_target(f: &Figures) -> Target {
    Target::new(
        "all started",
        format!(
            "{} of {} ({} missed)",
            f.ticks.runs_started, f.ticks.due, f.ticks.missed
        ),
        "every due tick",
        f.ticks.missed == 0 && f.ticks.runs_started >= f.ticks.due && f.ticks.due > 0,
    )
}

/// p99 tick-to-claim lateness within `bound_ms`.
pub fn lateness_target(f: &Figures, bound_ms: i64) -> Target {
    let bound = format!("≤ {bound_ms} ms");
    match f.lateness {
        Some(l) => Target::new(
            "p99 lateness",
            format!("{} ms", l.p99),
            &bound,
            l.p99 <= bound_ms,
        ),
        None => Target::new("p99 lateness", "no run".into(), &bound, false),
    }
}

/// The highest peak RSS (`VmHWM`) of the replicas within `bound_mb`.
pub fn peak_rss_target(replicas: &[ReplicaStats], bound_mb: f64) -> Target {
    let peak = replicas.iter().filter_map(|r| r.hwm_kb).max().unwrap_or(0);
    Target::new(
        "peak RSS per replica (max)",
        format!("{:.1} MB", peak as f64 / 1024.0),
        &format!("≤ {bound_mb} MB"),
        peak > 0 && peak as f64 / 1024.0 <= bound_mb,
    )
}

pub fn duplicates_target(f: &Figures) -> Target {
    Target::new(
        "duplicates",
        f.ticks.duplicates.to_string(),
        "0",
        f.ticks.duplicates == 0,
    )
}

/// A snapshot reads INFO and CPU at once, then scrapes /metrics: when that
/// takes longer than the half second before the next tick, the claim counts
/// cover a shifted window.
pub fn slow_snapshot_note(figures: &[Figures]) {
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
