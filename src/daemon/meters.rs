//! The per-job metrics a tick and a run touch, made once per job and
//! series. A run increments handles instead of building a label set (an
//! allocation per label) and looking it up in the recorder's registry
//! several times per run, which costs a busy replica a visible share of
//! its CPU. Series are made on first use, so `/metrics` shows only what
//! happened.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use metrics::{Counter, Gauge, Histogram, SharedString};

use super::table::JobMap;
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
    /// Recorded `excluded`: the job's calendars leave the tick out.
    Excluded,
    NotDurable,
    Claimed,
    /// Not claimed: the job has started its `max_runs` runs.
    Ended,
    /// Not asked: this replica had its `[daemon] max_runs` in flight.
    Capacity,
    /// Refused: the job's concurrency group had no slot free.
    GroupFull,
    /// Recorded `skipped_capacity`: no replica had room (or the group no
    /// slot) within the tick's grace.
    SkippedCapacity,
}

impl ClaimCount {
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
            ClaimCount::Excluded => "excluded",
            ClaimCount::NotDurable => "not_durable",
            ClaimCount::Claimed => "claimed",
            ClaimCount::Ended => "ended",
            ClaimCount::Capacity => "capacity",
            ClaimCount::GroupFull => "group_full",
            ClaimCount::SkippedCapacity => "skipped_capacity",
        }
    }
}

/// Every job's handles, by job name. Never held across an `.await`.
#[derive(Default)]
pub(super) struct Meters {
    jobs: Mutex<JobMap<Arc<JobMeters>, Arc<str>>>,
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
        self.job(job).count_claim(result);
    }
}

/// One job's series. Those a run touches every tick (the usual claim
/// results, `ok`, the histograms, the last success) are kept as handles,
/// made on first use; the others (errors, skew, pauses, failures, missed
/// ticks) are looked up in the recorder each time they happen, which is
/// rare, so that a job's handles stay small (~0.3 KB; a handle for every
/// series would be more than twice that, per job).
pub(super) struct JobMeters {
    /// The `job` label of each series: one copy of the name, shared.
    job: SharedString,
    announced: OnceLock<Counter>,
    claimed: OnceLock<Counter>,
    taken: OnceLock<Counter>,
    ok: OnceLock<Counter>,
    lateness: OnceLock<Histogram>,
    duration: OnceLock<Histogram>,
    cpu: OnceLock<Histogram>,
    last_success: OnceLock<Gauge>,
}

impl JobMeters {
    fn new(job: Arc<str>) -> JobMeters {
        JobMeters {
            job: SharedString::from(job),
            announced: OnceLock::new(),
            claimed: OnceLock::new(),
            taken: OnceLock::new(),
            ok: OnceLock::new(),
            lateness: OnceLock::new(),
            duration: OnceLock::new(),
            cpu: OnceLock::new(),
            last_success: OnceLock::new(),
        }
    }

    /// Counts one claim attempt: `cronlease_claims_total{job, result}`.
    pub(super) fn count_claim(&self, result: ClaimCount) {
        let kept = match result {
            ClaimCount::Announced => &self.announced,
            ClaimCount::Claimed => &self.claimed,
            ClaimCount::Taken => &self.taken,
            _ => {
                return self.claims(result).increment(1);
            }
        };
        kept.get_or_init(|| self.claims(result)).increment(1);
    }

    fn claims(&self, result: ClaimCount) -> Counter {
        metrics::counter!(telemetry::CLAIMS, "job" => self.job.clone(), "result" => result.as_str())
    }

    /// Counts one finished run: `cronlease_runs_total{job, status}`.
    pub(super) fn count_run(&self, status: Status) {
        let runs = || metrics::counter!(telemetry::RUNS, "job" => self.job.clone(), "status" => status.as_str());
        match status {
            Status::Ok => self.ok.get_or_init(runs).increment(1),
            _ => runs().increment(1),
        }
    }

    /// Tick-to-start lateness.
    pub(super) fn lateness(&self) -> &Histogram {
        self.lateness.get_or_init(
            || metrics::histogram!(telemetry::TICK_LATENESS, "job" => self.job.clone()),
        )
    }

    /// A run's duration.
    pub(super) fn duration(&self) -> &Histogram {
        self.duration
            .get_or_init(|| metrics::histogram!(telemetry::RUN_DURATION, "job" => self.job.clone()))
    }

    /// A run's CPU time.
    pub(super) fn cpu(&self) -> &Histogram {
        self.cpu
            .get_or_init(|| metrics::histogram!(telemetry::RUN_CPU, "job" => self.job.clone()))
    }

    /// When the job last succeeded.
    pub(super) fn last_success(&self) -> &Gauge {
        self.last_success
            .get_or_init(|| metrics::gauge!(telemetry::LAST_SUCCESS, "job" => self.job.clone()))
    }

    /// Counts `n` ticks nobody claimed.
    pub(super) fn count_missed(&self, n: u64) {
        metrics::counter!(telemetry::MISSED_TICKS, "job" => self.job.clone()).increment(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "metrics-server")]
    #[test]
    fn kept_and_looked_up_series_count_alike() {
        let exposition = crate::telemetry::exposition::Exposition::new(&[]);
        metrics::with_local_recorder(&exposition, || {
            let meters = Meters::default();
            for _ in 0..2 {
                meters.count_claim("a", ClaimCount::Claimed);
                meters.count_claim("a", ClaimCount::Busy);
                meters.job("a").count_run(Status::Ok);
                meters.job("a").count_run(Status::Failed);
            }
            meters.job("a").count_missed(3);
        });
        let page = exposition.page(usize::MAX).0;
        for line in [
            "cronlease_claims_total{job=\"a\",result=\"claimed\"} 2",
            "cronlease_claims_total{job=\"a\",result=\"busy\"} 2",
            "cronlease_runs_total{job=\"a\",status=\"ok\"} 2",
            "cronlease_runs_total{job=\"a\",status=\"failed\"} 2",
            "cronlease_missed_ticks_total{job=\"a\"} 3",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
    }

    #[test]
    fn one_job_gets_one_set_of_handles() {
        let meters = Meters::default();
        assert!(Arc::ptr_eq(&meters.job("a"), &meters.job("a")));
        assert!(!Arc::ptr_eq(&meters.job("a"), &meters.job("b")));
    }
}
