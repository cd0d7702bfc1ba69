//! (a) latency: 100 jobs every second, 3 replicas; target p99
//! tick-to-start lateness ≤ 10 ms.

use anyhow::Result;

use super::{Report, SingleShape, duplicates_target, finish_single, single_window};
use crate::Env;
use crate::targets::Target;
use crate::ticks::Schedule;

pub fn run(env: &Env) -> Result<Report> {
    let k = env.jobs(100);
    let r = 3;
    let seconds = env.seconds(30);
    let title = format!(
        "(a) latency: {k} jobs every second, {r} replicas, {seconds} s window, job kind {}",
        env.kind.name()
    );
    let schedule = Schedule::EverySecond;
    let shape = SingleShape {
        k,
        r,
        seconds,
        schedule,
    };
    let run = single_window(env, "latency", shape)?;
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
