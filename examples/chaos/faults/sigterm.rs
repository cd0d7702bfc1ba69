//! sigterm: a replica stopped in order (SIGTERM; it must exit 0), most
//! often one holding a run, and started again after 0.3–2 s.

use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use super::schedule::Target;
use super::{Draws, Fault};
use crate::harness::{Harness, held_json};
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault, draws: Draws) -> Result<()> {
    let i = h.pick_target(Target::PreferHolder);
    let down = Duration::from_millis(300 + draws.a % 1_701);
    let held = h.held_by(i);
    fault.target = Some(h.replicas[i].name.clone());
    fault.start_ms = now_ms();
    let status = h.stop_replica(i);
    h.nap(down);
    h.respawn(i)?;
    fault.end_ms = now_ms();
    fault.detail =
        json!({"held": held_json(&held), "exit": status, "down_ms": down.as_millis() as u64});
    Ok(())
}
