//! redis_restart: Redis killed (SIGKILL) and started again with its data
//! (AOF, fsync'd at every write). A Redis outage.

use anyhow::Result;
use serde_json::json;

use super::Fault;
use crate::harness::Harness;
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault) -> Result<()> {
    fault.start_ms = now_ms();
    h.redis.kill9();
    h.redis.launch()?;
    fault.end_ms = now_ms();
    fault.detail = json!({"persistence": "AOF, appendfsync always"});
    Ok(())
}
