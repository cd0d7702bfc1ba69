//! The verdict, as the run ends (or on `--recheck`): the summary table and
//! every finding with its evidence on stdout, and, after a run, the same
//! text in `checker.txt` and the figures in `summary.json`.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::check::{Excuse, Report, Violation};
use crate::evidence::Evidence;
use crate::harness::config::JOBS;
use crate::wall::clock;

/// Where the report goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Stdout only (`--recheck`: the output directory is left as it is).
    Print,
    /// Stdout, `checker.txt` and `summary.json`.
    PrintAndWrite,
}

/// The figures that decide: which properties failed.
struct Verdict {
    failures: Vec<&'static str>,
    m_outside: usize,
    o_max: usize,
}

impl Verdict {
    fn of(report: &Report) -> Verdict {
        let m_outside = report.m.iter().filter(|v| !v.excused()).count();
        let o_max = report.o_max.values().copied().max().unwrap_or(0);
        let failures = [
            ("D", outside(&report.d) > 0),
            ("M outside windows", m_outside > 0),
            ("F", outside(&report.f) > 0),
            ("S", outside(&report.s) > 0),
            ("O", report.o_outside > 1),
            ("L", outside(&report.l) > 0),
            ("E", !report.e.is_empty()),
            ("N", outside(&report.n) > 0),
            ("C", outside(&report.c) > 0),
            ("G", outside(&report.g) > 0),
        ]
        .into_iter()
        .filter_map(|(name, failed)| failed.then_some(name))
        .collect();
        Verdict {
            failures,
            m_outside,
            o_max,
        }
    }

    fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

impl Evidence {
    /// Prints the summary table and the violations, writes `summary.json`
    /// and `checker.txt` for `Output::PrintAndWrite`; true when everything
    /// passed.
    pub fn report(&self, report: &Report, output: Output) -> Result<bool> {
        let verdict = Verdict::of(report);
        let mut text = self.summary_table(report, &verdict);
        text.push_str(&explanation(report));
        text.push_str(&findings(report));
        text.push_str(&self.verdict_line(&verdict));
        print!("{text}");
        if output == Output::Print {
            return Ok(verdict.passed());
        }
        std::fs::write(self.out.join("checker.txt"), &text).context("cannot write checker.txt")?;
        std::fs::write(
            self.out.join("summary.json"),
            serde_json::to_string_pretty(&self.summary_json(report, &verdict))? + "\n",
        )
        .context("cannot write summary.json")?;
        println!(
            "\nsummary: {}/summary.json, report: {}/checker.txt, faults: {}/faults.jsonl",
            self.out.display(),
            self.out.display(),
            self.out.display()
        );
        Ok(verdict.passed())
    }

    /// How many faults of each kind, by name.
    fn faults_by_kind(&self) -> BTreeMap<&'static str, usize> {
        let mut by_kind = BTreeMap::new();
        for fault in &self.faults {
            *by_kind.entry(fault.kind.name()).or_default() += 1;
        }
        by_kind
    }

