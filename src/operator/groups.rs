//! The concurrency groups `status` shows: each group the job table's jobs
//! name, with its slots in use and the ticks waiting for one.

use std::collections::BTreeMap;

use serde::Serialize;

use super::OperatorError;
use crate::config::Job;
use crate::store::Store;

/// A concurrency group as `status` shows it: its slots in use (runs of
/// its jobs in flight across the cluster) and the ticks waiting for one.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupStatus {
    pub name: String,
    pub max: u32,
    pub running: u64,
    pub waiting: u64,
    /// The group's jobs in the table.
    pub jobs: Vec<String>,
}

impl GroupStatus {
    /// `db: 2 of 2 running, 3 waiting`.
    pub fn summary(&self) -> String {
        let mut text = format!("{}: {} of {} running", self.name, self.running, self.max);
        if self.waiting > 0 {
            text.push_str(&format!(", {} waiting", self.waiting));
        }
        text
    }
}

/// The groups `jobs` name, each with its jobs, use not read yet.
pub(super) fn groups_of<'a>(jobs: impl Iterator<Item = &'a Job>) -> BTreeMap<String, GroupStatus> {
    let mut groups: BTreeMap<String, GroupStatus> = BTreeMap::new();
    for job in jobs {
        if let Some(group) = &job.group {
            groups
                .entry(group.name.clone())
                .or_insert_with(|| GroupStatus {
                    name: group.name.clone(),
                    max: group.max,
                    running: 0,
                    waiting: 0,
                    jobs: Vec::new(),
                })
                .jobs
                .push(job.name.clone());
        }
    }
    groups
}

/// `groups` with their use at Redis time `now_ms`, in name order.
pub(super) async fn read_use(
    store: &Store,
    groups: BTreeMap<String, GroupStatus>,
    now_ms: i64,
) -> Result<Vec<GroupStatus>, OperatorError> {
    let mut read = Vec::with_capacity(groups.len());
    for mut group in groups.into_values() {
        (group.running, group.waiting) = store.group_use(&group.name, now_ms).await?;
        read.push(group);
    }
    Ok(read)
}
