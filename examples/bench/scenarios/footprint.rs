//! (f) footprint: 10,000 and then 100,000 jobs that are never due in the
//! run (hourly, as in `idle`), 3 replicas each time, started one after
//! another (each waits until the one before is ready, so start-ups do not
//! share the CPUs). For each replica: its start-up time (spawn until it
//! says `READY=1`, config load and connecting to Redis included), and after
//! 3 s of warm-up and S seconds of idling (default 15) its RSS and peak
//! RSS (`VmHWM`; nothing scrapes its `/metrics` here, so the peak is the
//! replica's own). Also Redis's commands per second per replica while idle
//! and `used_memory`. A size whose replicas do not start (the engine's
//! `check` refusing a config file that large) fails its targets and says
//! why.
//! Targets: peak RSS ≤ 30 MB per replica at 10,000 jobs,
//! ≤ 150 MB at 100,000, start-up ≤ 2 s at 100,000. `--jobs K` measures K
//! jobs alone (the targets name their sizes: K of another size gets none).

use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use super::Report;
use super::idle::tickless_hourly;
use crate::Env;
use crate::cluster::{Cluster, check_interrupted};
use crate::common::print_table;
use crate::machine::loadavg;
use crate::measure::{info_field, proc_cpu_s};
use crate::replica_stats::{ReplicaStats, print_replicas};
use crate::scrape::parse_commandstats;
use crate::targets::{Target, print_targets, target_rows};
use crate::ticks::Schedule;

/// Replicas per size.
const REPLICAS: usize = 3;

/// The sizes measured, and the targets of each: peak RSS per replica (MB)
/// and, where there is one, start-up (s).
const SIZES: [(usize, f64, Option<f64>); 2] = [(10_000, 30.0, None), (100_000, 150.0, Some(2.0))];

/// One size, measured.
struct Step {
    jobs: usize,
    /// Why its replicas did not all start (`check` refusing the config, a
    /// replica exiting or not ready in time): its targets fail with it.
    error: Option<String>,
    /// Per replica: name, spawn → ready.
    startup: Vec<(String, Option<Duration>)>,
    replicas: Vec<ReplicaStats>,
    /// CPU seconds of each replica while idle.
    idle_cpu_s: Vec<Option<f64>>,
    commands_per_replica_s: f64,
    used_memory: Option<u64>,
    seconds: u64,
}

pub fn run(env: &Env) -> Result<Report> {
    let seconds = env.seconds(15);
    let sizes: Vec<usize> = match env.jobs {
        Some(k) => vec![k],
        None => SIZES.iter().map(|(k, _, _)| *k).collect(),
    };
    // Each size: start-ups (100,000 jobs can take a while today), idling,
    // stopping; a margin of five minutes each.
    let schedule = tickless_hourly(sizes.len() as u64 * (seconds + 300));
    let title = format!(
        "(f) footprint: {} jobs `{}`, {REPLICAS} {} replicas started one after another, {seconds} s idle",
        sizes
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
            .join(" then "),
        schedule.cron(),
        env.kind.replica_kind().name(),
    );
    let loadavg_before = loadavg();
    println!("\n{title} (load average {loadavg_before})");
    let mut steps = Vec::new();
    for &k in &sizes {
        steps.push(measure(env, k, seconds, schedule)?);
    }
    let targets = targets(&steps);
    println!("\n{title}");
    print_steps(&steps, &targets);
    for step in steps.iter().filter(|s| s.error.is_none()) {
        println!("\n  replicas with {} jobs:", step.jobs);
        print_replicas(&step.replicas);
    }
    let pass = targets.iter().all(|t| t.pass);
    print_targets(&targets);
    let json = json!({
        "scenario": "footprint",
        "title": title,
        "machine": env.machine,
        "replica_kind": env.kind.replica_kind().name(),
        "job_kind": env.kind.name(),
        "schedule": schedule.cron(),
        "seconds": seconds,
        "loadavg_before": loadavg_before,
        "sizes": steps.iter().map(Step::json).collect::<Vec<_>>(),
        "targets": targets.iter().map(Target::json).collect::<Vec<_>>(),
        "pass": pass,
    });
    Ok(Report { json, pass })
}

