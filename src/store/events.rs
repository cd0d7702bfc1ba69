//! Notification events: the rules the scripts read ([`Notices`]), the
//! events streams their scripts write (a job's in its own slot, the
//! replicas' beside their heartbeats), and the consumer group `deliver`
//! through which the replicas deliver each entry once it is sent.
//!
//! The scripts decide which events there are and write them in the same
//! call as what causes them (prelude.lua, `emit`); this side only reads,
//! takes over, acknowledges and counts.

use super::{Followers, Keys, Store, StoreError, as_int, as_string, duration_ms, protocol};
use redis::Value;
use std::time::Duration;

/// The consumer group of the replicas on every events stream.
const DELIVER_GROUP: &str = "deliver";

/// What a stream entry may hold beside its fields: bounds on what is read
/// back (a forged entry cannot make a replica hold more).
const MAX_FIELD_BYTES: usize = 4096;

/// Who hears of one subject's recorded outcomes and claims: its
/// notification rules as the scripts read them (prelude.lua's
/// `read_notices`: the job, none for the replicas' own events, the wake-up
/// channel, the events told, the channels, the reminder period and the
/// lateness told), and a job's followers ([`Followers`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notices {
    arg: String,
    followers: Followers,
}

/// No rules, to lend where a [`Notices`] is borrowed (by the tests and
/// benchmarks that drive the store directly).
#[cfg(any(test, feature = "internals"))]
pub static NO_NOTICES: Notices = Notices::NONE;

/// What [`Notices::new`] is made of.
pub struct NoticeRules<'a> {
    /// The job; `""` for the replicas' own events.
    pub job: &'a str,
    /// The events told, by name.
    pub events: &'a [&'a str],
    /// The channels each event goes to: names of `[A-Za-z0-9_.-]`.
    pub channels: &'a [String],
    pub repeat_every: Duration,
    /// A run that starts later than this after its tick is told `late`.
    pub late_after: Option<Duration>,
}

impl Notices {
    /// No rules: the scripts write no event.
    pub const NONE: Notices = Notices {
        arg: String::new(),
        followers: Followers::NONE,
    };

    /// No rules: the scripts write no event.
    pub fn none() -> Notices {
        Notices::NONE
    }

    /// The rules as one script argument; none when there is no channel or
    /// no event.
    pub fn new(keys: &Keys, rules: &NoticeRules<'_>) -> Notices {
        if rules.channels.is_empty() || rules.events.is_empty() {
            return Notices::none();
        }
        let arg = format!(
            "{}|{}|{}|{}|{}|{}",
            rules.job,
            keys.notify_channel(),
            rules.events.join(","),
            rules.channels.join(","),
            duration_ms(rules.repeat_every),
            rules.late_after.map_or(0, duration_ms),
        );
        Notices {
            arg,
            followers: Followers::NONE,
        }
    }

    /// These rules, and `followers` told of each outcome besides.
    pub fn with_followers(mut self, followers: Followers) -> Notices {
        self.followers = followers;
        self
    }

    /// The job's followers.
    pub fn followers(&self) -> &Followers {
        &self.followers
    }

    /// The script argument (`""`: none).
    pub fn arg(&self) -> &str {
        &self.arg
    }

    /// Whether no notification is told (followers aside).
    pub fn is_none(&self) -> bool {
        self.arg.is_empty()
    }
}

/// One entry of an events stream, as read back: evidence, each field
/// checked for its form only (the caller checks the job and the channel
/// against what it knows).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventRecord {
    /// The stream entry id; its first part is when the event was written
    /// (Redis ms).
    pub id: String,
    pub event: String,
    pub channel: String,
    pub job: Option<String>,
    pub tick_ms: Option<i64>,
    pub run_id: Option<String>,
    pub fence: Option<u64>,
    pub replica: Option<String>,
    pub host: Option<String>,
    pub status: Option<String>,
    pub attempt: Option<u32>,
    pub output: Option<String>,
    /// How many: failures of the streak, ticks missed.
    pub count: Option<u64>,
    pub failing_since_ms: Option<i64>,
    pub last_tick_ms: Option<i64>,
    pub late_ms: Option<i64>,
    pub ok_since_ms: Option<i64>,
    pub within_ms: Option<i64>,
    pub last_seen_ms: Option<i64>,
    pub silent_ms: Option<i64>,
    /// Why a `missed` tick was not run, when a record says more than
    /// that nobody claimed it.
    pub reason: Option<MissedReason>,
}

