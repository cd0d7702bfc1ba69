//! The dashboard's pictures: outcome strips (HTML cells), the replicas'
//! timeline and the job page's charts (inline SVG drawn here, coloured by
//! the stylesheet's status classes).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use maud::{Markup, PreEscaped, html};

use super::{RunState, TimelineRun};
use crate::operator::HistoryEntry;
use crate::outcome::Status;

/// The CSS class of a status (`s-ok`, `s-lost_lease`, …).
pub(super) fn status_class(status: Status) -> String {
    format!("s-{}", status.as_str())
}

/// The last outcomes of a job as a row of coloured cells, oldest first.
/// `newest_first` is how `history` returns them.
pub(super) fn strip(newest_first: &[HistoryEntry]) -> Markup {
    let counts = newest_first
        .iter()
        .fold(BTreeMap::<&str, usize>::new(), |mut counts, e| {
            *counts.entry(e.status.as_str()).or_default() += 1;
            counts
        });
    let summary = counts
        .iter()
        .map(|(status, n)| format!("{n} {status}"))
        .collect::<Vec<_>>()
        .join(", ");
    html! {
        span.strip role="img" aria-label=(format!("last {} outcomes: {summary}", newest_first.len())) {
            @for e in newest_first.iter().rev() {
                span class=(format!("cell {}", status_class(e.status)))
                    title=(format!("{} {} on {} (fence {})", e.tick, e.status, if e.replica.is_empty() { "-" } else { &e.replica }, e.fence)) {}
            }
        }
    }
}

/// Width of the timeline's drawing area, in SVG units.
const TIMELINE_WIDTH: f64 = 1000.0;
const LANE_HEIGHT: f64 = 22.0;
const LABEL_WIDTH: f64 = 160.0;
/// The most bars drawn (the newest): more would not be readable anyway.
const MAX_BARS: usize = 4000;

/// The windows the timeline zooms to, shortest first (ms).
const TIMELINE_WINDOWS_MS: [i64; 7] = [
    60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000,
];

/// One lane per replica, one bar per run from its start to its end (now,
/// for a run in flight, drawn hatched), over the hour before `now_ms` —
/// or over the shortest of [`TIMELINE_WINDOWS_MS`] that holds every run of
/// that hour, so that a young cluster's runs are not slivers at the edge.
pub(super) fn timeline(
    runs: &[TimelineRun],
    replicas: &[String],
    now_ms: i64,
    span_ms: i64,
) -> Markup {
    let scale = Scale::of(runs, now_ms, span_ms);
    let lanes = lanes(runs, replicas);
    let height = LANE_HEIGHT * lanes.len().max(1) as f64 + 24.0;
    let mut newest: Vec<&TimelineRun> = runs
        .iter()
        .filter(|r| r.finished_ms >= scale.start_ms)
        .collect();
    newest.sort_unstable_by_key(|r| std::cmp::Reverse(r.started_ms));
    newest.truncate(MAX_BARS);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="timeline" viewBox="0 0 {w} {height}" width="100%" role="img" aria-label="runs of the last hour by replica">"#,
        w = LABEL_WIDTH + TIMELINE_WIDTH + 10.0
    );
    for (i, lane) in lanes.iter().enumerate() {
        let y = i as f64 * LANE_HEIGHT;
        let _ = write!(
            svg,
            r#"<g class="lane" data-replica="{r}"><rect class="lane-bg" x="{LABEL_WIDTH}" y="{y}" width="{TIMELINE_WIDTH}" height="{h}"/><text x="4" y="{ty}">{r}</text>"#,
            r = escape(lane),
            h = LANE_HEIGHT - 4.0,
            ty = y + LANE_HEIGHT / 2.0 + 3.0,
        );
        for run in newest.iter().filter(|r| r.replica == *lane) {
            bar(&mut svg, &scale, run, y);
        }
        svg.push_str("</g>");
    }
    axis(
        &mut svg,
        &scale,
        LANE_HEIGHT * lanes.len().max(1) as f64 + 14.0,
    );
    svg.push_str("</svg>");
    PreEscaped(svg)
}

