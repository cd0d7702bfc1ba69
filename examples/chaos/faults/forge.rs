//! forge: what any Redis client with the replicas' user could write, that
//! no replica would: claim announcements for a tick in the year 2100, a
//! fence past 2^53, a job nobody has and no claim at all, then a job's
//! high-water mark set a day ahead of Redis time. Neither may silence a
//! job: the announcements are ignored, and the next claim treats the mark
//! as lost and records a finding (`status`: needs repair). Not an outage:
//! every tick is still held to D, M, F, S, L.

use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use super::{Draws, Fault};
use crate::harness::Harness;
use crate::harness::config::{JOBS, KEY_PREFIX};
use crate::wall::now_ms;

pub fn inject(h: &mut Harness, fault: &mut Fault, draws: Draws) -> Result<()> {
    let job = JOBS[(draws.a % JOBS.len() as u64) as usize].0;
    fault.start_ms = now_ms();
    let mut redis = h.redis.connect(Duration::from_secs(2))?;
    let lines = [
        format!("{job} 4102444800000 1"),
        format!("{job} {} 9007199254740993", now_ms() + 60_000),
        "no-such-job 1 1".to_string(),
        "not a claim".to_string(),
    ];
    for line in &lines {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(format!("{KEY_PREFIX}:claimed"))
            .arg(line)
            .query(&mut redis)?;
    }
    let ahead_ms = now_ms() + 24 * 3600 * 1000;
    let _: i64 = redis::cmd("HSET")
        .arg(format!("{KEY_PREFIX}:{{{job}}}:state"))
        .arg("last_tick")
        .arg(ahead_ms)
        .query(&mut redis)?;
    fault.end_ms = now_ms();
    fault.detail = json!({"job": job, "announcements": lines.len(), "last_tick": ahead_ms});
    Ok(())
}