/// Why a tick was recorded `missed`, besides nobody claiming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissedReason {
    /// No live replica had every tag of the job's `run_on`
    /// (`unplaced.lua`).
    NoMatchingReplica,
}

impl EventRecord {
    /// Redis time the event was written, ms (from the entry id).
    pub fn written_ms(&self) -> i64 {
        self.id
            .split('-')
            .next()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0)
    }
}

/// An entry read by a consumer and not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEvent {
    pub id: String,
    pub consumer: String,
    /// Since it was last read or taken over.
    pub idle: Duration,
    /// How many times it was read or taken over.
    pub deliveries: u64,
}

/// `[id, [field, value, …]]` as an event; None when it does not read so
/// (an entry deleted after it was read answers nil fields).
fn parse_entry(entry: Value) -> Option<EventRecord> {
    let Value::Array(mut parts) = entry else {
        return None;
    };
    if parts.len() != 2 {
        return None;
    }
    let Value::Array(fields) = parts.remove(1) else {
        return None;
    };
    let mut record = EventRecord {
        id: as_string(&parts[0])?,
        ..EventRecord::default()
    };
    for pair in fields.chunks(2) {
        let [name, value] = pair else { continue };
        let Some(name) = as_string(name) else {
            continue;
        };
        let Some(text) = as_string(value).filter(|v| v.len() <= MAX_FIELD_BYTES) else {
            continue;
        };
        let number = || text.parse::<i64>().ok();
        let present = || Some(text.clone()).filter(|t| !t.is_empty());
        match name.as_str() {
            "event" => record.event = text.clone(),
            "channel" => record.channel = text.clone(),
            "job" => record.job = present(),
            "tick" => record.tick_ms = number(),
            "run_id" => record.run_id = present(),
            "fence" => record.fence = text.parse().ok().filter(|&f| f > 0),
            "replica" => record.replica = present(),
            "host" => record.host = present(),
            "status" => record.status = present(),
            "attempt" => record.attempt = text.parse().ok(),
            "output" => record.output = present(),
            "count" => record.count = text.parse().ok(),
            "failing_since" => record.failing_since_ms = number(),
            "last_tick" => record.last_tick_ms = number(),
            "late_ms" => record.late_ms = number(),
            "ok_since" => record.ok_since_ms = number(),
            "within_ms" => record.within_ms = number(),
            "last_seen_ms" => record.last_seen_ms = number(),
            "silent_ms" => record.silent_ms = number(),
            "reason" if text == "no_matching_replica" => {
                record.reason = Some(MissedReason::NoMatchingReplica)
            }
            _ => {}
        }
    }
    Some(record)
}

/// Entries as `XRANGE`, `XCLAIM` and one stream of `XREADGROUP` answer them.
fn parse_entries(entries: Value) -> Vec<EventRecord> {
    match entries {
        Value::Array(entries) => entries.into_iter().filter_map(parse_entry).collect(),
        _ => Vec::new(),
    }
}

/// An `XREADGROUP` reply of one stream, `[[stream, [entry, …]]]` or nil.
fn parse_read(reply: Value) -> Vec<EventRecord> {
    let Value::Array(streams) = reply else {
        return Vec::new();
    };
    streams
        .into_iter()
        .flat_map(|stream| match stream {
            Value::Array(mut parts) if parts.len() == 2 => parse_entries(parts.remove(1)),
            _ => Vec::new(),
        })
        .collect()
}

