//! (d) scaling: 1,000 jobs every second with 1, then 3, then 5 replicas
//! (the new ones join the running cluster); target ≤ 1.2 claim attempts per
//! tick at 5. Then one replica is killed with SIGKILL and the lateness of
//! the ticks in the 5 s after the kill is reported (the takeover).

use anyhow::Result;
use serde_json::json;

use super::{GRACE_MS, Report, slow_snapshot_note};
use crate::Env;
use crate::ceiling::{Ceiling, print_ceiling};
use crate::clock::format_ms;
use crate::cluster::Cluster;
use crate::common::print_table;
use crate::figures::{Figures, figures_rows};
use crate::machine::loadavg;
use crate::replica_stats::{ReplicaStats, print_replicas};
use crate::takeover::{TAKEOVER_MS, Takeover};
use crate::targets::{Target, print_targets, verdict};
use crate::ticks::Schedule;

/// The replica counts of the steps, in order.
const STEPS: [usize; 3] = [1, 3, 5];

/// The scenario measured: one figures per step, and the takeover.
struct Scaling {
    figures: Vec<Figures>,
    takeover: Takeover,
    replicas: Vec<ReplicaStats>,
    ceiling: Ceiling,
}

pub fn run(env: &Env) -> Result<Report> {
    let k = env.jobs(1_000);
    let seconds = env.seconds(30);
    let schedule = Schedule::EverySecond;
    let title = format!(
        "(d) scaling: {k} jobs every second, {} replicas, {seconds} s per step, then kill -9 \
         of one; job kind {}",
        STEPS.map(|s| s.to_string()).join(" → "),
        env.kind.name()
    );
    let loadavg_before = loadavg();
    println!("\n{title} (load average {loadavg_before})");
    let scaling = measure(env, k, seconds, schedule)?;
    let Scaling {
        figures,
        takeover,
        replicas,
        ceiling,
    } = &scaling;
    let last = figures.last().expect("three steps");
    let at5 = last.claims_per_tick;
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
    print_steps(figures, ceiling);
    println!(
        "\n  takeover after kill -9 of {} at R = 5 (ticks in the {} s after the kill):",
        takeover.victim,
        TAKEOVER_MS / 1000
    );
    print_table(
        &["metric".to_string(), "value".to_string()],
        &takeover.rows(),
    );
    slow_snapshot_note(figures);
    print_replicas(replicas);
    print_ceiling(ceiling, Some(last.claims_per_s));
    let pass = targets.iter().all(|t| t.pass);
    print_targets(&targets);
    let json = json!({
        "scenario": "scaling",
        "title": title,
        "machine": env.machine,
        "replica_kind": env.kind.replica_kind().name(),
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

/// One window per step, the new replicas joining the running cluster; then
/// kill -9 of the first replica mid-second and the ticks after it.
fn measure(env: &Env, k: usize, seconds: u64, schedule: Schedule) -> Result<Scaling> {
    let mut cluster = Cluster::start(env, "scaling", k, schedule)?;
    let mut windows = Vec::new();
    for &r in &STEPS {
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
    Ok(Scaling {
        figures: windows
            .iter()
            .map(|w| Figures::new(w, &outcomes, schedule))
            .collect(),
        takeover: Takeover::new(&outcomes, schedule, kill_ms, &victim_name),
        replicas,
        ceiling,
    })
}

/// The figures table: one column per step, the targets beside their rows.
fn print_steps(figures: &[Figures], ceiling: &Ceiling) {
    let mut header = vec!["metric".to_string()];
    header.extend(figures.iter().map(|f| format!("R = {}", f.replicas)));
    header.extend(["target".to_string(), "verdict".to_string()]);
    let last = figures.last().expect("three steps");
    let at5 = last.claims_per_tick;
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (name, values) in figures_rows(figures, ceiling) {
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
    print_table(&header, &rows);
}
