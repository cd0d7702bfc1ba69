//! The takeover of the scaling scenario: the ticks right after one replica
//! was killed with SIGKILL, and how soon its jobs ran elsewhere.

use serde_json::{Value, json};

use crate::clock::format_ms;
use crate::cluster::Rec;
use crate::ticks::{Percentiles, Schedule, TickStats};

/// The after-kill period of the scaling scenario.
pub const TAKEOVER_MS: i64 = 5_000;

/// The ticks right after the kill in the scaling scenario.
pub struct Takeover {
    kill_ms: i64,
    pub victim: String,
    pub ticks: TickStats,
    lateness: Option<Percentiles>,
    /// Ticks after the kill that started 100 ms or more late: a later rank
    /// claimed them.
    late_100: usize,
    /// For each job whose last run before the kill was the victim's: kill →
    /// start of its next run by another replica.
    handover: Option<Percentiles>,
    handover_jobs: usize,
    handover_never: usize,
}

impl Takeover {
    pub fn new(outcomes: &[Vec<Rec>], schedule: Schedule, kill_ms: i64, victim: &str) -> Takeover {
        let ticks = TickStats::new(outcomes, schedule, kill_ms + 1, kill_ms + TAKEOVER_MS + 1);
        let lateness = Percentiles::of(ticks.lateness_ms.clone());
        let late_100 = ticks.lateness_ms.iter().filter(|&&l| l >= 100).count();
        let mut handover = Vec::new();
        let mut never = 0;
        for recs in outcomes {
            let mut ok: Vec<&Rec> = recs.iter().filter(|r| r.status == "ok").collect();
            ok.sort_by_key(|r| r.tick);
            let last_before = ok.iter().rev().find(|r| r.tick <= kill_ms);
            if last_before.is_none_or(|r| r.replica != victim) {
                continue;
            }
            match ok.iter().find(|r| r.tick > kill_ms && r.replica != victim) {
                Some(next) => handover.push(next.started_ms.unwrap_or(next.tick) - kill_ms),
                None => never += 1,
            }
        }
        Takeover {
            kill_ms,
            victim: victim.to_string(),
            handover_jobs: handover.len() + never,
            handover: Percentiles::of(handover),
            handover_never: never,
            ticks,
            lateness,
            late_100,
        }
    }

    pub fn rows(&self) -> Vec<Vec<String>> {
        vec![
            vec![
                "killed".into(),
                format!("{} at {}", self.victim, format_ms(self.kill_ms)),
            ],
            vec!["ticks due".into(), self.ticks.due.to_string()],
            vec![
                "runs started (ok)".into(),
                self.ticks.runs_started.to_string(),
            ],
            vec!["duplicates".into(), self.ticks.duplicates.to_string()],
            vec!["missed".into(), self.ticks.missed.to_string()],
            vec!["other outcomes".into(), self.ticks.other_text()],
            vec![
                "lateness p50 / p99 / max".into(),
                Percentiles::show(self.lateness),
            ],
            vec![
                "ticks started ≥ 100 ms late".into(),
                self.late_100.to_string(),
            ],
            vec![
                format!("jobs last run by {} before the kill", self.victim),
                self.handover_jobs.to_string(),
            ],
            vec![
                "  kill → their next run elsewhere p50 / p99 / max".into(),
                Percentiles::show(self.handover),
            ],
            vec!["  never run again".into(), self.handover_never.to_string()],
        ]
    }

    pub fn json(&self) -> Value {
        json!({
            "victim": self.victim,
            "kill_ms": self.kill_ms,
            "kill": format_ms(self.kill_ms),
            "window_ms": TAKEOVER_MS,
            "ticks_due": self.ticks.due,
            "runs_started": self.ticks.runs_started,
            "duplicates": self.ticks.duplicates,
            "missed": self.ticks.missed,
            "other_outcomes": self.ticks.other,
            "lateness": Percentiles::json(self.lateness),
            "max_lateness_ms": self.lateness.map(|l| l.max),
            "ticks_late_100ms_or_more": self.late_100,
            "victim_jobs": self.handover_jobs,
            "kill_to_next_run_elsewhere": Percentiles::json(self.handover),
            "victim_jobs_never_run_again": self.handover_never,
        })
    }
}
