//! (a) latency: 100 jobs every second, 3 replicas. Target for daemon
//! replicas: p99 tick-to-claim lateness ≤ 10 ms; for embedded replicas
//! p99 tick-to-handler lateness ≤ 5 ms. With BullMQ where Node
//! is found: the peer row.

use anyhow::Result;

use super::{Report, SingleRun, SingleShape, duplicates_target, finish_single, single_window};
use crate::Env;
use crate::cluster::Placement;
use crate::handler::{HandlerFigures, show_us};
use crate::peer;
use crate::targets::Target;
use crate::ticks::Schedule;

pub fn run(env: &Env) -> Result<Report> {
    let k = env.jobs(100);
    let r = 3;
    let seconds = env.seconds(30);
    let title = format!(
        "(a) latency: {k} jobs every second, {r} {} replicas, {seconds} s window, job kind {}",
        env.kind.replica_kind().name(),
        env.kind.name()
    );
    let schedule = Schedule::EverySecond;
    let shape = SingleShape {
        k,
        r,
        seconds,
        schedule,
        placement: Placement::None,
    };
    let run = single_window(env, "latency", shape)?;
    let mut targets = vec![duplicates_target(&run.figures)];
    targets.extend(match &run.handler {
        Some(handler) => handler_targets(handler),
        None => vec![claim_target(&run)],
    });
    let mut report = finish_single(env, "latency", &title, &run, targets);
    peer::attach(env, "latency", &run, k, &mut report);
    Ok(report)
}

/// Daemon replicas: the claim's lateness (the outcome's `started_ms`).
fn claim_target(run: &SingleRun) -> Target {
    match run.figures.lateness {
        Some(l) => Target::new(
            "p99 lateness",
            format!("{} ms", l.p99),
            "≤ 10 ms",
            l.p99 <= 10,
        ),
        None => Target::new("p99 lateness", "no run".into(), "≤ 10 ms", false),
    }
}

/// Embedded replicas: each tick's handler called once, and the handler's
/// lateness.
fn handler_targets(handler: &HandlerFigures) -> Vec<Target> {
    let lateness = match handler.lateness_us {
        Some(l) => Target::new(
            "p99 tick → handler lateness",
            show_us(Some(l)),
            "p99 ≤ 5 ms",
            l.p99 <= 5_000,
        ),
        None => Target::new(
            "p99 tick → handler lateness",
            "no call".into(),
            "p99 ≤ 5 ms",
            false,
        ),
    };
    vec![
        Target::new(
            "ticks whose handler ran twice or more",
            handler.duplicates.to_string(),
            "0",
            handler.duplicates == 0,
        ),
        lateness,
    ]
}
