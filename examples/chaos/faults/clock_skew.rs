//! clock_skew: a replica stopped (SIGTERM) and started again under
//! libfaketime and another clock skew, which its host keeps across later
//! restarts (or back on the true clock).

use anyhow::Result;
use serde_json::json;

use super::schedule::Target;
use super::{Draws, Fault};
use crate::harness::Harness;
use crate::wall::now_ms;

/// The clock skews a replica's host can get (libfaketime's `FAKETIME`); "0" is the
/// true clock.
const SKEWS: [&str; 6] = ["+0.5s", "-0.5s", "+5s", "-5s", "+60s", "-60s"];

pub fn inject(h: &mut Harness, fault: &mut Fault, draws: Draws) -> Result<()> {
    let i = h.pick_target(Target::Any);
    let current = h.replicas[i].skew;
    let choices: Vec<Option<&'static str>> = SKEWS
        .iter()
        .map(|s| Some(*s))
        .chain(current.is_some().then_some(None))
        .filter(|s| *s != current)
        .collect();
    let skew = choices[(draws.a % choices.len() as u64) as usize];
    fault.target = Some(h.replicas[i].name.clone());
    fault.start_ms = now_ms();
    h.stop_replica(i);
    h.replicas[i].skew = skew;
    h.respawn(i)?;
    fault.end_ms = now_ms();
    fault.detail = json!({"from": current.unwrap_or("0"), "to": skew.unwrap_or("0"),
        "note": "the host's clock keeps this skew across later restarts"});
    Ok(())
}
