//! proxy_delay, proxy_blackhole and proxy_drop: a replica's proxy in that
//! mode for 1–4 s (every chunk delayed by 50–400 ms; nothing forwarded, a
//! partition; every connection closed), then passing again.

use std::time::Duration;

use serde_json::json;

use super::schedule::Target;
use super::{Draws, Fault, FaultKind};
use crate::harness::Harness;
use crate::proxy::Mode;
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault, draws: Draws) {
    let i = h.pick_target(Target::Any);
    let length = Duration::from_millis(1_000 + draws.a % 3_001);
    let mode = match fault.kind {
        FaultKind::ProxyDelay => Mode::Delay(50 + draws.b % 351),
        FaultKind::ProxyBlackhole => Mode::Blackhole,
        _ => Mode::Drop,
    };
    fault.target = Some(h.replicas[i].name.clone());
    fault.start_ms = now_ms();
    h.proxies[i].set(mode);
    h.nap(length);
    h.proxies[i].set(Mode::Pass);
    fault.end_ms = now_ms();
    fault.detail = json!({"mode": format!("{mode:?}"), "length_ms": length.as_millis() as u64});
}
