//! The replicas' heartbeats in `<prefix>:replicas`, the deployment epoch,
//! and the removal of a replica's entry (clean shutdown, or silent for
//! [`REPLICA_FORGET_AFTER`]). The record itself is `membership::Heartbeat`.

use super::{Store, StoreError, as_int, as_string, protocol, time_us};
use crate::link::Conn;
use crate::membership::Heartbeat;
use std::time::Duration;

use redis::Value;

/// How long a replica may be silent before its heartbeat entry and its
/// consumer of the triggers stream are removed: long after every sweep of
/// its runs and every takeover of its pending requests.
pub const REPLICA_FORGET_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Whether a heartbeat also reads the Redis clock (the replica measures
/// its offset every few heartbeats, not every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerTime {
    Read,
    Skip,
}

/// The outcome of writing a heartbeat.
#[derive(Debug, Clone)]
pub struct HeartbeatReply {
    /// The deployment's epoch after this heartbeat, per answering master
    /// (one with a single Redis, Sentinel or Cluster).
    pub epochs: Vec<Epoch>,
    /// Redis time (µs), when the heartbeat asked for it.
    pub server_us: Option<i64>,
    /// Every replica's heartbeat JSON, ours included.
    pub replicas: Vec<(String, String)>,
    /// Whether this replica's job hashes are in Redis (on every master)
    /// after this heartbeat.
    pub jobs_stored: bool,
    /// The replicas an operator drained (`Keys::drain`).
    pub drained: Vec<String>,
}

/// One Redis master's epoch, as a heartbeat read it.
#[derive(Debug, Clone)]
pub struct Epoch {
    /// The master, for logs (credentials redacted).
    pub node: String,
    pub epoch: String,
    /// We created the epoch key (it was missing).
    pub created: bool,
}

/// A `TIME` reply, `[seconds, microseconds]`, as µs since the epoch; None
/// when it does not read so.
pub(super) fn parse_time(reply: Value) -> Option<i64> {
    match reply {
        Value::Array(parts) if parts.len() == 2 => {
            let secs = as_int(&parts[0]).unwrap_or(0);
            let micros = as_int(&parts[1]).unwrap_or(0);
            time_us(secs, micros)
        }
        _ => None,
    }
}

impl Store {
    /// Writes this replica's heartbeat, reads the epoch (creating it if
    /// missing), every replica's heartbeat and, with [`ServerTime::Read`],
    /// the server time: one round trip (two when the epoch is missing).
    ///
    /// With `quorum`, on every master; a majority must answer. Each
    /// master's epoch is reported on its own, and of two records of one
    /// replica the newer is kept.
    pub async fn heartbeat(
        &self,
        replica: &str,
        record: &str,
        jobs: Option<&str>,
        new_epoch: &str,
        time: ServerTime,
    ) -> Result<HeartbeatReply, StoreError> {
        let answers = self
            .on_all(|conn| self.heartbeat_on(conn, replica, record, jobs, new_epoch, time))
            .await
            .into_iter()
            .zip(self.nodes.iter())
            .map(|(answer, node)| {
                answer.map(|mut answer| {
                    for epoch in &mut answer.epochs {
                        epoch.node.clone_from(&node.name);
                    }
                    answer
                })
            })
            .collect();
        let answers = self.gather("heartbeat", answers)?;
        let mut merged = HeartbeatReply {
            epochs: Vec::new(),
            server_us: None,
            replicas: Vec::new(),
            jobs_stored: true,
            drained: Vec::new(),
        };
        let last_seen = |raw: &str| {
            Heartbeat::parse_without_hashes(raw)
                .map(|record| record.last_seen_ms)
                .unwrap_or(i64::MIN)
        };
        for answer in answers {
            merged.epochs.extend(answer.epochs);
            merged.server_us = merged.server_us.or(answer.server_us);
            merged.jobs_stored &= answer.jobs_stored;
            for replica in answer.drained {
                if !merged.drained.contains(&replica) {
                    merged.drained.push(replica);
                }
            }
            for (id, raw) in answer.replicas {
                match merged.replicas.iter_mut().find(|(seen, _)| *seen == id) {
                    Some(known) if last_seen(&known.1) < last_seen(&raw) => known.1 = raw,
                    Some(_) => {}
                    None => merged.replicas.push((id, raw)),
                }
            }
        }
        Ok(merged)
    }