/// Starts the cluster of `k` jobs a replica at a time, idles `seconds`,
/// reads the figures and stops it.
fn measure(env: &Env, k: usize, seconds: u64, schedule: Schedule) -> Result<Step> {
    println!(
        "\n(footprint) starting redis-server and {REPLICAS} replicas with {k} jobs, one after \
         another… (load average {})",
        loadavg()
    );
    let mut cluster = Cluster::start(env, &format!("footprint-{k}"), k, schedule)?;
    if let Err(e) = (0..REPLICAS).try_for_each(|_| cluster.add_replicas(1)) {
        check_interrupted()?;
        println!("  the replicas with {k} jobs did not start: {e:#}");
        return Ok(Step::failed(k, seconds, format!("{e:#}")));
    }
    // The last replica's start (a read of every job's state) is not idling.
    cluster.warm_up()?;
    let startup = cluster
        .replicas
        .iter()
        .map(|r| (r.name.clone(), r.ready_after))
        .collect();
    let clk = env.clk_tck;
    let cpu_before: Vec<Option<f64>> = cluster
        .replicas
        .iter()
        .map(|r| proc_cpu_s(r.pid(), clk))
        .collect();
    let (calls_before, issued_after_first) = (redis_calls(&mut cluster)?, cluster.conn.issued);
    let until = cluster.redis_time()? + seconds as i64 * 1_000;
    cluster.sleep_until_redis(until, "idle")?;
    let issued_before_second = cluster.conn.issued;
    let calls_after = redis_calls(&mut cluster)?;
    let idle_cpu_s = cluster
        .replicas
        .iter()
        .zip(&cpu_before)
        .map(|(r, before)| Some(proc_cpu_s(r.pid(), clk)? - (*before)?))
        .collect();
    let memory: String = cluster.conn.query(redis::cmd("INFO").arg("memory"))?;
    // The first INFO is counted after its reply, and whatever the bench
    // sent before the second.
    let own = issued_before_second - issued_after_first + 1;
    let commands = calls_after.saturating_sub(calls_before).saturating_sub(own);
    let now = cluster.redis_time()?;
    let end = cluster.stop(now)?;
    Ok(Step {
        jobs: k,
        error: None,
        startup,
        replicas: end.replicas,
        idle_cpu_s,
        commands_per_replica_s: commands as f64 / REPLICAS as f64 / seconds as f64,
        used_memory: info_field(&memory, "used_memory"),
        seconds,
    })
}

/// Every command Redis has counted (`INFO commandstats`).
fn redis_calls(cluster: &mut Cluster) -> Result<u64> {
    let info: String = cluster.conn.query(redis::cmd("INFO").arg("commandstats"))?;
    Ok(parse_commandstats(&info).values().sum())
}

impl Step {
    fn failed(jobs: usize, seconds: u64, error: String) -> Step {
        Step {
            jobs,
            error: Some(error),
            startup: Vec::new(),
            replicas: Vec::new(),
            idle_cpu_s: Vec::new(),
            commands_per_replica_s: 0.0,
            used_memory: None,
            seconds,
        }
    }

    /// The error in short, for the tables (it is printed whole when it
    /// happens, and kept in the JSON): what `check` said, or the first
    /// line.
    fn error_line(&self) -> Option<String> {
        let error = self.error.as_ref()?;
        let line = if error.contains("check rejected") {
            error.lines().last()
        } else {
            error.lines().next()
        };
        let line = line.unwrap_or_default().trim();
        // The problem's message follows the file's name.
        let message = line.rsplit_once(".toml: ").map_or(line, |(_, m)| m);
        Some(message.chars().take(100).collect())
    }

    fn peak_kb(&self) -> Option<u64> {
        self.replicas.iter().filter_map(|r| r.hwm_kb).max()
    }

    fn slowest_startup(&self) -> Option<Duration> {
        let all: Option<Vec<Duration>> = self.startup.iter().map(|(_, d)| *d).collect();
        all?.into_iter().max()
    }

    fn json(&self) -> Value {
        json!({
            "jobs": self.jobs,
            "error": self.error,
            "idle_seconds": self.seconds,
            "startup_s": self.startup.iter().map(|(name, d)| json!({
                "replica": name,
                "spawn_to_ready_s": d.map(|d| d.as_secs_f64()),
            })).collect::<Vec<_>>(),
            "idle_cpu_s": self.idle_cpu_s,
            "redis_commands_per_replica_per_s": self.commands_per_replica_s,
            "redis_used_memory": self.used_memory,
            "replicas": self.replicas.iter().map(ReplicaStats::json).collect::<Vec<_>>(),
        })
    }
}

