//! The checker: from what the jobs did, what the replicas recorded and what
//! was injected, every breach of the promise, one module per property:
//! D `duplicates`, M `missed`, F `fences`, S `one_outcome`, O `overlap`,
//! L `lost`, E `exits`, N `notifications`, G `placement` (the concurrency
//! group's and each replica's limits), C `chains` (the follower's runs
//! against its upstreams' outcomes: its duplicates and misses are added
//! to D and M); then `latency` (takeover and abort) and `phantoms`
//! (information). `facts` indexes the evidence and the declared windows.

mod chains;
mod duplicates;
mod exits;
mod facts;
mod fences;
mod latency;
mod lost;
mod missed;
mod notifications;
mod one_outcome;
mod overlap;
mod phantoms;
mod placement;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::evidence::Evidence;
use crate::faults::Fault;
use crate::records::{Record, parse_effects};
use crate::wall::rfc3339;
pub use chains::ChainFigures;
use facts::Facts;
pub use notifications::{KindFigures, Notifications};

/// The checked ticks start this long after every replica is ready and end
/// this long before the shutdown.
const CHECK_MARGIN_MS: i64 = 3_000;

/// One finding, with what shows it.
pub struct Violation {
    pub job: String,
    pub tick: Option<i64>,
    pub message: String,
    pub evidence: Vec<String>,
    /// Why it is reported but not counted, if it is.
    pub excuse: Option<Excuse>,
}

/// Why a finding is not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excuse {
    /// Inside a declared window: a state-loss window, and for M also a
    /// Redis outage.
    Window,
    /// O of a replica frozen (SIGSTOP) while it held the run: an embedded
    /// replica's handler ran on after SIGCONT, a daemon's child process
    /// while it was frozen; the fence's case.
    FrozenHolder,
}

impl Violation {
    /// Reported, not counted.
    pub fn excused(&self) -> bool {
        self.excuse.is_some()
    }
}

impl Violation {
    pub fn render(&self) -> String {
        let mut text = format!(
            "{} tick {}: {}",
            self.job,
            self.tick.map_or_else(|| "-".to_string(), rfc3339),
            self.message
        );
        for line in &self.evidence {
            text.push_str(&format!("\n    {line}"));
        }
        text
    }

    pub fn to_json(&self, kind: &str) -> Value {
        json!({"kind": kind, "job": self.job, "tick_ms": self.tick,
               "message": self.message, "evidence": self.evidence})
    }
}

struct CheckInput<'a> {
    effects_text: &'a str,
    /// `notifications.jsonl`, when the run had a webhook sink.
    notifications_text: Option<&'a str>,
    /// Events recorded after this may still be on their way at the end.
    settle_from_ms: i64,
    records: &'a [Record],
    faults: &'a [Fault],
    logs: &'a [(String, String)],
    from_ms: i64,
    to_ms: i64,
    replicas: usize,
    spooled: &'a [String],
    exit_problems: &'a [String],
    replica_kind: crate::ReplicaKind,
}

/// What the checker found.
#[derive(Default)]
pub struct Report {
    pub from_ms: i64,
    pub to_ms: i64,
    pub ticks_checked: usize,
    pub runs_started: usize,
    pub records: usize,
    pub d: Vec<Violation>,
    pub m: Vec<Violation>,
    pub f: Vec<Violation>,
    pub s: Vec<Violation>,
    pub o: Vec<Violation>,
    pub o_max: BTreeMap<String, usize>,
    /// The most runs at once outside state-loss windows.
    pub o_outside: usize,
    /// G: the group's and the replicas' limits broken (see `placement`).
    pub g: Vec<Violation>,
    /// The most runs of the group at once outside excused episodes.
    pub g_group_max: usize,
    /// The most runs on one replica at once outside excused episodes.
    pub g_capacity_max: usize,
    pub l: Vec<Violation>,
    /// Replicas that died by themselves, did not exit 0 on SIGTERM, or did
    /// not take a reload.
    pub e: Vec<String>,
    pub n: Vec<Violation>,
    pub notifications: Notifications,
    /// Chain findings that are neither D nor M, and the chain figures.
    pub c: Vec<Violation>,
    pub chain: ChainFigures,
    pub claimed_not_started: Vec<String>,
    /// Claims that landed in Redis after their replica had given up on them
    /// (information), and how many ticks were skipped behind them.
    pub phantoms: Vec<Violation>,
    pub phantom_skips: usize,
    pub state_loss_ticks: usize,
    pub takeover: Vec<i64>,
    pub takeover_any: Vec<i64>,
    pub abort_latency: Vec<i64>,
    pub abort_after_cont: Vec<i64>,
    pub held_at_stop: usize,
    pub ended_while_frozen: usize,
    pub state_loss_lines: usize,
    pub warnings: Vec<String>,
}

impl Evidence {
    /// Every property over the checked ticks: from `CHECK_MARGIN_MS` after
    /// the replicas were ready to as much before the shutdown, whole seconds.
    pub fn check(&self) -> Report {
        let input = CheckInput {
            effects_text: &self.effects_text,
            notifications_text: self.notifications_text.as_deref(),
            settle_from_ms: self.meta.settle_from_ms,
            records: &self.records,
            faults: &self.faults,
            logs: &self.logs,
            from_ms: ceil_second(self.meta.ready_ms + CHECK_MARGIN_MS),
            to_ms: floor_second(self.meta.shutdown_ms - CHECK_MARGIN_MS),
            replicas: self.meta.replicas,
            spooled: &self.spooled,
            exit_problems: &self.meta.exit_problems,
            replica_kind: self.meta.replica_kind,
        };
        check(&input)
    }
}

fn check(input: &CheckInput) -> Report {
    let mut report = Report {
        from_ms: input.from_ms,
        to_ms: input.to_ms,
        records: input.records.len(),
        ..Report::default()
    };
    let effects = parse_effects(input.effects_text, &mut report.warnings);
    let facts = Facts::new(input, &effects);
    report.runs_started = facts.start_of.len();
    report.state_loss_lines = input
        .logs
        .iter()
        .map(|(_, log)| log.matches("REDIS STATE LOSS DETECTED").count())
        .sum();

    duplicates::check_d(&facts, &mut report);
    missed::check_m(&facts, &mut report);
    fences::check_f(&facts, &mut report);
    one_outcome::check_s(&facts, &mut report);
    overlap::check_o(&facts, &mut report);
    placement::check_g(&facts, &mut report);
    lost::check_l(&facts, &mut report);
    exits::check_e(&facts, &mut report);
    notifications::check_n(&facts, &mut report);
    chains::check_c(&facts, &mut report);
    latency::measure_takeover(&facts, &mut report);
    latency::measure_abort(&facts, &mut report);
    phantoms::find_phantoms(&facts, &mut report);
    report
}

fn ceil_second(ms: i64) -> i64 {
    (ms + 999).div_euclid(1_000) * 1_000
}

fn floor_second(ms: i64) -> i64 {
    ms.div_euclid(1_000) * 1_000
}
