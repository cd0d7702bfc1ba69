//! The job table the replica's tasks share, and the map by job name they
//! look into.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::config::Job;

/// The jobs by name, shared with the tasks that look jobs up.
pub(super) type JobTable = BTreeMap<String, Arc<Job>>;

/// A map by job name that every run looks into a few times: hashed with
/// rapidhash rather than SipHash (job names come from the operator's
/// config and the replicas' own announcements, not from strangers).
pub(super) type JobMap<V, K = String> = HashMap<K, V, rapidhash::fast::RandomState>;

/// `jobs` as the table the tasks share.
pub(super) fn job_table(jobs: BTreeMap<String, Job>) -> Arc<JobTable> {
    Arc::new(
        jobs.into_iter()
            .map(|(name, job)| (name, Arc::new(job)))
            .collect(),
    )
}
