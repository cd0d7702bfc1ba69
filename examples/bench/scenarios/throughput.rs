//! (b) throughput: 10,000 jobs every second, 3 replicas. Targets: every
//! due tick started, no duplicate, p99 lateness ≤ 100 ms, claim attempts
//! per tick ≤ 1.1, replica CPU ≤ 25 µs per run (all replicas summed over
//! the runs), redis-server CPU ≤ 25 µs per run, peak RSS ≤ 60 MB per
//! replica. The EVALSHA ceiling is printed as context, not a target. With
//! BullMQ where Node is found: the peer row.

use anyhow::Result;

use super::{
    Report, SingleRun, SingleShape, all_started_target, duplicates_target, finish_single,
    lateness_target, peak_rss_target, single_window,
};
use crate::Env;
use crate::figures::show_us_per_run;
use crate::peer;
use crate::targets::Target;
use crate::ticks::Schedule;

/// CPU per run, µs: of all replicas summed, and of redis-server.
const CPU_PER_RUN_US: f64 = 25.0;

pub fn run(env: &Env) -> Result<Report> {
    let k = env.jobs(10_000);
    let r = 3;
    let seconds = env.seconds(30);
    let title = format!(
        "(b) throughput: {k} jobs every second, {r} {} replicas, {seconds} s window, job kind {}",
        env.kind.replica_kind().name(),
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
    let mut report = finish_single(env, "throughput", &title, &run, targets);
    peer::attach(env, "throughput", &run, k, &mut report);
    Ok(report)
}

fn targets(run: &SingleRun) -> Vec<Target> {
    let f = &run.figures;
    let claims = f.claims_per_tick;
    let cpu = |name: &str, us: Option<f64>| {
        Target::new(
            name,
            show_us_per_run(us),
            &format!("≤ {CPU_PER_RUN_US} µs"),
            us.is_some_and(|us| us <= CPU_PER_RUN_US),
        )
    };
    vec![
        all_started_target(f),
        duplicates_target(f),
        lateness_target(f, 100),
        Target::new(
            "claim attempts per tick",
            claims.map_or("no tick".to_string(), |c| format!("{c:.3}")),
            "≤ 1.1",
            claims.is_some_and(|c| c <= 1.1),
        ),
        cpu("replica CPU per run (all replicas)", f.cpu_per_run_us()),
        cpu("redis-server CPU per run", f.redis_cpu_per_run_us()),
        peak_rss_target(&run.replicas, 60.0),
    ]
}
