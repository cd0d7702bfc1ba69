//! reload: a replica's config changed harmlessly (`timeout` on `quick`
//! toggled) and SIGHUP sent mid-tick; a valid config not taken is an E.

use std::time::{Duration, Instant};

use anyhow::Result;
use nix::sys::signal::Signal;
use serde_json::json;

use super::schedule::Target;
use super::{Draws, Fault};
use crate::harness::{Harness, read_from};
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault, draws: Draws) -> Result<()> {
    let i = h.pick_target(Target::Any);
    // Mid-tick: this many ms after a second starts.
    let into_tick = 50 + draws.a % 900;
    let wait = (1_000 + into_tick as i64 - now_ms().rem_euclid(1_000)) % 1_000;
    h.nap(Duration::from_millis(wait as u64));
    let replica = &mut h.replicas[i];
    replica.quick_timeout = !replica.quick_timeout;
    replica.write_config(&h.effects)?;
    let mark = std::fs::metadata(&replica.log).map_or(0, |m| m.len());
    fault.target = Some(replica.name.clone());
    fault.start_ms = now_ms();
    replica.signal(Signal::SIGHUP);
    let result = wait_for_reload(h, i, mark);
    if result != "job table reloaded" {
        h.exit_problems.push(format!(
            "{}: SIGHUP with a valid config: {result}",
            h.replicas[i].name
        ));
    }
    fault.end_ms = now_ms();
    fault.detail = json!({"quick_timeout": h.replicas[i].quick_timeout,
        "ms_into_tick": into_tick, "result": result});
    Ok(())
}

/// What replica `i` logged after byte `mark` about the reload, within 3 s.
fn wait_for_reload(h: &mut Harness, i: usize, mark: u64) -> &'static str {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let log = read_from(&h.replicas[i].log, mark);
        if log.contains("job table reloaded") {
            return "job table reloaded";
        }
        if log.contains("reload rejected") || log.contains("reload failed") {
            return "reload rejected";
        }
        if !h.nap(Duration::from_millis(50)) {
            break;
        }
    }
    "no reload message within 3 s"
}
