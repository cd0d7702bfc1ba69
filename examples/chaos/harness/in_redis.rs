//! What Redis holds, read directly (not through a proxy): the runs in
//! flight, and the outcome streams.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::Harness;
use super::config::{KEY_PREFIX, all_jobs};
use crate::records::{Record, Source};

/// A run in flight, as the job's `running` hash in Redis shows it.
#[derive(Clone, Debug)]
pub struct Held {
    pub job: String,
    pub run_id: String,
    pub replica: String,
    pub tick: i64,
}

impl Harness {
    /// The runs in flight in Redis now.
    pub fn held(&self) -> Vec<Held> {
        let Ok(mut connection) = self.redis.connect(Duration::from_millis(500)) else {
            return Vec::new();
        };
        let mut held = Vec::new();
        for job in all_jobs() {
            let key = format!("{KEY_PREFIX}:{{{job}}}:running");
            let entries: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(&key)
                .query(&mut connection)
                .unwrap_or_default();
            for (run_id, entry) in entries {
                let entry: Value = serde_json::from_str(&entry).unwrap_or(Value::Null);
                held.push(Held {
                    job: job.to_string(),
                    run_id,
                    replica: entry["replica"].as_str().unwrap_or("").to_string(),
                    tick: entry["tick"].as_i64().unwrap_or(0),
                });
            }
        }
        held
    }

    /// The runs in flight that replica `i` holds.
    pub fn held_by(&self, i: usize) -> Vec<Held> {
        let name = &self.replicas[i].name;
        self.held()
            .into_iter()
            .filter(|h| &h.replica == name)
            .collect()
    }

    /// How many notification events written before `before_ms` are still
    /// in the jobs' events streams (None when Redis does not answer).
    pub fn events_written_before(&self, before_ms: i64) -> Option<usize> {
        let mut connection = self.redis.connect(Duration::from_millis(500)).ok()?;
        let mut left = 0;
        for job in all_jobs() {
            let key = format!("{KEY_PREFIX}:{{{job}}}:events");
            let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg(before_ms)
                .query(&mut connection)
                .ok()?;
            left += entries.len();
        }
        Some(left)
    }

    /// Every outcome record in the job streams.
    pub fn read_streams(&self, source: Source) -> Result<Vec<Record>> {
        let mut connection = self.redis.connect(Duration::from_secs(2))?;
        let mut records = Vec::new();
        for job in all_jobs() {
            let key = format!("{KEY_PREFIX}:{{{job}}}:runs");
            let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg("+")
                .query(&mut connection)
                .with_context(|| format!("cannot read {key}"))?;
            for (id, flat) in entries {
                records.push(Record {
                    job: job.to_string(),
                    id,
                    source,
                    fields: flat
                        .chunks_exact(2)
                        .map(|pair| (pair[0].clone(), pair[1].clone()))
                        .collect(),
                });
            }
        }
        Ok(records)
    }
}

/// The runs a fault's target held, for the fault log.
pub fn held_json(held: &[Held]) -> Value {
    Value::Array(
        held.iter()
            .map(|h| json!({"job": h.job, "run_id": h.run_id, "tick_ms": h.tick}))
            .collect(),
    )
}
