//! Every reader of a Redis reply, callable on a reply built by hand (see
//! the module's declaration in `store`).

use super::{
    ClaimReply, FinishReply, LockReply, ManualReply, StoreError, TakeReply, TriggerRequest,
    backfill, claim, heartbeat, lock, protocol, run, triggers,
};
use crate::LockHolder;

use redis::Value;

pub use super::run::SweepReply;

/// The claim script's reply.
pub fn claim(reply: Value) -> Result<ClaimReply, StoreError> {
    claim::parse_claim(reply)
}

/// The finish script's reply.
pub fn finish(reply: Value) -> Result<FinishReply, StoreError> {
    run::parse_finish(reply)
}

/// The sweep script's reply.
pub fn sweep(reply: Value) -> Result<SweepReply, StoreError> {
    run::parse_sweep(reply)
}

/// The renew pipeline's replies, one per lease.
pub fn renewals(replies: &[Value]) -> Vec<super::Renewed> {
    run::parse_renewals(replies)
}

/// The manual-run script's reply.
pub fn manual(reply: Value) -> Result<ManualReply, StoreError> {
    triggers::parse_manual(reply)
}

/// The backfill plan script's reply.
pub fn backfill_plan(reply: Value) -> Result<super::backfill::BackfillPlan, StoreError> {
    backfill::parse_plan("fuzz", reply)
}

/// The backfill take script's reply.
pub fn backfill_take(reply: Value) -> Result<TakeReply, StoreError> {
    backfill::parse_take(reply)
}

/// One entry of the triggers stream.
pub fn trigger_entry(entry: Value) -> Option<TriggerRequest> {
    triggers::parse_trigger_entry(entry)
}

/// An `XREADGROUP` reply on the triggers stream.
pub fn trigger_read(reply: Value) -> Vec<TriggerRequest> {
    triggers::parse_read_group(reply)
}

/// An `XAUTOCLAIM` reply on the triggers stream.
pub fn trigger_auto_claim(reply: Value) -> Result<Vec<TriggerRequest>, StoreError> {
    triggers::parse_auto_claim(reply)
}

/// The lock script's reply.
pub fn lock(reply: Value) -> Result<LockReply, StoreError> {
    lock::parse_lock(reply)
}

/// The lock holder's transaction reply (`GET` of the lease, which holds
/// the holder's record, its `PTTL`, `HGET` of the state's fence),
/// converted as `Store::lock_holder` converts it.
pub fn lock_holder(name: &str, reply: Value) -> Result<Option<LockHolder>, StoreError> {
    let (value, ttl_ms, fence): (Option<String>, i64, Value) = redis::from_redis_value(reply)
        .map_err(|e| protocol("lock holder", &Value::SimpleString(e.to_string())))?;
    lock::parse_lock_holder(name, value, ttl_ms, &fence)
}

/// A `TIME` reply, as the heartbeat reads it.
pub fn time(reply: Value) -> Option<i64> {
    heartbeat::parse_time(reply)
}
