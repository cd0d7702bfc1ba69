//! The ticks due by the jobs' schedule, and what the outcome streams say
//! about them: runs, duplicates, misses, lateness percentiles.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};

use crate::cluster::Rec;

#[derive(Debug, Clone, Copy)]
pub enum Schedule {
    /// `* * * * * *`
    EverySecond,
    /// `*/N * * * * *` (N divides 60): every job due at the same instant
    /// once every N seconds, the burst scenario.
    EveryNSeconds { n: u32 },
    /// `M * * * *`
    Hourly { minute: u32 },
}

impl Schedule {
    pub fn cron(self) -> String {
        match self {
            Schedule::EverySecond => "* * * * * *".to_string(),
            Schedule::EveryNSeconds { n } => format!("*/{n} * * * * *"),
            Schedule::Hourly { minute } => format!("{minute} * * * *"),
        }
    }

    /// The ticks in `[from, to)`, ms of Redis time (UTC: the jobs use UTC).
    /// The period of the ticks, ms (the burst scenario's windows are
    /// aligned on it).
    pub fn period_ms(self) -> i64 {
        match self {
            Schedule::EverySecond => 1_000,
            Schedule::EveryNSeconds { n } => i64::from(n) * 1_000,
            Schedule::Hourly { .. } => 3_600_000,
        }
    }

    pub fn ticks(self, from: i64, to: i64) -> Vec<i64> {
        let offset = match self {
            Schedule::EverySecond | Schedule::EveryNSeconds { .. } => 0,
            Schedule::Hourly { minute } => i64::from(minute) * 60_000,
        };
        let period = self.period_ms();
        let first = ceil_to(from - offset, period) + offset;
        (first..to).step_by(period as usize).collect()
    }
}

pub fn ceil_to(x: i64, m: i64) -> i64 {
    let down = x.div_euclid(m) * m;
    if down == x { x } else { down + m }
}

#[derive(Debug, Clone, Copy)]
pub struct Percentiles {
    pub p50: i64,
    pub p99: i64,
    pub max: i64,
    pub count: usize,
}

impl Percentiles {
    pub fn of(mut values: Vec<i64>) -> Option<Percentiles> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let rank = |p: f64| {
            let n = values.len();
            let index = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
            values[index]
        };
        Some(Percentiles {
            p50: rank(0.50),
            p99: rank(0.99),
            max: *values.last().expect("not empty"),
            count: values.len(),
        })
    }

    pub fn json(p: Option<Percentiles>) -> Value {
        p.map_or(
            Value::Null,
            |p| json!({"p50_ms": p.p50, "p99_ms": p.p99, "max_ms": p.max, "count": p.count}),
        )
    }

    pub fn show(p: Option<Percentiles>) -> String {
        p.map_or("-".to_string(), |p| {
            format!("{} / {} / {} ms", p.p50, p.p99, p.max)
        })
    }
}

/// What the outcome streams say about the ticks in `[t0, t1)`.
#[derive(Default)]
pub struct TickStats {
    pub due: u64,
    pub runs_started: u64,
    pub duplicates: u64,
    pub missed: u64,
    /// Outcomes in the window with another status than `ok`.
    pub other: BTreeMap<String, u64>,
    pub lateness_ms: Vec<i64>,
    /// Tick to the end of the run (`finished_ms` − tick) of each `ok`
    /// outcome: for processes, after the process exited.
    pub finished_ms: Vec<i64>,
}

impl TickStats {
    pub fn new(outcomes: &[Vec<Rec>], schedule: Schedule, t0: i64, t1: i64) -> TickStats {
        let due = schedule.ticks(t0, t1);
        let mut stats = TickStats {
            due: (due.len() * outcomes.len()) as u64,
            ..TickStats::default()
        };
        for recs in outcomes {
            let mut ok: HashMap<i64, u32> = HashMap::new();
            let mut ran: HashSet<i64> = HashSet::new();
            for rec in recs.iter().filter(|r| r.tick >= t0 && r.tick < t1) {
                if rec.status == "ok" {
                    *ok.entry(rec.tick).or_default() += 1;
                    stats.runs_started += 1;
                    if let Some(started) = rec.started_ms {
                        stats.lateness_ms.push(started - rec.tick);
                    }
                    if let Some(finished) = rec.finished_ms {
                        stats.finished_ms.push(finished - rec.tick);
                    }
                } else {
                    *stats.other.entry(rec.status.clone()).or_default() += 1;
                    if rec.status != "missed" {
                        ran.insert(rec.tick);
                    }
                }
            }
            stats.duplicates += ok.values().filter(|&&n| n > 1).count() as u64;
            stats.missed += due
                .iter()
                .filter(|t| !ok.contains_key(t) && !ran.contains(t))
                .count() as u64;
        }
        stats
    }

    pub fn other_total(&self) -> u64 {
        self.other.values().sum()
    }

    pub fn other_text(&self) -> String {
        if self.other.is_empty() {
            "none".to_string()
        } else {
            self.other
                .iter()
                .map(|(status, n)| format!("{status} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}
