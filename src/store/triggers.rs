//! Manual runs (`cronlease trigger`): the triggers stream and its consumer
//! group, and the manual-run script that starts a run for a request.

use super::{
    Claimant, DEDUP_WINDOW, Keys, Reply, Store, StoreError, as_string, dedup_entries, duration_ms,
    protocol,
};
use crate::link::Conn;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

/// The consumer group of the replicas on the triggers stream.
pub const TRIGGER_GROUP: &str = "replicas";

/// The field of a trigger's entry with the trace context it continues
/// (a replica that does not know it reads past it).
const TRACEPARENT_FIELD: &str = "traceparent";

/// A manual run request as read from the triggers stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRequest {
    /// The stream entry id; its first part is the request's Redis time.
    pub id: String,
    pub job: String,
    pub run_id: String,
    pub requested_by: String,
    /// The parameters given (`param.<name>` fields), name and value, in
    /// the entry's order: as read, not checked (the replica checks them
    /// against its job before it runs anything).
    pub params: Vec<(String, String)>,
    /// The trace context the request carried (`traceparent` field),
    /// checked: the run's span continues its trace. A value that is not a
    /// valid W3C `traceparent` is left out (and logged).
    pub traceparent: Option<crate::trace::TraceParent>,
}

impl TriggerRequest {
    /// Redis time of the request, ms (from the entry id).
    pub fn requested_ms(&self) -> i64 {
        self.id
            .split('-')
            .next()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0)
    }
}

/// Everything the manual-run script needs.
#[derive(Debug, Clone)]
pub struct ManualRequest<'a> {
    pub request: &'a TriggerRequest,
    pub claimant: Claimant<'a>,
    /// The run's parameters, checked: kept with the run in flight, so
    /// that its `abandoned` record and a rerun have them.
    pub params: &'a crate::config::ParamValues,
}

/// What the manual-run script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManualReply {
    Claimed {
        fence: u64,
        started_ms: i64,
        lease_key: String,
    },
    /// A run is in flight and `overlap = "skip"`: recorded as skipped.
    Busy { holder: String },
    /// This request was handled before.
    Duplicate,
    /// The job's state hash holds a `field` that is not a number: not run
    /// (see [`ClaimReply::Corrupt`](super::ClaimReply::Corrupt)).
    Corrupt { field: String, value: String },
    /// The job's concurrency group has no slot free: nothing changed.
    GroupFull,
}

/// A connection of its own for blocking reads of the triggers stream.
pub struct TriggerReader {
    conn: Conn,
    keys: Arc<Keys>,
    consumer: String,
}

