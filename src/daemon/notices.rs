//! A job's notification rules as the scripts take them ([`Notices`]), and
//! the replicas' own (`replica_dead`).

use std::collections::BTreeMap;

use crate::config::{Config, EventKind, Job};
use crate::store::{Followers, Keys, NoticeRules, Notices};

use super::table::JobTable;

/// Whose events an events stream holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Subject {
    Job(String),
    Replicas,
}

impl Subject {
    pub(super) fn as_str(&self) -> &str {
        match self {
            Subject::Job(job) => job,
            Subject::Replicas => "replicas",
        }
    }
}

/// Every events stream of `table` and `config`, by key: each job's with
/// channels, and the replicas' when `replica_dead` is told.
pub(super) fn event_streams(
    keys: &Keys,
    table: &JobTable,
    config: &Config,
) -> BTreeMap<String, Subject> {
    let mut streams: BTreeMap<String, Subject> = table
        .values()
        .filter(|job| !job.notify.channels.is_empty())
        .map(|job| (keys.events(&job.name), Subject::Job(job.name.clone())))
        .collect();
    if !replica_notices(keys, config).is_none() {
        streams.insert(keys.replica_events(), Subject::Replicas);
    }
    streams
}

/// The subject of `stream`, a key a wake-up named, when it is one of
/// `table`'s and `config`'s (anyone may publish on the channel).
pub(super) fn subject_of(
    keys: &Keys,
    table: &JobTable,
    config: &Config,
    stream: &str,
) -> Option<Subject> {
    if stream == keys.replica_events() {
        return (!replica_notices(keys, config).is_none()).then_some(Subject::Replicas);
    }
    let job = table.get(keys.job_of_events(stream)?)?;
    (!job.notify.channels.is_empty()).then(|| Subject::Job(job.name.clone()))
}

/// `job`'s rules and followers for the scripts that record its outcomes
/// and claims; none (no allocation) for a job without channels or
/// followers.
pub(super) fn job_notices(keys: &Keys, job: &Job) -> Notices {
    let notices = job_rules(keys, job);
    if job.followers.is_empty() {
        return notices;
    }
    let followers = job
        .followers
        .iter()
        .map(|f| (f.job.as_str(), f.on.as_str()));
    notices.with_followers(Followers::new(keys, &job.name, followers))
}

/// `job`'s notification rules; none for a job without channels.
fn job_rules(keys: &Keys, job: &Job) -> Notices {
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
