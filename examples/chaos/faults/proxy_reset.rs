//! proxy_reset: every connection of a replica's proxy reset (RST) at once.

use super::Fault;
use super::schedule::Target;
use crate::harness::Harness;
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault) {
    let i = h.pick_target(Target::Any);
    fault.target = Some(h.replicas[i].name.clone());
    fault.start_ms = now_ms();
    h.proxies[i].reset();
    fault.end_ms = now_ms();
}
