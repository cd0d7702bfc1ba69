//! (g) processes: 1,000 jobs every second that run `true` (the `cronlease`
//! binary, `command = ["true"]`: a process per run), 3 replicas, then the
//! spawn floor in the same run: `examples/bench_spawn_floor.rs` starting
//! the same number of `true` processes at each whole second for as long
//! (replicas stopped). Targets: every due tick started, no
//! duplicate, p99 tick-to-claim lateness ≤ 2× the floor's p99 tick to
//! spawned. Also printed, as context: tick to the run's end (the outcome's
//! `finished_ms`: the process exited and was seen to) against the floor's
//! tick to reaped.

use anyhow::Result;
use serde_json::json;

use super::{
    Extra, Report, SingleShape, all_started_target, duplicates_target, finish_single_with,
    single_window,
};
use crate::Env;
use crate::cluster::JobKind;
use crate::cluster::Placement;
use crate::floor::Floor;
use crate::targets::Target;
use crate::ticks::{Percentiles, Schedule};

/// cronlease's p99 lateness may be at most this many times the floor's.
const MAX_RATIO: f64 = 2.0;

pub fn run(env: &Env) -> Result<Report> {
    // Real processes whatever --job-kind says: daemon replicas, `true`.
    let env = &env.with_kind(JobKind::True);
    let k = env.jobs(1_000);
    let r = 3;
    let seconds = env.seconds(30);
    let title = format!(
        "(g) processes: {k} `true` jobs every second, {r} daemon replicas, {seconds} s window, \
         against the spawn floor ({k} `true` a second, same length, replicas stopped)"
    );
    let shape = SingleShape {
        k,
        r,
        seconds,
        schedule: Schedule::EverySecond,
        placement: Placement::None,
    };
    let run = single_window(env, "processes", shape)?;
    let floor = Floor::measure(k, seconds as usize, &env.work.join("processes"))?;
    let f = &run.figures;
    // ms from the outcomes, µs from the floor: compared in ms.
    let claim_p99 = f.lateness.map(|l| l.p99 as f64);
    let floor_p99 = floor.spawned_us.map(|p| p.p99 as f64 / 1000.0);
    let start_ratio = ratio(claim_p99, floor_p99);
    let finished = Percentiles::of(f.ticks.finished_ms.clone());
    let end_ratio = ratio(
        finished.map(|p| p.p99 as f64),
        floor.reaped_us.map(|p| p.p99 as f64 / 1000.0),
    );
    let mut rows = vec![vec![
        "tick → run end (finished_ms) p50 / p99 / max".to_string(),
        Percentiles::show(finished),
    ]];
    rows.extend(floor.rows());
    rows.push(vec![
        "p99 ratio: tick → claim / floor tick → spawned".to_string(),
        show_ratio(start_ratio),
    ]);
    rows.push(vec![
        "p99 ratio: tick → run end / floor tick → reaped".to_string(),
        show_ratio(end_ratio),
    ]);
    let targets = vec![
        all_started_target(f),
        duplicates_target(f),
        Target::new(
            "p99 lateness / spawn floor's p99",
            match (claim_p99, floor_p99) {
                (Some(c), Some(fl)) => {
                    format!("{c:.0} ms / {fl:.1} ms = {}", show_ratio(start_ratio))
                }
                _ => "not measured".to_string(),
            },
            &format!("≤ {MAX_RATIO}×"),
            start_ratio.is_some_and(|r| r <= MAX_RATIO),
        ),
    ];
    let mut extra = Extra {
        rows,
        ..Extra::default()
    };
    extra.json.insert("floor".into(), floor.json());
    extra
        .json
        .insert("tick_to_finished".into(), Percentiles::json(finished));
    extra.json.insert(
        "ratios".into(),
        json!({
            "claim_p99_over_floor_spawned_p99": start_ratio,
            "finished_p99_over_floor_reaped_p99": end_ratio,
        }),
    );
    Ok(finish_single_with(
        env,
        "processes",
        &title,
        &run,
        targets,
        extra,
    ))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn show_ratio(r: Option<f64>) -> String {
    r.map_or("-".to_string(), |r| format!("{r:.2}×"))
}