/// The time the timeline shows: from `start_ms`, `span_ms` long.
struct Scale {
    start_ms: i64,
    span_ms: i64,
}

impl Scale {
    /// The shortest of the windows that holds every run that ended within
    /// the last `span_ms`, up to `span_ms`.
    fn of(runs: &[TimelineRun], now_ms: i64, span_ms: i64) -> Scale {
        let oldest_ms = runs
            .iter()
            .filter(|r| r.finished_ms >= now_ms - span_ms)
            .map(|r| r.started_ms)
            .min()
            .unwrap_or(now_ms);
        let span_ms = TIMELINE_WINDOWS_MS
            .into_iter()
            .find(|&w| w >= now_ms.saturating_sub(oldest_ms))
            .unwrap_or(span_ms)
            .min(span_ms);
        Scale {
            start_ms: now_ms - span_ms,
            span_ms,
        }
    }

    /// Where `ms` is on the drawing.
    fn x(&self, ms: i64) -> f64 {
        LABEL_WIDTH
            + ms.saturating_sub(self.start_ms).clamp(0, self.span_ms) as f64 / self.span_ms as f64
                * TIMELINE_WIDTH
    }
}

/// One lane per replica, listed or seen in a run, in name order.
fn lanes<'a>(runs: &'a [TimelineRun], replicas: &'a [String]) -> Vec<&'a str> {
    let mut lanes: Vec<&str> = replicas.iter().map(String::as_str).collect();
    for run in runs {
        if !lanes.contains(&run.replica.as_str()) {
            lanes.push(&run.replica);
        }
    }
    lanes.sort_unstable();
    lanes
}

/// A run's bar in its replica's lane (at `y`), titled with what it was.
fn bar(svg: &mut String, scale: &Scale, run: &TimelineRun, y: f64) {
    let (x0, x1) = (scale.x(run.started_ms), scale.x(run.finished_ms));
    let (class, what) = match run.state {
        RunState::Ended(status) => (status_class(status), status.as_str().to_string()),
        RunState::Running => ("running".to_string(), "running".to_string()),
    };
    let _ = write!(
        svg,
        r#"<rect class="bar {class}" data-job="{job}" x="{x0:.1}" y="{y1}" width="{w:.1}" height="{h}"><title>{job} tick {tick} fence {fence} on {r}: {what}, {dur}</title></rect>"#,
        job = escape(&run.job),
        y1 = y + 2.0,
        w = (x1 - x0).max(1.5),
        h = LANE_HEIGHT - 8.0,
        tick = super::format::utc(run.tick_ms),
        fence = run.fence,
        r = escape(&run.replica),
        dur = super::format::duration(run.finished_ms.saturating_sub(run.started_ms)),
    );
}

/// The axis at `axis_y`: six steps, labelled in minutes (or seconds) ago.
fn axis(svg: &mut String, scale: &Scale, axis_y: f64) {
    for step in 0..=6 {
        let ms = scale.start_ms + scale.span_ms * step / 6;
        let ago_ms = (6 - step) * scale.span_ms / 6;
        let label = match ago_ms {
            0 => "now".to_string(),
            ms if ms % 60_000 == 0 => format!("-{} min", ms / 60_000),
            ms => format!("-{} s", ms / 1000),
        };
        let _ = write!(
            svg,
            r#"<text class="axis" x="{x:.1}" y="{axis_y}" text-anchor="middle">{label}</text>"#,
            x = scale.x(ms)
        );
    }
}

const CHART_WIDTH: f64 = 600.0;
const CHART_HEIGHT: f64 = 120.0;