impl TriggerReader {
    /// Waits up to `block` for new requests for this consumer.
    pub async fn read(&mut self, block: Duration) -> Result<Vec<TriggerRequest>, StoreError> {
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(TRIGGER_GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(duration_ms(block))
            .arg("STREAMS")
            .arg(self.keys.triggers())
            .arg(">")
            .query_async(&mut self.conn)
            .await?;
        Ok(parse_read_group(reply))
    }
}

/// One stream entry, `[id, [field, value, …]]`, as a request; None when it
/// does not read so.
pub(super) fn parse_trigger_entry(entry: Value) -> Option<TriggerRequest> {
    let Value::Array(mut parts) = entry else {
        return None;
    };
    if parts.len() != 2 {
        return None;
    }
    let fields = match parts.remove(1) {
        Value::Array(fields) => fields,
        _ => Vec::new(),
    };
    let id = as_string(&parts[0])?;
    let mut job = String::new();
    let mut run_id = String::new();
    let mut requested_by = String::new();
    let mut params = Vec::new();
    let mut traceparent = None;
    for pair in fields.chunks(2) {
        let (Some(name), Some(value)) = (
            pair.first().and_then(as_string),
            pair.get(1).and_then(as_string),
        ) else {
            continue;
        };
        match name.as_str() {
            "job" => job = value,
            "run_id" => run_id = value,
            "requested_by" => requested_by = value,
            TRACEPARENT_FIELD => match crate::trace::TraceParent::parse(&value) {
                Ok(parsed) => traceparent = Some(parsed),
                Err(e) => {
                    tracing::warn!(entry = %id, error = %e, "a trigger's traceparent read from Redis is not valid: the run starts a trace of its own");
                }
            },
            other => {
                if let Some(param) = other.strip_prefix(crate::config::PARAM_FIELD_PREFIX) {
                    params.push((param.to_string(), value));
                }
            }
        }
    }
    Some(TriggerRequest {
        id,
        job,
        run_id,
        requested_by,
        params,
        traceparent,
    })
}

/// An `XREADGROUP` reply, `[[stream, [[id, [field, value, …]], …]]]` or
/// nil: the requests it holds (an entry that does not read so is skipped).
pub(super) fn parse_read_group(reply: Value) -> Vec<TriggerRequest> {
    let Value::Array(streams) = reply else {
        return Vec::new();
    };
    let mut requests = Vec::new();
    for stream in streams {
        let Value::Array(mut parts) = stream else {
            continue;
        };
        if parts.len() == 2
            && let Value::Array(entries) = parts.remove(1)
        {
            requests.extend(entries.into_iter().filter_map(parse_trigger_entry));
        }
    }
    requests
}

/// An `XAUTOCLAIM` reply, `[next, [entry, …], …]`: the requests taken over.
pub(super) fn parse_auto_claim(reply: Value) -> Result<Vec<TriggerRequest>, StoreError> {
    let Value::Array(mut parts) = reply else {
        return Err(protocol("XAUTOCLAIM", &reply));
    };
    if parts.len() < 2 {
        return Ok(Vec::new());
    }
    let Value::Array(entries) = parts.remove(1) else {
        return Ok(Vec::new());
    };
    Ok(entries
        .into_iter()
        .filter_map(parse_trigger_entry)
        .collect())
}

/// The manual-run script's reply.
pub(super) fn parse_manual(reply: Value) -> Result<ManualReply, StoreError> {
    let r = Reply::new(reply, "manual")?;
    match r.string(0)?.as_str() {
        "claimed" => Ok(ManualReply::Claimed {
            fence: r.fence(1)?,
            started_ms: r.int(2)?,
            lease_key: r.string(3)?,
        }),
        "busy" => Ok(ManualReply::Busy {
            holder: r.string_or_empty(1),
        }),
        "duplicate" => Ok(ManualReply::Duplicate),
        "group_full" => Ok(ManualReply::GroupFull),
        "corrupt" => Ok(ManualReply::Corrupt {
            field: r.string(1)?,
            value: r.string_or_empty(2),
        }),
        _ => Err(r.bad()),
    }
}

impl Store {
    /// Creates the replicas' consumer group on the triggers stream (and the
    /// stream) if missing.
    pub async fn ensure_trigger_group(&self) -> Result<(), StoreError> {
        let mut conn = self.single("`cronlease trigger`").await?;
        let result: Result<(), redis::RedisError> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.keys.triggers())
            .arg(TRIGGER_GROUP)
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match result {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => Ok(other?),
        }
    }

    /// A reader of the triggers stream as consumer `consumer`, on a
    /// connection of its own (its reads block).
    pub async fn trigger_reader(
        &self,
        consumer: &str,
        block: Duration,
    ) -> Result<TriggerReader, StoreError> {
        let [node] = &*self.nodes else {
            return Err(StoreError::QuorumUnsupported {
                what: "`cronlease trigger`",
            });
        };
        let conn = node.link.dedicated(block + self.command_timeout).await?;
        Ok(TriggerReader {
            conn,
            keys: self.keys.clone(),
            consumer: consumer.to_string(),
        })
    }

    /// Takes over requests another consumer read but did not acknowledge
    /// within `min_idle` (it died).
    pub async fn claim_stale_triggers(
        &self,
        consumer: &str,
        min_idle: Duration,
    ) -> Result<Vec<TriggerRequest>, StoreError> {
        let mut conn = self.single("`cronlease trigger`").await?;
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(self.keys.triggers())
            .arg(TRIGGER_GROUP)
            .arg(consumer)
            .arg(duration_ms(min_idle))
            .arg("0-0")
            .arg("COUNT")
            .arg(100)
            .query_async(&mut conn)
            .await?;
        parse_auto_claim(reply)
    }

