//! (b) throughput: 10,000 jobs every second, 3 replicas; targets: every due
//! tick started, no duplicate, p99 lateness ≤ 100 ms, claims/s ≥ 50 % of
//! the ceiling, peak RSS ≤ 30 MB per replica.

use anyhow::Result;

use super::{Report, SingleRun, SingleShape, duplicates_target, finish_single, single_window};
use crate::Env;
use crate::targets::Target;
use crate::ticks::Schedule;

pub fn run(env: &Env) -> Result<Report> {
    let k = env.jobs(10_000);
    let r = 3;
    let seconds = env.seconds(30);
    let title = format!(
        "(b) throughput: {k} jobs every second, {r} replicas, {seconds} s window, job kind {}",
        env.kind.name()
    );
    let schedule = Schedule::EverySecond;
    let shape = SingleShape {
        k,
        r,
        seconds,
        schedule,
    };
    let run = single_window(env, "throughput", shape)?;
    let targets = targets(&run);
    Ok(finish_single(env, "throughput", &title, &run, targets))
}

fn targets(run: &SingleRun) -> Vec<Target> {
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
    targets
}
