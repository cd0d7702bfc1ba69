//! A job's notification rules as the scripts take them ([`Notices`]), and
//! the replicas' own (`replica_dead`).

use crate::config::{Config, EventKind, Job};
use crate::store::{Keys, NoticeRules, Notices};

/// `job`'s rules for the scripts that record its outcomes and claims; none
/// (no allocation) for a job without channels.
pub(super) fn job_notices(keys: &Keys, job: &Job) -> Notices {
    let rules = &job.notify;
    if rules.channels.is_empty() {
        return Notices::none();
    }
    let events: Vec<&str> = rules
        .on
        .iter()
        .filter(|kind| *kind != EventKind::ReplicaDead)
        .map(EventKind::as_str)
        .collect();
    Notices::new(
        keys,
        &NoticeRules {
            job: &job.name,
            events: &events,
            channels: &rules.channels,
            repeat_every: rules.repeat_every,
            late_after: rules.late_after,
        },
    )
}

/// The rules of the replicas' own events (`[daemon]`'s, for
/// `replica_dead`); none when it is not told.
pub(super) fn replica_notices(keys: &Keys, config: &Config) -> Notices {
    let rules = &config.daemon.notify;
    Notices::new(
        keys,
        &NoticeRules {
            job: "",
            events: &[EventKind::ReplicaDead.as_str()],
            channels: rules.replica_dead_channels(),
            repeat_every: rules.repeat_every,
            late_after: None,
        },
    )
}
