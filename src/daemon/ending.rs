//! How the claim of a tick ended ([`ClaimEnd`]): the value `claim.rs`
//! returns and `tick.rs` acts on.

use super::runs::RunStart;

/// How the claim of a tick ended.
pub(super) enum ClaimEnd {
    /// Ours: the run may start. `previous` is the high-water mark this claim
    /// moved past (-1: none); `expired` says the claim saw leases of this
    /// job that lapsed (a sweep records them).
    Won {
        start: RunStart,
        previous: i64,
        expired: bool,
    },
    /// Ours, but fewer Redis replicas than `min_replicas_ack` acknowledged
    /// the claim: it is recorded, not run.
    NotDurable {
        start: RunStart,
        acked: u32,
    },
    /// Ours, but the lease lapsed before Redis answered: not run; a sweep
    /// records it abandoned.
    Lapsed,
    /// Another replica has it.
    Taken,
    /// Not asked: this replica is drained (`cronlease drain`, shutdown),
    /// the others claim.
    Drained,
    /// Redis holds a state for the job that cronlease did not write: not
    /// claimed, and logged; the next tick asks again.
    Refused,
    /// The job is paused: the tick is skipped.
    Paused {
        previous: i64,
    },
    /// A run is in flight and the job's overlap policy skips the tick.
    Busy {
        previous: i64,
    },
    /// The job has started its `max_runs` runs of the schedule: it has no
    /// more ticks.
    Ended,
    /// The job's calendars leave the tick out: recorded `excluded`.
    Excluded {
        previous: i64,
    },
    /// No replica had room for the tick (`[daemon] max_runs`), or the
    /// job's group no slot, within its grace: recorded `skipped_capacity`.
    SkippedCapacity {
        previous: i64,
    },
    /// The tick was not claimed in time (Redis was unreachable, or answered
    /// only after the deadline): the misfire policy decides.
    Late,
    Cancelled,
}

impl ClaimEnd {
    /// The claim's answer as its span records it (`result`).
    pub(super) fn label(&self) -> &'static str {
        match self {
            ClaimEnd::Won { .. } => "claimed",
            ClaimEnd::NotDurable { .. } => "not_durable",
            ClaimEnd::Lapsed => "lapsed",
            ClaimEnd::Taken => "taken",
            ClaimEnd::Drained => "drained",
            ClaimEnd::Refused => "refused",
            ClaimEnd::Paused { .. } => "paused",
            ClaimEnd::Busy { .. } => "busy",
            ClaimEnd::Ended => "ended",
            ClaimEnd::Excluded { .. } => "excluded",
            ClaimEnd::SkippedCapacity { .. } => "skipped_capacity",
            ClaimEnd::Late => "late",
            ClaimEnd::Cancelled => "cancelled",
        }
    }
}