/// The extended `XPENDING` reply: `[[id, consumer, idle ms, deliveries], …]`.
fn parse_pending(reply: Value) -> Result<Vec<PendingEvent>, StoreError> {
    let Value::Array(rows) = reply else {
        return Err(protocol("XPENDING", &reply));
    };
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let Value::Array(row) = row else { return None };
            let [id, consumer, idle, deliveries] = &row[..] else {
                return None;
            };
            Some(PendingEvent {
                id: as_string(id)?,
                consumer: as_string(consumer)?,
                idle: Duration::from_millis(u64::try_from(as_int(idle)?).ok()?),
                deliveries: u64::try_from(as_int(deliveries)?).ok()?,
            })
        })
        .collect())
}

/// The last delivery through one channel, as `status` and the dashboard
/// show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChannelHealth {
    pub channel: String,
    /// The last delivery the receiver took (Redis ms).
    pub ok_ms: Option<i64>,
    /// The last failed attempt, if later than `ok_ms`.
    pub failure: Option<DeliveryFailure>,
}

/// A failed delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeliveryFailure {
    pub at_ms: i64,
    pub event: String,
    pub job: Option<String>,
    /// What went wrong (the receiver's answer, or the connection's error),
    /// truncated.
    pub error: String,
    /// Whether cronlease stopped retrying it (permanent, or past
    /// `retry_for`).
    pub gave_up: GaveUp,
}

/// Whether a failed delivery is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GaveUp {
    /// It is retried with backoff until `retry_for` has passed.
    Retrying,
    /// It was dropped: the receiver refused it for good, or `retry_for`
    /// passed.
    Dropped,
}

