//! The per-job metrics a tick and a run touch, made once per job and
//! series. A run then increments handles, where it used to build a label
//! set (an allocation per label) and look it up in the recorder's registry
//! several times per run: about a tenth of a busy replica's CPU (README
//! "Benchmark"). Series are still made on first use, so `/metrics` shows
//! only what happened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use metrics::{Counter, Gauge, Histogram, SharedString};

use crate::outcome::Status;
use crate::telemetry;

/// What a claim attempt came to: the `result` label of
/// `cronlease_claims_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClaimCount {
    /// Not claimed: another replica announced its claim first.
    Announced,
    Error,
    Early,
    Wait,
    Expired,
    Corrupt,
    Lapsed,
    Taken,
    Paused,
    Busy,
    NotDurable,
    Claimed,
}

impl ClaimCount {
    const COUNT: usize = 12;

    fn as_str(self) -> &'static str {
        match self {
            ClaimCount::Announced => "announced",
            ClaimCount::Error => "error",
            ClaimCount::Early => "early",
            ClaimCount::Wait => "wait",
            ClaimCount::Expired => "expired",
            ClaimCount::Corrupt => "corrupt",
            ClaimCount::Lapsed => "lapsed",
            ClaimCount::Taken => "taken",
            ClaimCount::Paused => "paused",
            ClaimCount::Busy => "busy",
            ClaimCount::NotDurable => "not_durable",
            ClaimCount::Claimed => "claimed",
        }
    }
}

/// Every job's handles, by job name. Never held across an `.await`.
#[derive(Default)]
pub(super) struct Meters {
    jobs: Mutex<HashMap<Arc<str>, Arc<JobMeters>>>,
}

impl Meters {
    /// The handles of `job`, made on first use.
    pub(super) fn job(&self, job: &str) -> Arc<JobMeters> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(meters) = jobs.get(job) {
            return meters.clone();
        }
        let name: Arc<str> = Arc::from(job);
        let meters = Arc::new(JobMeters::new(name.clone()));
        jobs.insert(name, meters.clone());
        meters
    }

    /// Counts one claim attempt of `job` that came to `result`.
    pub(super) fn count_claim(&self, job: &str, result: ClaimCount) {
        self.job(job).claim(result).increment(1);
    }
}

/// One job's series, each made when first used.
pub(super) struct JobMeters {
    /// The `job` label of each series: one copy of the name, shared.
    job: SharedString,
    claims: [OnceLock<Counter>; ClaimCount::COUNT],
    runs: [OnceLock<Counter>; Status::ALL.len()],
    lateness: OnceLock<Histogram>,
    duration: OnceLock<Histogram>,
    cpu: OnceLock<Histogram>,
    last_success: OnceLock<Gauge>,
    missed: OnceLock<Counter>,
}

impl JobMeters {
    fn new(job: Arc<str>) -> JobMeters {
        JobMeters {
            job: SharedString::from(job),
            claims: std::array::from_fn(|_| OnceLock::new()),
            runs: std::array::from_fn(|_| OnceLock::new()),
            lateness: OnceLock::new(),
            duration: OnceLock::new(),
            cpu: OnceLock::new(),
            last_success: OnceLock::new(),
            missed: OnceLock::new(),
        }
    }

    /// `cronlease_claims_total{job, result}`.
    pub(super) fn claim(&self, result: ClaimCount) -> &Counter {
        self.claims[result as usize].get_or_init(|| {
            metrics::counter!(telemetry::CLAIMS, "job" => self.job.clone(), "result" => result.as_str())
        })
    }

    /// `cronlease_runs_total{job, status}`.
    pub(super) fn run(&self, status: Status) -> &Counter {
        let index = Status::ALL.iter().position(|s| *s == status).unwrap_or(0);
        self.runs[index].get_or_init(|| {
            metrics::counter!(telemetry::RUNS, "job" => self.job.clone(), "status" => status.as_str())
        })
    }

    /// Tick-to-start lateness.
    pub(super) fn lateness(&self) -> &Histogram {
        self.lateness.get_or_init(
            || metrics::histogram!(telemetry::TICK_LATENESS, "job" => self.job.clone()),
        )
    }

    /// A run's duration.
    pub(super) fn duration(&self) -> &Histogram {
        self.duration.get_or_init(
            || metrics::histogram!(telemetry::RUN_DURATION, "job" => self.job.clone()),
        )
    }

    /// A run's CPU time.
    pub(super) fn cpu(&self) -> &Histogram {
        self.cpu
            .get_or_init(|| metrics::histogram!(telemetry::RUN_CPU, "job" => self.job.clone()))
    }

    /// When the job last succeeded.
    pub(super) fn last_success(&self) -> &Gauge {
        self.last_success.get_or_init(
            || metrics::gauge!(telemetry::LAST_SUCCESS, "job" => self.job.clone()),
        )
    }

    /// Ticks nobody claimed.
    pub(super) fn missed(&self) -> &Counter {
        self.missed.get_or_init(
            || metrics::counter!(telemetry::MISSED_TICKS, "job" => self.job.clone()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_count_indexes_its_own_slot() {
        let all = [
            ClaimCount::Announced,
            ClaimCount::Error,
            ClaimCount::Early,
            ClaimCount::Wait,
            ClaimCount::Expired,
            ClaimCount::Corrupt,
            ClaimCount::Lapsed,
            ClaimCount::Taken,
            ClaimCount::Paused,
            ClaimCount::Busy,
            ClaimCount::NotDurable,
            ClaimCount::Claimed,
        ];
        assert_eq!(all.len(), ClaimCount::COUNT);
        for (i, result) in all.iter().enumerate() {
            assert_eq!(*result as usize, i, "{}", result.as_str());
        }
    }

    #[test]
    fn one_job_gets_one_set_of_handles() {
        let meters = Meters::default();
        assert!(Arc::ptr_eq(&meters.job("a"), &meters.job("a")));
        assert!(!Arc::ptr_eq(&meters.job("a"), &meters.job("b")));
    }
}
