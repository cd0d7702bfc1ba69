//! client_pause: Redis answers nobody for 1.5 s (`CLIENT PAUSE 1500 ALL`);
//! commands sent meanwhile run when it ends. A Redis outage.

use std::time::Duration;

use serde_json::json;

use super::Fault;
use crate::harness::Harness;
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault) {
    fault.start_ms = now_ms();
    let paused = h.redis.connect(Duration::from_secs(1)).and_then(|mut c| {
        Ok(redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(1500)
            .arg("ALL")
            .query::<()>(&mut c)?)
    });
    if let Err(e) = &paused {
        fault.detail = json!({"error": format!("{e:#}")});
    }
    h.nap(Duration::from_millis(1_500));
    fault.end_ms = now_ms();
}
