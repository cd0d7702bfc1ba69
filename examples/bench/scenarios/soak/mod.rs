//! (e) soak (Redis memory is bounded by the job table and the
//! history kept, not by the run rate): 100 jobs every second, 3 replicas,
//! `history = 100`, S seconds with a sample every 10 s of Redis's keys,
//! memory and outcomes and the replicas' RSS. Targets: keys and
//! `used_memory` flat from the middle third of the samples to the last,
//! and the ticks due recorded. See the header of `main.rs`.

mod keys;
mod sample;

use anyhow::{Context, Result};
use serde_json::json;

use super::Report;
use crate::Env;
use crate::cluster::Cluster;
use crate::common::print_table;
use crate::machine::loadavg;
use crate::replica_stats::{ReplicaStats, print_replicas};
use crate::targets::{Target, print_targets, target_rows};
use crate::ticks::{Schedule, ceil_to};
use keys::{DedupKeys, soak_key_bound};
use sample::{SoakSample, megabytes, print_soak_samples, soak_sample_offsets};

/// How often the soak samples Redis's keys and memory.
const SOAK_SAMPLE_EVERY_MS: i64 = 10_000;

/// `history` of the soak's replicas: small, so the outcome streams (and the
/// dedup window, sized from `history`) are full after the
/// first 100 s, well before the middle sample of the default 300 s.
const SOAK_HISTORY: u32 = 100;

/// The soak's samples and how its replicas ended.
struct Soak {
    samples: Vec<SoakSample>,
    names: Vec<String>,
    replicas: Vec<ReplicaStats>,
}

pub fn run(env: &Env) -> Result<Report> {
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
    let soak = measure(env, k, r, seconds, schedule)?;
    let analysis = Analysis::new(&soak.samples, k)?;
    let targets = analysis.targets();

    println!("\n{title}");
    print_soak_samples(&soak.samples, &soak.names);
    let mut rows = analysis.rows(k);
    rows.extend(target_rows(&targets));
    for row in &mut rows {
        row.resize(4, String::new());
    }
    println!();
    print_table(
        &["metric", "value", "target", "verdict"].map(String::from),
        &rows,
    );
    if !analysis.filled_by_middle {
        println!(
            "\n  NOTE: at the middle sample ({} s) the jobs had recorded fewer than {SOAK_HISTORY} \
             outcomes each (history = {SOAK_HISTORY}): their streams and dedup windows were still \
             filling, so used_memory grows from there whatever the data model; --seconds 240 or \
             more puts the middle sample after that",
            analysis.middle.elapsed_ms / 1_000
        );
    }
    print_replicas(&soak.replicas);
    let pass = targets.iter().all(|t| t.pass);
    print_targets(&targets);
    let json = json!({
        "scenario": "soak",
        "title": title,
        "machine": env.machine,
        "replica_kind": env.kind.replica_kind().name(),
        "job_kind": env.kind.name(),
        "jobs": k,
        "replicas_count": r,
        "schedule": schedule.cron(),
        "history": SOAK_HISTORY,
        "seconds": seconds,
        "sample_every_s": SOAK_SAMPLE_EVERY_MS / 1_000,
        "loadavg_before": loadavg_before,
        "samples": soak.samples.iter().map(|s| s.json(&soak.names)).collect::<Vec<_>>(),
        "plateau": analysis.plateau_json(),
        "growth": analysis.growth_json(),
        "key_bound": analysis.key_bound_json(),
        "outcomes_recorded": analysis.recorded,
        "ticks_due": analysis.due,
        "replicas": soak.replicas.iter().map(ReplicaStats::json).collect::<Vec<_>>(),
        "targets": targets.iter().map(Target::json).collect::<Vec<_>>(),
        "pass": pass,
    });
    Ok(Report { json, pass })
}

/// Starts the cluster with `history = SOAK_HISTORY`, samples it every
/// [`SOAK_SAMPLE_EVERY_MS`] for `seconds`, and stops it.
fn measure(env: &Env, k: usize, r: usize, seconds: u64, schedule: Schedule) -> Result<Soak> {
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
        let sample = SoakSample::take(&mut cluster, elapsed_ms)?;
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
    Ok(Soak {
        samples,
        names,
        replicas: end.replicas,
    })
}

/// What the samples add up to: the plateau, the growth towards it, the
/// key bound, and the outcomes recorded.
struct Analysis<'a> {
    last: &'a SoakSample,
    middle: &'a SoakSample,
    /// The last third of the samples.
    plateau: &'a [SoakSample],
    /// The third before it.
    middle_third: &'a [SoakSample],
    plateau_keys: f64,
    plateau_used_memory: f64,
    middle_keys: f64,
    middle_used_memory: f64,
    keys_growth: Option<f64>,
    used_memory_growth: Option<f64>,
    dedup: DedupKeys,
    in_flight: u64,
    bound: u64,
    due: u64,
    recorded: Option<u64>,
    /// Whether every job had `history` outcomes by the middle sample.
    filled_by_middle: bool,
}

