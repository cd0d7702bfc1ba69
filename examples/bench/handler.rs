//! Tick-to-handler figures of embedded replicas, from the handler calls
//! they noted and the outcome streams.
//!
//! An outcome's `started_ms` is the Redis time read inside the claim
//! script, before the reply reaches the replica: it leaves out the way
//! back, the run's start and the task's. The handler notes its own wall
//! clock (µs) as the first thing it does; the bench, the replicas and Redis
//! run on one host, so that is the clock Redis's `TIME` reads, and the
//! offset the bench measured between its clock and Redis's is applied
//! anyway.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::cluster::{Call, Rec, Window, job_name};
use crate::ticks::Percentiles;

/// What the handler calls of one window's ticks add up to.
pub struct HandlerFigures {
    /// Calls for ticks in the window.
    pub calls: u64,
    /// Ticks whose handler was called more than once.
    pub duplicates: u64,
    /// `ok` outcomes in the window without a noted call (0 unless the
    /// notes were lost: a replica killed before it wrote them).
    pub ok_without_call: u64,
    /// Handler call − tick, by Redis time, µs.
    pub lateness_us: Option<Percentiles>,
    /// Handler call − the claim's `started_ms` (which is floored to the
    /// ms, so this reads up to 1 ms high), µs.
    pub claim_to_handler_us: Option<Percentiles>,
    /// Redis time − the bench's clock, µs, as measured at the start.
    pub offset_us: i64,
}

impl HandlerFigures {
    pub fn new(window: &Window, outcomes: &[Vec<Rec>], calls: &[Call], offset_us: i64) -> Self {
        let in_window = |tick: i64| tick >= window.t0 && tick < window.t1;
        let mut by_tick: HashMap<(&str, i64), Vec<&Call>> = HashMap::new();
        for call in calls.iter().filter(|c| in_window(c.tick_ms)) {
            by_tick
                .entry((call.job.as_str(), call.tick_ms))
                .or_default()
                .push(call);
        }
        let handler_us = |call: &Call| call.wall_us + offset_us;
        let lateness: Vec<i64> = by_tick
            .values()
            .flatten()
            .map(|c| handler_us(c) - c.tick_ms * 1_000)
            .collect();
        let mut ok_without_call = 0;
        let mut claim_to_handler = Vec::new();
        for (n, recs) in outcomes.iter().enumerate() {
            let job = job_name(n);
            for rec in recs
                .iter()
                .filter(|r| r.status == "ok" && in_window(r.tick))
            {
                let call = by_tick
                    .get(&(job.as_str(), rec.tick))
                    .and_then(|calls| calls.iter().find(|c| c.replica == rec.replica));
                match (call, rec.started_ms) {
                    (Some(call), Some(started)) => {
                        claim_to_handler.push(handler_us(call) - started * 1_000);
                    }
                    (Some(_), None) => {}
                    (None, _) => ok_without_call += 1,
                }
            }
        }
        HandlerFigures {
            calls: lateness.len() as u64,
            duplicates: by_tick.values().filter(|c| c.len() > 1).count() as u64,
            ok_without_call,
            lateness_us: Percentiles::of(lateness),
            claim_to_handler_us: Percentiles::of(claim_to_handler),
            offset_us,
        }
    }

    /// The rows this adds to a scenario's table.
    pub fn rows(&self) -> Vec<Vec<String>> {
        vec![
            vec!["handler calls".into(), self.calls.to_string()],
            vec![
                "  ticks whose handler ran twice or more".into(),
                self.duplicates.to_string(),
            ],
            vec![
                "  ok outcomes without a handler call".into(),
                self.ok_without_call.to_string(),
            ],
            vec![
                "tick → handler lateness p50 / p99 / max".into(),
                show_us(self.lateness_us),
            ],
            vec![
                "  claim → handler p50 / p99 / max (claim ms floored)".into(),
                show_us(self.claim_to_handler_us),
            ],
            vec![
                "  Redis − bench clock offset applied".into(),
                format!("{} µs", self.offset_us),
            ],
        ]
    }

    pub fn json(&self) -> Value {
        json!({
            "calls": self.calls,
            "duplicates": self.duplicates,
            "ok_without_call": self.ok_without_call,
            "tick_to_handler": json_us(self.lateness_us),
            "claim_to_handler": json_us(self.claim_to_handler_us),
            "redis_minus_bench_clock_us": self.offset_us,
        })
    }
}

/// µs percentiles as ms with two decimals.
pub fn show_us(p: Option<Percentiles>) -> String {
    let ms = |us: i64| format!("{:.2}", us as f64 / 1000.0);
    p.map_or("-".to_string(), |p| {
        format!("{} / {} / {} ms", ms(p.p50), ms(p.p99), ms(p.max))
    })
}

pub fn json_us(p: Option<Percentiles>) -> Value {
    p.map_or(
        Value::Null,
        |p| json!({"p50_us": p.p50, "p99_us": p.p99, "max_us": p.max, "count": p.count}),
    )
}