    async fn heartbeat_on(
        &self,
        mut conn: Conn,
        replica: &str,
        record: &str,
        jobs: Option<&str>,
        new_epoch: &str,
        time: ServerTime,
    ) -> Result<HeartbeatReply, StoreError> {
        let mut pipe = redis::pipe();
        if let Some(jobs) = jobs {
            pipe.cmd("HSET")
                .arg(self.keys.replica_jobs())
                .arg(replica)
                .arg(jobs)
                .ignore();
        }
        pipe.cmd("HSET")
            .arg(self.keys.replicas())
            .arg(replica)
            .arg(record)
            .ignore()
            .cmd("GET")
            .arg(self.keys.epoch())
            .cmd("HGETALL")
            .arg(self.keys.replicas())
            .cmd("HEXISTS")
            .arg(self.keys.replica_jobs())
            .arg(replica)
            .cmd("HKEYS")
            .arg(self.keys.drain());
        if time == ServerTime::Read {
            pipe.cmd("TIME");
        }
        let mut replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let time = match time {
            ServerTime::Read => replies.pop(),
            ServerTime::Skip => None,
        };
        let drained: Vec<String> = match replies.pop() {
            Some(value) => redis::from_redis_value(value)
                .map_err(|e| protocol("HKEYS", &Value::SimpleString(e.to_string())))?,
            None => Vec::new(),
        };
        let jobs_stored = replies.pop().as_ref().and_then(as_int) == Some(1);
        let replicas: Vec<(String, String)> = match replies.pop() {
            Some(value) => redis::from_redis_value(value)
                .map_err(|e| protocol("HGETALL", &Value::SimpleString(e.to_string())))?,
            None => Vec::new(),
        };
        let server_us = time.and_then(parse_time);
        let (epoch, created_epoch) = match replies.pop().as_ref().and_then(as_string) {
            Some(epoch) => (epoch, false),
            None => {
                // First heartbeat of a deployment, or Redis lost its data.
                let created: Option<String> = redis::cmd("SET")
                    .arg(self.keys.epoch())
                    .arg(new_epoch)
                    .arg("NX")
                    .query_async(&mut conn)
                    .await?;
                let epoch: String = redis::cmd("GET")
                    .arg(self.keys.epoch())
                    .query_async(&mut conn)
                    .await?;
                (epoch, created.is_some())
            }
        };
        Ok(HeartbeatReply {
            epochs: vec![Epoch {
                node: String::new(),
                epoch,
                created: created_epoch,
            }],
            server_us,
            replicas,
            jobs_stored,
            drained,
        })
    }

    /// Removes this replica's heartbeat, its job hashes and its consumer
    /// of the triggers stream (clean shutdown).
    pub async fn remove_replica(&self, replica: &str) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL")
            .arg(self.keys.replicas())
            .arg(replica)
            .ignore()
            .cmd("HDEL")
            .arg(self.keys.replica_jobs())
            .arg(replica)
            .ignore();
        let pipe = &pipe;
        let answers = self
            .on_all(|mut conn| async move { Ok(pipe.query_async::<()>(&mut conn).await?) })
            .await;
        self.gather("remove_replica", answers)?;
        self.drop_trigger_consumer(replica).await
    }

    /// Removes the heartbeat entry of `replica`, silent since `last_seen_ms`
    /// for longer than [`REPLICA_FORGET_AFTER`], its job hashes and its
    /// trigger consumer;
    /// `false` if it spoke again meanwhile (then nothing is removed).
    pub async fn forget_replica(
        &self,
        replica: &str,
        last_seen_ms: i64,
    ) -> Result<bool, StoreError> {
        let invocation = {
            let mut invocation = self.scripts.forget_replica.prepare_invoke();
            invocation
                .key(self.keys.replicas())
                .key(self.keys.replica_jobs())
                .key(self.keys.replicas_told())
                .arg(replica)
                .arg(last_seen_ms);
            invocation
        };
        let invocation = &invocation;
        let answers = self
            .on_all(|mut conn| async move { Ok(invocation.invoke_async::<i64>(&mut conn).await?) })
            .await;
        let removed = self
            .gather("forget_replica", answers)?
            .into_iter()
            .any(|n| n == 1);
        if removed {
            self.drop_trigger_consumer(replica).await?;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_time_reply_that_does_not_fit_is_no_time() {
        // Found by the `replies` fuzz target (an overflow panic before).
        let time =
            |secs: &str, micros: &str| parse_time(Value::Array(vec![bulk(secs), bulk(micros)]));
        assert_eq!(time("1767268800", "123456"), Some(1_767_268_800_123_456));
        assert_eq!(time("9223372036854775807", "999999"), None);
        assert_eq!(time("9223372036854", "999999"), None);
        assert_eq!(time("-9223372036854775808", "0"), None);
        assert_eq!(parse_time(Value::Array(vec![bulk("1")])), None);
        assert_eq!(parse_time(Value::Nil), None);
    }
}