fn targets(steps: &[Step]) -> Vec<Target> {
    let mut targets = Vec::new();
    for step in steps {
        let Some(&(_, rss_mb, startup_s)) = SIZES.iter().find(|(k, _, _)| *k == step.jobs) else {
            continue;
        };
        let failed = step.error_line().map(|e| format!("not started: {e}"));
        let peak = step.peak_kb();
        targets.push(Target::new(
            &format!("peak RSS per replica at {} jobs (max)", step.jobs),
            failed.clone().unwrap_or_else(|| mb(peak)),
            &format!("≤ {rss_mb} MB"),
            peak.is_some_and(|kb| kb as f64 / 1024.0 <= rss_mb),
        ));
        if let Some(bound) = startup_s {
            let slowest = step.slowest_startup();
            targets.push(Target::new(
                &format!("start-up at {} jobs (slowest replica)", step.jobs),
                failed.clone().unwrap_or_else(|| {
                    slowest.map_or("not ready".to_string(), |d| {
                        format!("{:.2} s", d.as_secs_f64())
                    })
                }),
                &format!("≤ {bound} s"),
                slowest.is_some_and(|d| d.as_secs_f64() <= bound),
            ));
        }
    }
    targets
}

fn mb(kb: Option<u64>) -> String {
    kb.map_or("-".to_string(), |kb| {
        format!("{:.1} MB", kb as f64 / 1024.0)
    })
}

/// One column per size: start-ups, memory, idle cost; then the targets.
fn print_steps(steps: &[Step], targets: &[Target]) {
    let per_replica = |f: &dyn Fn(&Step) -> Vec<String>| -> Vec<String> {
        steps
            .iter()
            .map(|s| match s.error {
                Some(_) => "-".to_string(),
                None => f(s).join(" / "),
            })
            .collect()
    };
    let mut rows: Vec<Vec<String>> = vec![
        (
            "start-up, spawn → READY=1 (each replica)",
            per_replica(&|s| {
                s.startup
                    .iter()
                    .map(|(_, d)| {
                        d.map_or("-".to_string(), |d| format!("{:.2} s", d.as_secs_f64()))
                    })
                    .collect()
            }),
        ),
        (
            "peak RSS (VmHWM, each replica)",
            per_replica(&|s| s.replicas.iter().map(|r| mb(r.hwm_kb)).collect()),
        ),
        (
            "RSS at the end (each replica)",
            per_replica(&|s| s.replicas.iter().map(|r| mb(r.rss_kb)).collect()),
        ),
        (
            "replica CPU while idle (each)",
            per_replica(&|s| {
                s.idle_cpu_s
                    .iter()
                    .map(|c| {
                        c.map_or("-".to_string(), |c| {
                            format!("{:.1} %", c / s.seconds as f64 * 100.0)
                        })
                    })
                    .collect()
            }),
        ),
        (
            "Redis commands /s per idle replica",
            per_replica(&|s| vec![format!("{:.2}", s.commands_per_replica_s)]),
        ),
        (
            "Redis used_memory",
            steps
                .iter()
                .map(|s| mb(s.used_memory.map(|b| b / 1024)))
                .collect(),
        ),
    ]
    .into_iter()
    .map(|(name, values)| {
        let mut row = vec![name.to_string()];
        row.extend(values);
        row
    })
    .collect();
    if steps.iter().any(|s| s.error.is_some()) {
        let mut row = vec!["did not start".to_string()];
        row.extend(steps.iter().map(|s| s.error_line().unwrap_or_default()));
        rows.insert(0, row);
    }
    let columns = steps.len() + 1;
    for row in &mut rows {
        row.resize(columns, String::new());
    }
    let mut header = vec!["metric".to_string()];
    header.extend(steps.iter().map(|s| format!("{} jobs", s.jobs)));
    print_table(&header, &rows);
    println!();
    print_table(
        &[
            "target".to_string(),
            "value".to_string(),
            "bound".to_string(),
            "verdict".to_string(),
        ],
        &target_rows(targets),
    );
}
