//! The explanation of a tick as one value: its verdict, the run, the
//! schedule around it, the reasons with their evidence and the replicas
//! seen. `explain --json` prints it as it is; the text and the dashboard
//! render it.

use chrono::DateTime;
use serde::Serialize;
use serde_json::Value;

use crate::outcome::{Status, Trigger, Upstream};

/// What happened to a tick, in one word (`verdict` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A replica claimed it and the run ended: `run.status` says how.
    Ran,
    /// A replica claimed it and the run is in flight.
    Running,
    /// Claimed while a run was in flight, and skipped (`overlap = "skip"`).
    Skipped,
    /// Nobody claimed it in time, and it was recorded as missed.
    Missed,
    /// The job's calendars leave it out (`exclude`, `only`): recorded
    /// `excluded`, not run.
    Excluded,
    /// It did not run, and no outcome says so: the reasons do.
    NotRun,
    /// The instant is not one the schedule fires at.
    NotATick,
    /// Its time has not come (by Redis time).
    NotYetDue,
}

/// How the tick was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TickChoice {
    /// `--tick` or `?tick=`.
    Given,
    /// The latest tick of the schedule that is due by Redis time.
    LatestDue,
    /// The schedule has had no tick yet: its first.
    First,
}

/// One reason, with its evidence (`reasons[]` in the JSON).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct Reason {
    /// `not_a_tick`, `schedule_ended`, `not_yet_due`, `paused`, `misfire`,
    /// `overlap`, `no_live_replica`, `redis_unreachable`, `config_drift`,
    /// `not_durable`, `not_claimed_yet`, `no_record`, `calendar`,
    /// `outside_window`, `window_ended`, `max_runs_reached`, `capacity` or
    /// `group_full`.
    pub kind: &'static str,
    /// The reason in a sentence, evidence included.
    pub text: String,
    /// The evidence: an object whose keys depend on the kind (the guide
    /// lists them).
    pub evidence: Value,
}

/// The run of the tick (`run` in the JSON).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct RunFacts {
    pub run_id: String,
    pub replica: String,
    pub host: String,
    pub fence: u64,
    pub trigger: Trigger,
    /// When it was claimed and started (Redis ms).
    pub started_ms: i64,
    /// Start minus tick.
    pub late_ms: i64,
    /// How it ended; `None` while it runs.
    pub status: Option<Status>,
    pub finished_ms: Option<i64>,
    pub duration_ms: Option<i64>,
    pub attempts: Option<u32>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// While it runs: how long its lease holds without a renewal.
    pub lease_left_ms: Option<i64>,
}

/// The schedule around the tick (`schedule` in the JSON).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct ScheduleFacts {
    pub expression: String,
    pub timezone: String,
    /// The tick in the job's zone.
    pub tick_local: String,
    pub previous_tick: Option<String>,
    pub next_tick: Option<String>,
    /// A daylight-saving change within a day of the tick.
    pub dst: Option<DstFacts>,
}

/// A replica as the tick's explanation sees it (`replicas[]`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct ReplicaSeen {
    pub id: String,
    pub host: String,
    pub alive: bool,
    pub started_ms: i64,
    pub last_seen_ms: i64,
    /// Its process had started by the tick and was heard from after it.
    pub up_at_tick: bool,
}

/// What became of one tick of one job, and why (`explain --json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct Explanation {
    pub job: String,
    pub tick: String,
    pub tick_ms: i64,
    pub tick_choice: TickChoice,
    /// Redis time when the explanation was made.
    pub now_ms: i64,
    pub verdict: Verdict,
    /// The verdict in a sentence.
    pub summary: String,
    /// `None` without the job table.
    pub schedule: Option<ScheduleFacts>,
    pub run: Option<RunFacts>,
    /// The job's place in chains, and what its run followed or started;
    /// `None` for a job in none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainFacts>,
    pub reasons: Vec<Reason>,
    pub replicas: Vec<ReplicaSeen>,
}

/// Chains around the tick's run (`chain` in the JSON).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct ChainFacts {
    /// The jobs whose outcomes start this one (`after`).
    pub after: Vec<String>,
    /// The jobs this one's outcomes start.
    pub followers: Vec<String>,
    /// The run is a follower's: the upstream runs it followed.
    pub caused_by: Option<Upstream>,
    /// What the run's outcome started: each follower's record that names
    /// it (a run, or a run not made and why).
    pub caused: Vec<CausedRun>,
}

/// A follower's record caused by the tick's run.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct CausedRun {
    pub job: String,
    pub run_id: String,
    pub tick: String,
    pub status: Status,
}

pub(super) fn reason(kind: &'static str, text: String, evidence: Value) -> Reason {
    Reason {
        kind,
        text,
        evidence,
    }
}

/// A daylight-saving change near the tick and what the job's schedule did
/// with it (the `dst` object of `explain --json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct DstFacts {
    /// `gap` (the clock jumps forward) or `fold` (it goes back).
    pub kind: &'static str,
    /// The instant of the change, RFC 3339 UTC.
    pub transition: String,
    /// The local times skipped (gap) or repeated (fold): `02:00–03:00`.
    pub local_times: String,
    /// `fixed_time` or `wall_clock` (cronie's rule, see the guide's
    /// "Schedules").
    pub timing: &'static str,
    /// The setting that decided: `dst_gap = run_after`, `dst_repeat =
    /// first`, or `wall clock` for a job the rules do not apply to.
    pub rule: String,
    /// What the rule does, in a sentence.
    pub effect: String,
}

/// An instant as RFC 3339 UTC, whole seconds unless it has a fraction.
pub(super) fn text_of(ms: i64) -> String {
    let t = DateTime::from_timestamp_millis(ms).unwrap_or_default();
    let form = if ms % 1000 == 0 {
        chrono::SecondsFormat::Secs
    } else {
        chrono::SecondsFormat::Millis
    };
    t.to_rfc3339_opts(form, true)
}

/// A duration for a sentence: `850 ms`, `4.2 s`, `3 min 4 s`, `2 h 5
/// min`, `3 d 4 h`.
pub(crate) fn span(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
        3_600_000..86_400_000 => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
        _ => format!("{} d {} h", ms / 86_400_000, ms % 86_400_000 / 3_600_000),
    }
}
