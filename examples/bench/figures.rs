//! The figures of one measured window, from its two snapshots and the
//! outcome streams, and the rows of the table that shows them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::ceiling::Ceiling;
use crate::clock::format_ms;
use crate::cluster::{Rec, Snapshot, Window};
use crate::ticks::{Percentiles, Schedule, TickStats};

/// The claim results that reached Redis: the claim attempts.
const ATTEMPTS: [&str; 4] = ["claimed", "taken", "busy", "paused"];

/// The figures of one measured window.
pub struct Figures {
    label: String,
    pub replicas: usize,
    pub t0: i64,
    t1: i64,
    seconds: f64,
    pub ticks: TickStats,
    pub lateness: Option<Percentiles>,
    commands: u64,
    commands_by_name: BTreeMap<String, u64>,
    commands_per_run: Option<f64>,
    pub commands_per_replica_s: f64,
    claims_by_result: BTreeMap<String, u64>,
    claim_attempts: u64,
    pub claims_per_tick: Option<f64>,
    pub claims_per_s: f64,
    /// Per replica (name, CPU seconds in the window).
    cpu: Vec<(String, f64)>,
    /// The replicas' CPU while their `/metrics` were scraped, summed, other
    /// work meanwhile included: at the start and at the end (both outside
    /// `cpu`).
    scrape_cpu: [Option<f64>; 2],
    redis_cpu: Option<f64>,
    pub snapshot_ms: [u64; 2],
}

impl Figures {
    pub fn new(window: &Window, outcomes: &[Vec<Rec>], schedule: Schedule) -> Figures {
        let ticks = TickStats::new(outcomes, schedule, window.t0, window.t1);
        let lateness = Percentiles::of(ticks.lateness_ms.clone());
        let seconds = (window.t1 - window.t0) as f64 / 1000.0;
        let replicas = window.replicas.len();
        let (start, end) = (&window.start, &window.end);
        let (commands, commands_by_name) = command_deltas(start, end);
        let (claims_by_result, cpu) = replica_deltas(window);
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
            scrape_cpu: [scrape_cpu(window, start), scrape_cpu(window, end)],
            snapshot_ms: window.snapshot_ms,
            redis_cpu: match (start.redis_cpu, end.redis_cpu) {
                (Some(a), Some(b)) => Some(b - a),
                _ => None,
            },
            ticks,
        }
    }

    /// The replicas' CPU in the window, all replicas summed, over the runs
    /// started in it, µs.
    pub fn cpu_per_run_us(&self) -> Option<f64> {
        if self.cpu.is_empty() || self.ticks.runs_started == 0 {
            return None;
        }
        let total: f64 = self.cpu.iter().map(|(_, s)| s).sum();
        Some(total / self.ticks.runs_started as f64 * 1e6)
    }

    /// redis-server's CPU in the window over the runs started in it, µs.
    pub fn redis_cpu_per_run_us(&self) -> Option<f64> {
        let cpu = self.redis_cpu?;
        (self.ticks.runs_started > 0).then(|| cpu / self.ticks.runs_started as f64 * 1e6)
    }

    pub fn commands_per_run(&self) -> Option<f64> {
        self.commands_per_run
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

    pub fn json(&self) -> Value {
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
            "replica_cpu_us_per_run": self.cpu_per_run_us(),
            "redis_server_cpu_us_per_run": self.redis_cpu_per_run_us(),
            "snapshot_ms": self.snapshot_ms,
            "replica_cpu_s_while_scraped": self.scrape_cpu,
        })
    }
}

/// Redis's commands between the two snapshots, in all and by name, the
/// bench's own taken out: the first INFO (counted after its reply) and
/// whatever it sent before the second.
fn command_deltas(start: &Snapshot, end: &Snapshot) -> (u64, BTreeMap<String, u64>) {
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
    (commands, commands_by_name)
}

/// The window's replicas' CPU during the scrapes of one snapshot, summed.
fn scrape_cpu(window: &Window, snapshot: &Snapshot) -> Option<f64> {
    let mut total = 0.0;
    for &i in &window.replicas {
        total += snapshot.cpu_after_scrape.get(i).copied().flatten()?
            - snapshot.cpu.get(i).copied().flatten()?;
    }
    Some(total)
}

/// The claims by result of the window's replicas, summed, between the two
/// snapshots; and each one's CPU seconds in the window without what the
/// first snapshot's `/metrics` scrape cost: from the end of that scrape to
/// the second snapshot (which reads CPU before it scrapes), scaled to the
/// window's length (a steady load's CPU). With 10,000 jobs a scrape costs
/// the replicas seconds of CPU, which would count several µs per run.
fn replica_deltas(window: &Window) -> (BTreeMap<String, u64>, Vec<(String, f64)>) {
    let (start, end) = (&window.start, &window.end);
    let mut claims_by_result: BTreeMap<String, u64> = BTreeMap::new();
    let mut cpu = Vec::new();
    for &i in &window.replicas {
        if let (Some(Some(a)), Some(Some(b))) = (start.claims.get(i), end.claims.get(i)) {
            for (result, &n) in b {
                let before = a.get(result).copied().unwrap_or(0);
                *claims_by_result.entry(result.clone()).or_default() += n.saturating_sub(before);
            }
        }
        let whole = end.cpu_read.saturating_duration_since(start.cpu_read);
        let measured = end.cpu_read.saturating_duration_since(start.scraped);
        let scraped_cpu = start.cpu_after_scrape.get(i).copied().flatten();
        let end_cpu = end.cpu.get(i).copied().flatten();
        let cpu_s = match (scraped_cpu, end_cpu) {
            (Some(a), Some(b)) if !measured.is_zero() => {
                Some((b - a) * whole.as_secs_f64() / measured.as_secs_f64())
            }
            // A scrape as long as the window: the CPU as read.
            _ => end_cpu
                .zip(start.cpu.get(i).copied().flatten())
                .map(|(b, a)| b - a),
        };
        if let Some(cpu_s) = cpu_s {
            cpu.push((window.names[i].clone(), cpu_s));
        }
    }
    (claims_by_result, cpu)
}

/// The rows of the figures table: a name and one value per window.
pub fn figures_rows(figures: &[Figures], ceiling: &Ceiling) -> Vec<(String, Vec<String>)> {
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
        row("tick → claim lateness p50 / p99 / max", &|f| {
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
        row("replica CPU per run (all replicas)", &|f| {
            show_us_per_run(f.cpu_per_run_us())
        }),
        row("snapshots took (start / end)", &|f| {
            format!("{} / {} ms", f.snapshot_ms[0], f.snapshot_ms[1])
        }),
        row(
            "  replica CPU while scraped (start, left out / end)",
            &|f| {
                let s = |cpu: Option<f64>| cpu.map_or("-".to_string(), |s| format!("{s:.2} s"));
                format!("{} / {}", s(f.scrape_cpu[0]), s(f.scrape_cpu[1]))
            },
        ),
        row("redis-server CPU in window", &|f| {
            f.redis_cpu.map_or("-".to_string(), |s| {
                format!("{:.1} %", s / f.seconds * 100.0)
            })
        }),
        row("redis-server CPU per run", &|f| {
            show_us_per_run(f.redis_cpu_per_run_us())
        }),
    ]
}

/// A CPU time per run, µs (CPU times come from `/proc` in clock ticks,
/// 10 ms each: over a window of thousands of runs the rounding is small).
pub fn show_us_per_run(us: Option<f64>) -> String {
    us.map_or("-".to_string(), |us| format!("{us:.1} µs"))
}
