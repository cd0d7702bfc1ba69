//! `cronlease explain` as text: the verdict first, then the run, the
//! schedule around the tick, the reasons and the replicas. Every value
//! read from Redis goes through `inert::escape`, so a name or a `who`
//! holding control characters cannot write to the terminal.

use std::fmt::Write as _;

use super::report::{ChainFacts, Explanation, RunFacts, span, text_of};
use crate::inert::escape;

/// The explanation as lines of text for a terminal.
pub fn render_explanation(explanation: &Explanation) -> String {
    let mut out = String::new();
    let e = explanation;
    let _ = writeln!(out, "{} tick {}", escape(&e.job), e.tick);
    let verdict = serde_json::to_value(e.verdict)
        .ok()
        .and_then(|v| v.as_str().map(|s| s.replace('_', " ").to_uppercase()))
        .unwrap_or_default();
    let _ = writeln!(out, "{verdict}: {}", escape(&e.summary));
    if let Some(schedule) = &e.schedule {
        let _ = writeln!(
            out,
            "  schedule   {:?} in {} (local {})",
            schedule.expression, schedule.timezone, schedule.tick_local
        );
        let _ = writeln!(
            out,
            "  around     previous {}, next {}",
            schedule.previous_tick.as_deref().unwrap_or("none"),
            schedule
                .next_tick
                .as_deref()
                .unwrap_or("none (no further tick)")
        );
        if let Some(dst) = &schedule.dst {
            let _ = writeln!(
                out,
                "  dst        {} at {} ({}), {}: {}",
                dst.kind, dst.transition, dst.local_times, dst.rule, dst.effect
            );
        }
    }
    if let Some(run) = &e.run {
        render_run(&mut out, run);
    }
    if let Some(chain) = &e.chain {
        render_chain(&mut out, chain);
    }
    if !e.reasons.is_empty() {
        let _ = writeln!(out, "why:");
        for reason in &e.reasons {
            let _ = writeln!(out, "  - [{}] {}", reason.kind, escape(&reason.text));
        }
    }
    if !e.replicas.is_empty() {
        let _ = writeln!(out, "replicas:");
        for r in &e.replicas {
            let _ = writeln!(
                out,
                "  {} ({}) {}, started {}, last seen {} ago{}",
                escape(&r.id),
                escape(&r.host),
                if r.alive { "alive" } else { "dead" },
                text_of(r.started_ms),
                span(e.now_ms.saturating_sub(r.last_seen_ms)),
                if r.up_at_tick { ", up at the tick" } else { "" }
            );
        }
    }
    out
}

/// The chain's lines: upstreams and followers, what the run followed and
/// what it started.
fn render_chain(out: &mut String, chain: &ChainFacts) {
    if !chain.after.is_empty() {
        let _ = writeln!(out, "  after      {}", escape(&chain.after.join(", ")));
    }
    if !chain.followers.is_empty() {
        let _ = writeln!(out, "  then       {}", escape(&chain.followers.join(", ")));
    }
    if let Some(upstream) = &chain.caused_by {
        for run in upstream.runs() {
            let _ = writeln!(
                out,
                "  followed   {} run {} ({}), chain begun at tick {}",
                escape(run.job()),
                escape(run.run_id()),
                run.status(),
                text_of(upstream.root_tick_ms())
            );
        }
    }
    for caused in &chain.caused {
        let _ = writeln!(
            out,
            "  started    {} run {} ({}, tick {})",
            escape(&caused.job),
            escape(&caused.run_id),
            caused.status,
            caused.tick
        );
    }
}

/// The run's lines: who, when, how late, and how it ended or its lease.
fn render_run(out: &mut String, run: &RunFacts) {
    let _ = writeln!(
        out,
        "  run        {} on {}{}, fence {}, trigger {}, started {} ({} after the tick)",
        escape(&run.run_id),
        escape(&run.replica),
        if run.host.is_empty() {
            String::new()
        } else {
            format!(" ({})", escape(&run.host))
        },
        run.fence,
        run.trigger.as_str(),
        text_of(run.started_ms),
        span(run.late_ms)
    );
    if let (Some(status), Some(finished)) = (run.status, run.finished_ms) {
        let _ = writeln!(
            out,
            "  outcome    {status}, finished {}, took {}, {} attempt(s){}{}",
            text_of(finished),
            span(run.duration_ms.unwrap_or(0)),
            run.attempts.unwrap_or(0),
            run.exit_code
                .map(|c| format!(", exit code {c}"))
                .unwrap_or_default(),
            run.signal
                .map(|s| format!(", signal {s}"))
                .unwrap_or_default(),
        );
    }
    if let Some(left) = run.lease_left_ms {
        let _ = writeln!(out, "  lease      {} left unless renewed", span(left));
    }
}
