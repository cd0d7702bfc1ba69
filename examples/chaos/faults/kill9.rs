//! kill9: SIGKILL of a replica, most often one holding a run, restarted
//! after 1–3 s (its runs are orphaned: a takeover is measured from here).

use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use super::schedule::Target;
use super::{Draws, Fault};
use crate::harness::{Harness, held_json};
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault, draws: Draws) -> Result<()> {
    let i = h.pick_target(Target::PreferHolder);
    let down = Duration::from_millis(1_000 + draws.a % 2_001);
    let held = h.held_by(i);
    fault.target = Some(h.replicas[i].name.clone());
    fault.start_ms = now_ms();
    h.replicas[i].kill9();
    h.nap(down);
    h.respawn(i)?;
    fault.end_ms = now_ms();
    fault.detail = json!({"down_ms": down.as_millis() as u64, "held": held_json(&held),
                          "skew": h.replicas[i].skew});
    Ok(())
}
