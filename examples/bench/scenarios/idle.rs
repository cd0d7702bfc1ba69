//! (c) idle: 1,000 hourly jobs (`0 * * * *`, or `30 * * * *` etc. when the
//! run could reach the full hour: no tick is ever due), 3 replicas; target
//! ≤ 1 Redis command per second per replica, and no run.

use anyhow::Result;

use super::{Report, SingleShape, finish_single, single_window};
use crate::Env;
use crate::clock::local_ms;
use crate::cluster::Placement;
use crate::targets::Target;
use crate::ticks::Schedule;

pub fn run(env: &Env) -> Result<Report> {
    let k = env.jobs(1_000);
    let r = 3;
    let seconds = env.seconds(60);
    let schedule = tickless_hourly(seconds + 120);
    let title = format!(
        "(c) idle: {k} jobs `{}`, {r} replicas, {seconds} s window, job kind {}",
        schedule.cron(),
        env.kind.name()
    );
    let shape = SingleShape {
        k,
        r,
        seconds,
        schedule,
        placement: Placement::None,
    };
    let run = single_window(env, "idle", shape)?;
    let f = &run.figures;
    let targets = vec![
        Target::new(
            "commands/s per idle replica",
            format!("{:.2}", f.commands_per_replica_s),
            "≤ 1",
            f.commands_per_replica_s <= 1.0,
        ),
        Target::new(
            "runs in the window",
            format!(
                "{} (ticks due {})",
                f.ticks.runs_started + f.ticks.other_total(),
                f.ticks.due
            ),
            "0, no tick due",
            f.ticks.due == 0 && f.ticks.runs_started == 0 && f.ticks.other_total() == 0,
        ),
    ];
    Ok(finish_single(env, "idle", &title, &run, targets))
}

/// `0 * * * *`, unless the next `span_s` seconds (the scenario's start,
/// warm-up, window and stop, with a margin) could reach the full hour:
/// then another minute of the hour.
pub fn tickless_hourly(span_s: u64) -> Schedule {
    let now = local_ms();
    let span = span_s as i64 * 1_000;
    let minute = [0, 30, 15, 45]
        .into_iter()
        .find(|&minute| {
            Schedule::Hourly { minute }
                .ticks(now, now + span)
                .is_empty()
        })
        .expect("a span under 45 minutes (callers' spans come from --seconds ≤ 600) misses one of four quarter hours");
    Schedule::Hourly { minute }
}
