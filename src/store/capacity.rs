//! What capacity and concurrency groups ask of Redis besides the claim:
//! a tick no replica had room for recorded `skipped_capacity`
//! (`skip_capacity.lua`), and a group's use for `status`.

use super::claim::GroupClaim;
use super::{Claimant, Reply, Store, StoreError};
use crate::outcome::Trigger;
use redis::Value;

/// Why a tick is recorded `skipped_capacity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityCause {
    /// Every replica that could claim it had its `[daemon] max_runs` in
    /// flight.
    Replicas,
    /// The job's concurrency group had no slot free.
    Group,
}

impl CapacityCause {
    /// The record's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityCause::Replicas => "capacity",
            CapacityCause::Group => "group",
        }
    }
}

/// A tick whose grace passed without room for it, to be recorded
/// `skipped_capacity`.
#[derive(Debug, Clone)]
pub struct CapacitySkip<'a> {
    pub job: &'a str,
    pub tick_ms: i64,
    pub run_id: &'a str,
    pub claimant: Claimant<'a>,
    pub trigger: Trigger,
    pub cause: CapacityCause,
    /// The job's group, if it has one (its waiting tick is dropped).
    pub group: Option<GroupClaim<'a>>,
}

/// What became of a tick recorded `skipped_capacity`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapacitySkipReply {
    /// Recorded; `previous` is the high-water mark it moved past (-1:
    /// none).
    Skipped { previous: i64, fence: u64 },
    /// Claimed (or recorded) by another replica meanwhile.
    Taken { last_tick: i64, fence: u64 },
    /// The job's state hash holds a `field` that is not a number.
    Corrupt { field: String, value: String },
}

impl Store {
    /// Records a tick no replica had room for as `skipped_capacity`
    /// (`skip_capacity.lua`), once: a tick claimed or recorded meanwhile
    /// answers `Taken`.
    pub async fn skip_for_capacity(
        &self,
        request: &CapacitySkip<'_>,
    ) -> Result<CapacitySkipReply, StoreError> {
        let mut invocation = self.scripts.skip_capacity.prepare_invoke();
        invocation
            .key(self.keys.state(request.job))
            .key(self.keys.runs(request.job));
        if let Some(group) = &request.group {
            invocation.key(self.keys.group_waiting(group.name));
        }
        invocation
            .arg(request.tick_ms)
            .arg(request.run_id)
            .arg(request.claimant.replica)
            .arg(request.claimant.host)
            .arg(request.claimant.history)
            .arg(request.trigger.as_str())
            .arg(request.cause.as_str())
            .arg(request.group.map_or("", |g| g.name))
            .arg(self.keys.claims_channel())
            .arg(request.job)
            .arg(
                request
                    .group
                    .map_or(String::new(), |g| g.until_ms.to_string()),
            );
        let answers: Vec<Value> = self.invoke_on_all("skip_capacity", &invocation).await?;
        let mut parsed = Vec::new();
        for answer in answers {
            parsed.push(parse_capacity_skip(answer)?);
        }
        // With a quorum, any master that recorded it says it was recorded.
        let skipped = parsed
            .iter()
            .position(|reply| matches!(reply, CapacitySkipReply::Skipped { .. }));
        let first = skipped.unwrap_or(0);
        parsed
            .into_iter()
            .nth(first)
            .ok_or(StoreError::QuorumUnsupported {
                what: "skip_capacity",
            })
    }
}

fn parse_capacity_skip(reply: Value) -> Result<CapacitySkipReply, StoreError> {
    let r = Reply::new(reply, "skip_capacity")?;
    Ok(match r.string(0)?.as_str() {
        "skipped" => CapacitySkipReply::Skipped {
            previous: r.int_or(1, -1),
            fence: r.fence_or_zero(2)?,
        },
        "taken" => CapacitySkipReply::Taken {
            last_tick: r.int(1)?,
            fence: r.fence_or_zero(2)?,
        },
        "corrupt" => CapacitySkipReply::Corrupt {
            field: r.string(1)?,
            value: r.string_or_empty(2),
        },
        _ => return Err(r.bad()),
    })
}

impl Store {
    /// Concurrency group `group`'s use at Redis time `now_ms`: slots held
    /// by a live lease, and ticks waiting for one (live waiters).
    pub async fn group_use(&self, group: &str, now_ms: i64) -> Result<(u64, u64), StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("ZCOUNT")
            .arg(self.keys.group_slots(group))
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .cmd("ZRANGE")
            .arg(self.keys.group_waiting(group))
            .arg(0)
            .arg(-1);
        let pipe = &pipe;
        let (running, waiting): (u64, Vec<String>) = self
            .read(|mut conn| async move { pipe.query_async(&mut conn).await })
            .await?;
        // A waiter lives until the instant its member ends with.
        let live = waiting
            .iter()
            .filter(|w| {
                w.rsplit(' ')
                    .next()
                    .and_then(|until| until.parse::<i64>().ok())
                    .is_some_and(|until| until >= now_ms)
            })
            .count();
        Ok((running, u64::try_from(live).unwrap_or(u64::MAX)))
    }
}
