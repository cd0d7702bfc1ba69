//! sigstop: a replica frozen (SIGSTOP) for 2.5–5 s, beyond its lease, then
//! resumed (SIGCONT); its watchdog must give up the runs it held (abort
//! latency is measured from here).

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;

use super::schedule::Target;
use super::{Draws, Fault};
use crate::harness::{Harness, held_json};
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault, draws: Draws) {
    let i = h.pick_target(Target::PreferHolder);
    let stop = Duration::from_millis(2_500 + draws.a % 2_501);
    let held = h.held_by(i);
    fault.target = Some(h.replicas[i].name.clone());
    fault.start_ms = now_ms();
    h.replicas[i].signal(Signal::SIGSTOP);
    // An interrupted nap still resumes the process below.
    h.nap_stopped(stop);
    h.replicas[i].signal(Signal::SIGCONT);
    fault.end_ms = now_ms();
    fault.detail = json!({"stop_ms": stop.as_millis() as u64, "held": held_json(&held),
                          "skew_ms": h.replicas[i].skew_ms()});
}
