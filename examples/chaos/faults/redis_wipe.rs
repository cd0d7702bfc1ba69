//! redis_wipe: Redis killed and started again without its data, a declared
//! state-loss window. The outcome streams are read just before, so that
//! the checker still sees the history the wipe erased.

use anyhow::Result;
use serde_json::json;

use super::Fault;
use crate::harness::Harness;
use crate::records::Source;
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault) -> Result<()> {
    let before = h.read_streams(Source::Snapshot)?;
    fault.start_ms = now_ms();
    h.redis.kill9();
    h.redis.wipe()?;
    h.redis.launch()?;
    fault.end_ms = now_ms();
    fault.detail = json!({"snapshot_records": before.len(),
        "note": "restarted without its data: a declared state-loss window"});
    h.snapshots.extend(before);
    Ok(())
}
