//! What a job does when its alarm rings: the value the timer keeps for
//! each job, which `tick` acts on.

use std::time::Duration;

use super::timer::Alarm;

/// What a job does when its alarm rings (`timer`).
pub(super) enum Step {
    /// Catch up on the ticks that passed (at start, after a stall or a
    /// late claim): in turn with other jobs.
    CatchUp,
    /// Claim this tick: the alarm rang `lead` ahead of it.
    Tick { tick_ms: i64, lead: Duration },
    /// This replica's rendezvous turn for the tick came (it is not the
    /// preferred one): claim it unless a claim was announced.
    Turn { tick_ms: i64 },
}

/// A job's alarm: when, and which [`Step`] it takes then.
pub(super) type JobAlarm = Alarm<Step>;