    /// Acknowledges a handled request.
    pub async fn ack_trigger(&self, id: &str) -> Result<(), StoreError> {
        let mut conn = self.single("`cronlease trigger`").await?;
        let _: i64 = redis::cmd("XACK")
            .arg(self.keys.triggers())
            .arg(TRIGGER_GROUP)
            .arg(id)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Queues a manual run request with the parameters given for it (each
    /// a field `param.<name>`); returns its stream id.
    pub async fn enqueue_trigger(
        &self,
        job: &str,
        run_id: &str,
        requested_by: &str,
        params: &[(String, String)],
        traceparent: Option<&crate::trace::TraceParent>,
    ) -> Result<String, StoreError> {
        let mut conn = self.single("`cronlease trigger`").await?;
        let mut command = redis::cmd("XADD");
        command
            .arg(self.keys.triggers())
            .arg("MAXLEN")
            .arg("~")
            .arg(10_000)
            .arg("*")
            .arg("job")
            .arg(job)
            .arg("run_id")
            .arg(run_id)
            .arg("requested_by")
            .arg(requested_by);
        for (name, value) in params {
            command
                .arg(format!("{}{name}", crate::config::PARAM_FIELD_PREFIX))
                .arg(value);
        }
        if let Some(traceparent) = traceparent {
            command.arg(TRACEPARENT_FIELD).arg(traceparent.as_str());
        }
        let id: String = command.query_async(&mut conn).await?;
        Ok(id)
    }

    /// Runs the manual-run script for a request.
    pub async fn manual_claim(
        &self,
        manual: &ManualRequest<'_>,
    ) -> Result<ManualReply, StoreError> {
        let request = manual.request;
        let keys = &self.keys;
        let job = request.job.as_str();
        let mut conn = self.single("`cronlease trigger`").await?;
        let mut invocation = self.scripts.manual.prepare_invoke();
        invocation
            .key(keys.state(job))
            .key(keys.running(job))
            .key(keys.lease(job))
            .key(keys.runs(job))
            .key(keys.done_at(job));
        if let Some(group) = manual.claimant.group {
            invocation
                .key(keys.group_slots(&group.name))
                .key(keys.group_waiting(&group.name));
        }
        invocation
            .arg(request.requested_ms())
            .arg(&request.run_id)
            .arg(duration_ms(manual.claimant.lease))
            .arg(manual.claimant.overlap.as_str())
            .arg(manual.claimant.replica)
            .arg(manual.claimant.host)
            .arg(manual.claimant.history)
            .arg(manual.claimant.min_fence)
            .arg(duration_ms(DEDUP_WINDOW))
            .arg(dedup_entries(manual.claimant.history))
            .arg(manual.claimant.group.map_or("", |g| g.name.as_str()))
            .arg(manual.claimant.group.map_or(0, |g| g.max));
        for (name, value) in manual.params {
            invocation
                .arg(format!("{}{name}", crate::config::PARAM_FIELD_PREFIX))
                .arg(value);
        }
        let reply: Value = invocation.invoke_async(&mut conn).await?;
        parse_manual(reply)
    }

    /// Deletes `consumer` from the replicas' group on the triggers stream,
    /// unless requests are still pending for it (another replica takes
    /// those over first). Quorum mode has no triggers stream.
    pub(super) async fn drop_trigger_consumer(&self, consumer: &str) -> Result<(), StoreError> {
        if self.nodes.len() != 1 {
            return Ok(());
        }
        self.drop_idle_consumer(
            "`cronlease trigger`",
            &self.keys.triggers(),
            TRIGGER_GROUP,
            consumer,
        )
        .await
    }
}

impl Store {
    /// Hands a request back to the group: the same request as a new entry
    /// (which any consumer may read), then the old one acknowledged. A
    /// replica that does not have the job does this so that one that has
    /// it runs it; should the acknowledgement fail, the run id still makes
    /// the copy run at most once.
    pub async fn requeue_trigger(&self, request: &TriggerRequest) -> Result<(), StoreError> {
        self.enqueue_trigger(
            &request.job,
            &request.run_id,
            &request.requested_by,
            &request.params,
            request.traceparent.as_ref(),
        )
        .await?;
        self.ack_trigger(&request.id).await
    }
}