impl Store {
    /// Reads entries of `stream` no consumer read yet, as `consumer`
    /// (creating the group, at the stream's start, when it is missing: a
    /// Redis restored without it, or a stream no script wrote yet).
    pub async fn read_events(
        &self,
        stream: &str,
        consumer: &str,
        count: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let mut conn = self.single("notifications").await?;
        let read = || {
            redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(DELIVER_GROUP)
                .arg(consumer)
                .arg("COUNT")
                .arg(count)
                .arg("STREAMS")
                .arg(stream)
                .arg(">")
                .to_owned()
        };
        match read().query_async::<Value>(&mut conn).await {
            Ok(reply) => Ok(parse_read(reply)),
            Err(e) if e.code() == Some("NOGROUP") => {
                let created: Result<(), redis::RedisError> = redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(stream)
                    .arg(DELIVER_GROUP)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query_async(&mut conn)
                    .await;
                match created {
                    Err(e) if e.code() != Some("BUSYGROUP") => return Err(e.into()),
                    _ => {}
                }
                Ok(parse_read(read().query_async(&mut conn).await?))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Entries of `stream` read and not acknowledged for at least
    /// `min_idle`, oldest first.
    pub async fn pending_events(
        &self,
        stream: &str,
        min_idle: Duration,
        count: usize,
    ) -> Result<Vec<PendingEvent>, StoreError> {
        let mut conn = self.single("notifications").await?;
        let reply: Result<Value, redis::RedisError> = redis::cmd("XPENDING")
            .arg(stream)
            .arg(DELIVER_GROUP)
            .arg("IDLE")
            .arg(duration_ms(min_idle))
            .arg("-")
            .arg("+")
            .arg(count)
            .query_async(&mut conn)
            .await;
        match reply {
            Ok(reply) => parse_pending(reply),
            // No stream or group yet: nothing pending.
            Err(e) if e.code() == Some("NOGROUP") => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes the entries `ids` of `stream` over for `consumer`, those still
    /// idle for `min_idle` (another replica may have taken one meanwhile).
    pub async fn take_events(
        &self,
        stream: &str,
        consumer: &str,
        min_idle: Duration,
        ids: &[String],
    ) -> Result<Vec<EventRecord>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.single("notifications").await?;
        let reply: Value = redis::cmd("XCLAIM")
            .arg(stream)
            .arg(DELIVER_GROUP)
            .arg(consumer)
            .arg(duration_ms(min_idle))
            .arg(ids)
            .query_async(&mut conn)
            .await?;
        Ok(parse_entries(reply))
    }

    /// Acknowledges the entries `ids` of `stream` and removes them: they
    /// were delivered, or given up.
    pub async fn events_done(&self, stream: &str, ids: &[&str]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut conn = self.single("notifications").await?;
        let mut pipe = redis::pipe();
        pipe.cmd("XACK")
            .arg(stream)
            .arg(DELIVER_GROUP)
            .arg(ids)
            .ignore()
            .cmd("XDEL")
            .arg(stream)
            .arg(ids)
            .ignore();
        pipe.query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Removes `consumer` (a forgotten replica) from the group of `stream`
    /// when it holds no entry: one it still holds stays, for another
    /// replica to take over.
    pub async fn drop_event_consumer(
        &self,
        stream: &str,
        consumer: &str,
    ) -> Result<(), StoreError> {
        self.drop_idle_consumer("notifications", stream, DELIVER_GROUP, consumer)
            .await
    }

    /// Deletes `consumer` from `group` on `stream` unless entries are still
    /// pending for it (another replica takes those over first); nothing to
    /// do without the stream or the group.
    pub(super) async fn drop_idle_consumer(
        &self,
        what: &'static str,
        stream: &str,
        group: &str,
        consumer: &str,
    ) -> Result<(), StoreError> {
        let mut conn = self.single(what).await?;
        let pending: Result<Value, redis::RedisError> = redis::cmd("XPENDING")
            .arg(stream)
            .arg(group)
            .arg("-")
            .arg("+")
            .arg(1)
            .arg(consumer)
            .query_async(&mut conn)
            .await;
        match pending {
            Ok(Value::Array(entries)) if entries.is_empty() => {}
            Err(e) if e.code() == Some("NOGROUP") => return Ok(()),
            Ok(_) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        redis::cmd("XGROUP")
            .arg("DELCONSUMER")
            .arg(stream)
            .arg(group)
            .arg(consumer)
            .query_async::<i64>(&mut conn)
            .await?;
        Ok(())
    }

    /// Notes a delivery through `channel` that the receiver took, at Redis
    /// ms `at_ms`.
    pub async fn note_delivered(&self, channel: &str, at_ms: i64) -> Result<(), StoreError> {
        let mut conn = self.single("notifications").await?;
        redis::cmd("HSET")
            .arg(self.keys.notify_health())
            .arg(format!("{channel}:ok"))
            .arg(at_ms)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// Notes a failed delivery attempt through `channel`.
    pub async fn note_failed(
        &self,
        channel: &str,
        failure: &DeliveryFailure,
    ) -> Result<(), StoreError> {
        let mut conn = self.single("notifications").await?;
        let json =
            serde_json::to_string(failure).expect("a failure serialises: strings and numbers");
        redis::cmd("HSET")
            .arg(self.keys.notify_health())
            .arg(format!("{channel}:failed"))
            .arg(json)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// The last delivery through every channel noted in Redis, by name;
    /// a field that does not read (a name that cannot be a channel's, a
    /// record cronlease did not write) is named in a warning and left out.
    pub async fn channel_health(&self) -> Result<Vec<ChannelHealth>, StoreError> {
        let fields = self.hash(&self.keys.notify_health()).await?;
        let mut by_name: std::collections::BTreeMap<String, ChannelHealth> =
            std::collections::BTreeMap::new();
        for (field, value) in fields {
            let parsed = field.rsplit_once(':').and_then(|(name, what)| {
                let valid = crate::config::is_channel_name(name);
                match what {
                    "ok" if valid => value.parse::<i64>().ok().map(|ms| (name, Some(ms), None)),
                    "failed" if valid => serde_json::from_str::<DeliveryFailure>(&value)
                        .ok()
                        .map(|f| (name, None, Some(f))),
                    _ => None,
                }
            });
            let Some((name, ok_ms, failure)) = parsed else {
                tracing::warn!(
                    key = %self.keys.notify_health(),
                    field = %crate::inert::escape(&field.chars().take(100).collect::<String>()),
                    "unreadable notification health record in Redis; left out"
                );
                continue;
            };
            let health = by_name
                .entry(name.to_string())
                .or_insert_with(|| ChannelHealth {
                    channel: name.to_string(),
                    ok_ms: None,
                    failure: None,
                });
            health.ok_ms = health.ok_ms.or(ok_ms);
            if failure.is_some() {
                health.failure = failure;
            }
        }
        Ok(by_name
            .into_values()
            .map(|mut health| {
                // A failure before the last delivery is over.
                if let (Some(ok), Some(failure)) = (health.ok_ms, &health.failure)
                    && failure.at_ms <= ok
                {
                    health.failure = None;
                }
                health
            })
            .collect())
    }

    /// The dead man's switch of `job` (overdue.lua): true when this call
    /// wrote the `overdue` event.
    pub async fn check_overdue(
        &self,
        job: &str,
        within: Duration,
        notices: &Notices,
    ) -> Result<bool, StoreError> {
        let mut conn = self.single("notifications").await?;
        let told: i64 = self
            .scripts
            .overdue
            .key(self.keys.state(job))
            .key(self.keys.events(job))
            .arg(duration_ms(within))
            .arg(notices.arg())
            .invoke_async(&mut conn)
            .await?;
        Ok(told == 1)
    }

    /// Tells once that `replica` stopped (replica_dead.lua): true when this
    /// call wrote the `replica_dead` event.
    pub async fn tell_replica_dead(
        &self,
        replica: &str,
        last_seen_ms: i64,
        silent_ms: i64,
        notices: &Notices,
    ) -> Result<bool, StoreError> {
        let mut conn = self.single("notifications").await?;
        let told: i64 = self
            .scripts
            .replica_dead
            .key(self.keys.replicas())
            .key(self.keys.replicas_told())
            .key(self.keys.replica_events())
            .arg(replica)
            .arg(last_seen_ms)
            .arg(silent_ms)
            .arg(notices.arg())
            .invoke_async(&mut conn)
            .await?;
        Ok(told == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn an_entry_reads_its_fields_and_skips_what_does_not_read() {
        let entry = Value::Array(vec![
            bulk("1700000000000-0"),
            Value::Array(
                [
                    "event", "failed", "channel", "ops", "job", "draw", "tick", "17", "fence", "x",
                    "attempt", "2", "output", "", "unknown", "1",
                ]
                .into_iter()
                .map(bulk)
                .collect(),
            ),
        ]);
        let record = parse_entry(entry).expect("an entry");
        assert_eq!(record.written_ms(), 1_700_000_000_000);
        assert_eq!(record.event, "failed");
        assert_eq!(record.job.as_deref(), Some("draw"));
        assert_eq!(record.tick_ms, Some(17));
        assert_eq!(record.fence, None, "a fence that is not a number is none");
        assert_eq!(record.attempt, Some(2));
        assert_eq!(record.output, None, "an empty output is none");
        assert!(parse_entry(Value::Array(vec![bulk("1-0"), Value::Nil])).is_none());
    }

    #[test]
    fn an_events_key_names_its_job_and_no_other_key_does() {
        let keys = Keys::new("cl");
        assert_eq!(keys.job_of_events(&keys.events("draw")), Some("draw"));
        assert_eq!(keys.job_of_events(&keys.runs("draw")), None);
        assert_eq!(keys.job_of_events(&keys.replica_events()), None);
        assert_eq!(keys.job_of_events("other:{draw}:events"), None);
    }

    #[test]
    fn rules_are_one_argument_and_none_without_channels_or_events() {
        let keys = Keys::new("cl");
        let ops = vec!["ops".to_string(), "mail".to_string()];
        let notices = |events: &[&str], channels: &[String]| {
            Notices::new(
                &keys,
                &NoticeRules {
                    job: "draw",
                    events,
                    channels,
                    repeat_every: Duration::from_secs(3600),
                    late_after: Some(Duration::from_secs(90)),
                },
            )
        };
        assert_eq!(
            notices(&["failed", "recovered"], &ops).arg(),
            "draw|cl:notify|failed,recovered|ops,mail|3600000|90000"
        );
        assert!(notices(&[], &ops).is_none());
        assert!(notices(&["failed"], &[]).is_none());
    }
}