    /// The aligned table under `summary`.
    fn summary_table(&self, report: &Report, verdict: &Verdict) -> String {
        let faults_line = self
            .faults_by_kind()
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let ticks = format!(
            "{} ({} jobs × {} s, {} – {})",
            report.ticks_checked,
            JOBS.len(),
            report.ticks_checked / JOBS.len().max(1),
            clock(report.from_ms),
            clock(report.to_ms)
        );
        let o_by_job = report
            .o_max
            .iter()
            .map(|(job, n)| format!("{job} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut rows: Vec<(&str, String)> = vec![
            ("seed", self.meta.seed.to_string()),
            (
                "duration",
                format!("{:?}, {} replicas", self.meta.duration, self.meta.replicas),
            ),
            (
                "faults injected",
                format!("{} ({faults_line})", self.faults.len()),
            ),
            ("ticks checked", ticks),
            ("runs started", report.runs_started.to_string()),
            ("outcome records", report.records.to_string()),
            ("D  started twice", counted(&report.d)),
            (
                "M  missed",
                format!(
                    "{} ({} outside declared windows)",
                    report.m.len(),
                    verdict.m_outside
                ),
            ),
            ("F  fence regressions", counted(&report.f)),
            ("S  two current outcomes", counted(&report.s)),
            (
                "O  max concurrent runs",
                format!(
                    "{} outside state-loss windows; {} overall ({o_by_job})",
                    report.o_outside, verdict.o_max
                ),
            ),
            ("L  outcomes lost", counted(&report.l)),
            ("E  replica exits", report.e.len().to_string()),
            ("N  notifications", notifications_row(report)),
            ("C  chains", chain_row(report)),
            (
                "G  placement limits",
                format!(
                    "{} outside windows; most at once: group {} (max {}), one replica {} (max_runs {})",
                    outside(&report.g),
                    report.g_group_max,
                    crate::harness::config::GROUP.1,
                    report.g_capacity_max,
                    crate::harness::config::MAX_RUNS
                ),
            ),
        ];
        rows.extend(information_rows(report));
        let width = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        let mut text = String::from("\nsummary\n");
        for (key, value) in &rows {
            text.push_str(&format!("  {key:<width$}  {value}\n"));
        }
        text.push_str(&notifications_table(report));
        text
    }

    /// PASSED, or what failed and how to replay it.
    fn verdict_line(&self, verdict: &Verdict) -> String {
        let seed = self.meta.seed;
        if verdict.passed() {
            format!("\nPASSED (seed {seed})\n")
        } else {
            format!(
                "\nFAILED: {} (seed {seed}; replay with --seed {seed} --duration {:?} --replicas {})\n",
                verdict.failures.join(", "),
                self.meta.duration,
                self.meta.replicas
            )
        }
    }

    /// The figures of `summary.json`.
    fn summary_json(&self, report: &Report, verdict: &Verdict) -> Value {
        let mut summary = json!({
            "seed": self.meta.seed,
            "duration_s": self.meta.duration.as_secs_f64(),
            "replicas": self.meta.replicas,
            "out": self.out.display().to_string(),
            "passed": verdict.passed(),
            "failures": verdict.failures,
            "faults": self.faults_by_kind(),
            "faults_total": self.faults.len(),
            "ticks_checked": report.ticks_checked,
            "check_from_ms": report.from_ms,
            "check_to_ms": report.to_ms,
            "runs_started": report.runs_started,
            "outcome_records": report.records,
            "D": outside(&report.d),
            "D_in_state_loss_window": inside(&report.d),
            "M": report.m.len(),
            "M_outside_windows": verdict.m_outside,
            "F": outside(&report.f),
            "F_in_state_loss_window": inside(&report.f),
            "S": outside(&report.s),
            "S_in_state_loss_window": inside(&report.s),
            "O": report.o_outside,
            "O_overall": verdict.o_max,
            "O_by_job": report.o_max,
            "L": outside(&report.l),
            "L_in_state_loss_window": inside(&report.l),
            "E": report.e.len(),
            "N": outside(&report.n),
            "N_in_state_loss_window": inside(&report.n),
            "notifications": notifications_json(report),
            "C": outside(&report.c),
            "C_in_state_loss_window": inside(&report.c),
            "G": outside(&report.g),
            "G_in_state_loss_window": inside(&report.g),
            "G_group_max": report.g_group_max,
            "G_capacity_max": report.g_capacity_max,
            "chain": report.chain.to_json(),
        });
        let more = json!({
            "claimed_not_started": report.claimed_not_started.len(),
            "phantom_claims": report.phantoms.len(),
            "skipped_behind_phantoms": report.phantom_skips,
            "state_loss_excluded_ticks": report.state_loss_ticks,
            "takeover_ms": stats_json(&report.takeover),
            "takeover_any_replica_ms": stats_json(&report.takeover_any),
            "abort_latency_ms": stats_json(&report.abort_latency),
            "abort_after_sigcont_ms": stats_json(&report.abort_after_cont),
            "held_at_sigstop": report.held_at_stop,
            "ended_while_frozen": report.ended_while_frozen,
            "state_loss_log_lines": report.state_loss_lines,
            "violations": violations_json(report),
        });
        if let (Some(summary), Value::Object(more)) = (summary.as_object_mut(), more) {
            summary.extend(more);
        }
        summary
    }
}

/// N's line in the summary.
fn notifications_row(report: &Report) -> String {
    let notifications = &report.notifications;
    if !notifications.checked {
        return "n/a (no notifications.jsonl: the run had no webhook sink)".to_string();
    }
    let repeats = match notifications.repeats_allowed {
        true => "a key may repeat: a replica was killed or frozen",
        false => "a key may not repeat: no replica was killed or frozen",
    };
    format!(
        "{} ({} requests, {} keys; {repeats})",
        counted(&report.n),
        notifications.deliveries,
        notifications.keys
    )
}

/// C's line in the summary: the follower's runs against its upstreams'
/// outcomes (its duplicates and misses are in D and M).
fn chain_row(report: &Report) -> String {
    let chain = &report.chain;
    let triggers = chain
        .by_trigger
        .iter()
        .map(|(trigger, n)| format!("{trigger} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let statuses = chain
        .by_status
        .iter()
        .map(|(status, n)| format!("{status} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{} ({} upstream outcomes of {} in the window: {} followed once, {} more than once (D), \
         {} never (M) + {} excused; {} current {} records ({triggers}; {statuses}), {} started)",
        counted(&report.c),
        chain.upstream_outcomes,
        crate::harness::config::FOLLOWER_UPSTREAMS.join(" and "),
        chain.followed,
        chain.duplicated,
        chain.missing,
        chain.missing_excused,
        chain.records,
        crate::harness::config::FOLLOWER.0,
        chain.starts
    )
}

/// The per-kind figures of the notifications, under the summary.
fn notifications_table(report: &Report) -> String {
    let notifications = &report.notifications;
    if !notifications.checked {
        return String::new();
    }
    let mut text = format!(
        "\nnotifications\n  {:<11} {:>8} {:>9} {:>7} {:>8} {:>10} {:>10}\n",
        "event", "expected", "delivered", "missing", "excused", "duplicates", "unexpected"
    );
    let mut total = crate::check::KindFigures::default();
    for (kind, f) in &notifications.by_kind {
        text.push_str(&format!(
            "  {kind:<11} {:>8} {:>9} {:>7} {:>8} {:>10} {:>10}\n",
            f.expected, f.delivered, f.missing, f.excused, f.duplicates, f.unexpected
        ));
        total.expected += f.expected;
        total.delivered += f.delivered;
        total.missing += f.missing;
        total.excused += f.excused;
        total.duplicates += f.duplicates;
        total.unexpected += f.unexpected;
    }
    text.push_str(&format!(
        "  {:<11} {:>8} {:>9} {:>7} {:>8} {:>10} {:>10}\n",
        "all",
        total.expected,
        total.delivered,
        total.missing,
        total.excused,
        total.duplicates,
        total.unexpected
    ));
    text.push_str(
        "  (excused: not delivered, and recorded inside a state-loss window, after a streak \
         crossed one, or after the wait for deliveries began; unexpected: delivered, no current \
         outcome calls for it)\n",
    );
    text
}

/// The notification figures of `summary.json`.
fn notifications_json(report: &Report) -> Value {
    let notifications = &report.notifications;
    let by_kind: BTreeMap<&str, Value> = notifications
        .by_kind
        .iter()
        .map(|(kind, f)| (kind.as_str(), f.to_json()))
        .collect();
    json!({
        "checked": notifications.checked,
        "requests": notifications.deliveries,
        "keys": notifications.keys,
        "repeats_allowed": notifications.repeats_allowed,
        "by_kind": by_kind,
    })
}

/// The rows after the properties: information and measurements.
fn information_rows(report: &Report) -> Vec<(&'static str, String)> {
    vec![
        (
            "claimed, never started",
            format!(
                "{} (an outcome such as abandoned, but no start line: not M)",
                report.claimed_not_started.len()
            ),
        ),
        (
            "phantom claims",
            format!(
                "{} (landed after their replica gave up; {} ticks skipped_overlap behind \
                 them: information)",
                report.phantoms.len(),
                report.phantom_skips
            ),
        ),
        (
            "excluded (state loss)",
            format!("{} ticks", report.state_loss_ticks),
        ),
        ("takeover after kill -9", stats(&report.takeover)),
        ("  …by any replica", stats(&report.takeover_any)),
        ("abort after lease lapse", stats(&report.abort_latency)),
        ("abort after SIGCONT", stats(&report.abort_after_cont)),
        (
            "state loss detected",
            format!(
                "{} log lines `REDIS STATE LOSS DETECTED`",
                report.state_loss_lines
            ),
        ),
    ]
}

/// What takeover and abort measure.
fn explanation(report: &Report) -> String {
    format!(
        "\n  takeover: from the kill -9 of a replica holding a run of a non-allow job to the \
         next `start` of that job on another replica ({} measured; \"by any replica\" also counts \
         the killed replica, restarted as a new process after 1–3 s).\n  abort: runs the frozen \
         replica held at SIGSTOP; from SIGSTOP + lease (when the lease had lapsed at the \
         latest; it may have lapsed up to lease/3 earlier) and from SIGCONT, to the replica's \
         log line `lease could not be renewed before its deadline` or `lease is no longer \
         ours` for that run (log time corrected by the host's known skew); {} of {} held \
         runs had already ended on their own while the daemon was frozen.\n",
        report.takeover.len(),
        report.ended_while_frozen,
        report.held_at_stop
    )
}

/// Every violation with its evidence, then the information and warnings.
fn findings(report: &Report) -> String {
    let mut text = String::new();
    let groups: [(&str, &Vec<Violation>); 8] = [
        ("D", &report.d),
        ("F", &report.f),
        ("S", &report.s),
        ("L", &report.l),
        ("O", &report.o),
        ("N", &report.n),
        ("C", &report.c),
        ("G", &report.g),
    ];
    for (name, list) in groups {
        for violation in list {
            let label = match violation.excuse {
                Some(Excuse::FrozenHolder) => format!("{name} (excused: a frozen holder)"),
                Some(Excuse::Window) => format!("{name} (inside the declared state-loss window)"),
                None => name.to_string(),
            };
            text.push_str(&format!("\n{label}: {}\n", violation.render()));
        }
    }
    for violation in &report.m {
        let label = if violation.excused() {
            "M (inside a declared window)"
        } else {
            "M"
        };
        text.push_str(&format!("\n{label}: {}\n", violation.render()));
    }
    for problem in &report.e {
        text.push_str(&format!("\nE: {problem}\n"));
    }
    for phantom in &report.phantoms {
        text.push_str(&format!(
            "\nphantom claim (information): {}\n",
            phantom.render()
        ));
    }
    if !report.claimed_not_started.is_empty() {
        text.push_str("\nclaimed, never started (information):\n");
        for line in &report.claimed_not_started {
            text.push_str(&format!("  {line}\n"));
        }
    }
    if !report.warnings.is_empty() {
        text.push_str("\nwarnings:\n");
        for line in &report.warnings {
            text.push_str(&format!("  {line}\n"));
        }
    }
    text
}

/// The violations that count, and every E, for `summary.json`.
fn violations_json(report: &Report) -> Vec<Value> {
    let mut violations: Vec<Value> = Vec::new();
    for (name, list) in [
        ("D", &report.d),
        ("M", &report.m),
        ("F", &report.f),
        ("S", &report.s),
        ("O", &report.o),
        ("L", &report.l),
        ("N", &report.n),
        ("C", &report.c),
        ("G", &report.g),
    ] {
        violations.extend(
            list.iter()
                .filter(|v| !v.excused())
                .map(|v| v.to_json(name)),
        );
    }
    violations.extend(report.e.iter().map(|p| json!({"kind": "E", "message": p})));
    violations
}

/// Violations outside the declared windows: the ones that count.
fn outside(list: &[Violation]) -> usize {
    list.iter().filter(|v| !v.excused()).count()
}

fn inside(list: &[Violation]) -> usize {
    list.iter().filter(|v| v.excused()).count()
}

fn counted(list: &[Violation]) -> String {
    match inside(list) {
        0 => outside(list).to_string(),
        n => format!(
            "{} (+{n} inside the state-loss window, not counted)",
            outside(list)
        ),
    }
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats(values: &[i64]) -> String {
    if values.is_empty() {
        return "n/a (nothing to measure)".to_string();
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    format!(
        "p50 {} ms, max {} ms (n = {})",
        percentile(&sorted, 0.5),
        sorted[sorted.len() - 1],
        sorted.len()
    )
}

fn stats_json(values: &[i64]) -> Value {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    json!({
        "n": sorted.len(),
        "p50": (!sorted.is_empty()).then(|| percentile(&sorted, 0.5)),
        "max": sorted.last(),
        "values": sorted,
    })
}