impl<'a> Analysis<'a> {
    fn new(samples: &'a [SoakSample], k: usize) -> Result<Analysis<'a>> {
        let first = samples
            .first()
            .context("the soak takes at least two samples")?;
        let middle = &samples[(samples.len() - 1) / 2];
        let last = samples
            .last()
            .context("the soak takes at least two samples")?;
        // Means over thirds, not single samples: a stream allocating its
        // next node shows as a brief ~9 % bump in used_memory that one
        // sample can land on.
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
        let dedup = DedupKeys::of(last);
        let in_flight = k as u64;
        Ok(Analysis {
            last,
            middle,
            plateau,
            middle_third,
            plateau_keys,
            plateau_used_memory,
            middle_keys,
            middle_used_memory,
            keys_growth: growth(middle_keys, plateau_keys),
            used_memory_growth: growth(middle_used_memory, plateau_used_memory),
            dedup,
            in_flight,
            bound: soak_key_bound(k as u64, dedup.per_job(), in_flight),
            due: k as u64 * ((last.elapsed_ms - first.elapsed_ms) / 1_000) as u64,
            recorded: match (first.outcomes, last.outcomes) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            },
            // Until a job has `history` outcomes its stream (and its dedup
            // window) still fills: memory grows then whatever the data
            // model.
            filled_by_middle: middle
                .outcomes
                .is_some_and(|n| n >= k as u64 * u64::from(SOAK_HISTORY)),
        })
    }

    fn targets(&self) -> Vec<Target> {
        let ratio_text = |ratio: Option<f64>| ratio.map_or("-".to_string(), |g| format!("{g:.2}x"));
        let due = self.due;
        vec![
            Target::new(
                "keys growth, mean of the middle third → of the last",
                format!(
                    "{:.0} → {:.0} = {}",
                    self.middle_keys,
                    self.plateau_keys,
                    ratio_text(self.keys_growth)
                ),
                "≤ 1.05x",
                self.keys_growth.is_some_and(|g| g <= 1.05),
            ),
            Target::new(
                "used_memory growth, mean of the middle third → of the last",
                format!(
                    "{:.2} → {:.2} MB = {}",
                    self.middle_used_memory / 1_048_576.0,
                    self.plateau_used_memory / 1_048_576.0,
                    ratio_text(self.used_memory_growth)
                ),
                "≤ 1.10x",
                self.used_memory_growth.is_some_and(|g| g <= 1.10),
            ),
            Target::new(
                "outcomes recorded, first → last sample",
                match self.recorded {
                    Some(n) => format!(
                        "{n} of {due} ticks due ({:.1} %)",
                        n as f64 / due.max(1) as f64 * 100.0
                    ),
                    None => "not reported (Redis < 7 has no entries-added)".to_string(),
                },
                "≥ 90 %",
                self.recorded
                    .is_some_and(|n| due > 0 && n as f64 >= 0.9 * due as f64),
            ),
        ]
    }

    /// The rows of the soak's summary table before its targets.
    fn rows(&self, k: usize) -> Vec<Vec<String>> {
        vec![
            vec![
                format!(
                    "plateau: mean keys (samples {}–{} s)",
                    self.plateau[0].elapsed_ms / 1_000,
                    self.last.elapsed_ms / 1_000
                ),
                format!("{:.0}", self.plateau_keys),
            ],
            vec![
                "plateau: mean used_memory".to_string(),
                format!("{:.2} MB", self.plateau_used_memory / 1024.0 / 1024.0),
            ],
            vec![
                "dedup keys per job (from the keys written)".to_string(),
                self.dedup.describe(),
            ],
            vec![
                "keys at the last sample vs the data model's bound".to_string(),
                self.last.keys.to_string(),
                format!(
                    "≤ {} = {k} × (2 + {}) + 2 × {} + 3",
                    self.bound,
                    self.dedup.per_job(),
                    self.in_flight
                ),
                match self.dedup {
                    DedupKeys::PerRun { .. } => "grows per run".to_string(),
                    _ if self.last.keys <= self.bound => "under".to_string(),
                    _ => "OVER".to_string(),
                },
            ],
        ]
    }

    fn plateau_json(&self) -> serde_json::Value {
        json!({
            "from_elapsed_s": self.plateau[0].elapsed_ms / 1_000,
            "samples": self.plateau.len(),
            "keys_mean": self.plateau_keys,
            "used_memory_mean_bytes": self.plateau_used_memory,
        })
    }

    fn growth_json(&self) -> serde_json::Value {
        json!({
            "from": "mean of the middle third of the samples",
            "from_elapsed_s": self.middle_third.first().map(|s| s.elapsed_ms / 1_000),
            "to": "mean of the last third",
            "keys": self.keys_growth,
            "used_memory": self.used_memory_growth,
            "history_full_at_middle_sample": self.filled_by_middle,
        })
    }

    fn key_bound_json(&self) -> serde_json::Value {
        json!({
            "dedup": self.dedup.describe(),
            "dedup_keys_per_job": self.dedup.per_job(),
            "runs_in_flight": self.in_flight,
            "bound": self.bound,
            "keys_at_last_sample": self.last.keys,
        })
    }
}
