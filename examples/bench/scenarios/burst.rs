//! (e) burst: 10,000 jobs all due at the same instant, 3 replicas (the
//! top-of-the-hour peak): every job on `*/10 * * * * *`, so a burst
//! of 10,000 ticks every 10 s and nothing in between; after one burst of
//! warm-up, the window starts 5 s before a burst (30 s: three bursts;
//! `--seconds 10`: one), so its snapshots fall between bursts. Targets: every due tick started, no
//! duplicate, p99 tick-to-claim lateness ≤ 250 ms.

use anyhow::Result;

use super::{
    Report, SingleShape, all_started_target, duplicates_target, finish_single, lateness_target,
    single_window,
};
use crate::Env;
use crate::cluster::Placement;
use crate::ticks::Schedule;

/// Seconds between two bursts (divides 60: `*/N` of the seconds field).
const EVERY_S: u32 = 10;

pub fn run(env: &Env) -> Result<Report> {
    let k = env.jobs(10_000);
    let r = 3;
    let seconds = env.seconds(30);
    let schedule = Schedule::EveryNSeconds { n: EVERY_S };
    // The window starts half a period (at most half the window) before a
    // burst (`scenarios::single_window`).
    let lead = (u64::from(EVERY_S) / 2).min(seconds / 2);
    let bursts = (seconds - lead).div_ceil(u64::from(EVERY_S));
    let title = format!(
        "(e) burst: {k} jobs `{}` (all due at once every {EVERY_S} s), {r} {} replicas, \
         {seconds} s window ({bursts} bursts), job kind {}",
        schedule.cron(),
        env.kind.replica_kind().name(),
        env.kind.name()
    );
    let shape = SingleShape {
        k,
        r,
        seconds,
        schedule,
        placement: Placement::None,
    };
    let run = single_window(env, "burst", shape)?;
    let f = &run.figures;
    let targets = vec![
        all_started_target(f),
        duplicates_target(f),
        lateness_target(f, 250),
    ];
    Ok(finish_single(env, "burst", &title, &run, targets))
}