/// A bar chart of `values` (ms, oldest first), one bar per run, each with
/// `labels` as its tooltip, the largest value on the axis.
pub(super) fn chart(title: &str, values: &[(i64, String, Status)]) -> Markup {
    let max = values.iter().map(|(v, _, _)| *v).max().unwrap_or(0).max(1);
    let n = values.len().max(1) as f64;
    let step = CHART_WIDTH / n;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {w} {h}" width="100%" role="img" aria-label="{t}">"#,
        w = CHART_WIDTH + 70.0,
        h = CHART_HEIGHT + 20.0,
        t = escape(title),
    );
    let _ = write!(
        svg,
        r#"<text class="axis" x="{x}" y="12">{max}</text><text class="axis" x="{x}" y="{b}">0</text><line class="axis-line" x1="0" x2="{CHART_WIDTH}" y1="{CHART_HEIGHT}" y2="{CHART_HEIGHT}"/>"#,
        x = CHART_WIDTH + 6.0,
        b = CHART_HEIGHT,
        max = super::format::duration(max),
    );
    for (i, (value, label, status)) in values.iter().enumerate() {
        let h = (*value).max(0) as f64 / max as f64 * (CHART_HEIGHT - 4.0);
        let _ = write!(
            svg,
            r#"<rect class="bar {class}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}"><title>{label}: {v}</title></rect>"#,
            class = status_class(*status),
            x = i as f64 * step + step * 0.1,
            y = CHART_HEIGHT - h,
            w = (step * 0.8).max(1.0),
            h = h.max(1.0),
            label = escape(label),
            v = super::format::duration(*value),
        );
    }
    svg.push_str("</svg>");
    PreEscaped(svg)
}

/// Text made safe inside SVG markup written by hand.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(replica: &str, job: &str, started_ms: i64, state: RunState) -> TimelineRun {
        TimelineRun {
            job: job.into(),
            replica: replica.into(),
            tick_ms: started_ms,
            fence: 1,
            started_ms,
            finished_ms: started_ms + 1_000,
            state,
        }
    }

    #[test]
    fn the_timeline_draws_each_run_in_its_replicas_lane() {
        let now = 10_000_000;
        let runs = [
            run("a", "draw", now - 60_000, RunState::Ended(Status::Ok)),
            run(
                "b",
                "draw",
                now - 30_000,
                RunState::Ended(Status::Abandoned),
            ),
            run("c", "report<&>", now - 5_000, RunState::Running),
            // Older than the span: not drawn.
            run("a", "old", now - 7_200_000, RunState::Ended(Status::Ok)),
        ];
        let svg = timeline(&runs, &["a".into(), "b".into()], now, 3_600_000).into_string();
        for lane in ["a", "b", "c"] {
            assert!(svg.contains(&format!(r#"data-replica="{lane}""#)), "{svg}");
        }
        assert_eq!(svg.matches("<rect class=\"bar").count(), 3, "{svg}");
        assert!(svg.contains("bar s-abandoned"));
        assert!(svg.contains("bar running"));
        assert!(
            svg.contains("report&lt;&amp;&gt;"),
            "names are escaped: {svg}"
        );
        assert!(!svg.contains("data-job=\"old\""));
    }

    #[test]
    fn a_strip_reads_oldest_to_newest_and_says_what_it_shows() {
        let entry = |status: Status, tick: &str| HistoryEntry {
            id: "1-0".into(),
            run_id: String::new(),
            tick_ms: 0,
            tick: tick.into(),
            status,
            replica: "a".into(),
            fence: 1,
            started_ms: 0,
            finished_ms: 0,
            duration_ms: 0,
            cpu_ms: None,
            peak_memory_kb: None,
            exit_code: None,
            signal: None,
            attempts: 1,
            trigger: crate::outcome::Trigger::Schedule,
            upstream: None,
            stale: false,
            calendar: None,
            calendar_rule: None,
            params: Default::default(),
            no_matching_replica: None,
            killed_by: None,
            reason: None,
            group: None,
            output: None,
        };
        let html = strip(&[entry(Status::Failed, "t2"), entry(Status::Ok, "t1")]).into_string();
        assert!(
            html.find("t1").unwrap() < html.find("t2").unwrap(),
            "{html}"
        );
        assert!(html.contains("last 2 outcomes: 1 failed, 1 ok"), "{html}");
    }
}
