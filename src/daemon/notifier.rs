//! The notifier: delivers the notification events the scripts wrote (see
//! `store::events`), as one consumer of the replicas' group on each events
//! stream, and keeps the dead man's switch of every job that has one.
//!
//! A script that writes events publishes the stream's key; the notifier
//! reads that stream at once. Every [`SWEEP_EVERY`] it also visits every
//! stream it knows: new entries whose wake-up it missed, and entries read
//! but not acknowledged — its own failed deliveries and those of a replica
//! that died between reading and acknowledging — once they have been idle
//! for their backoff. An entry is acknowledged (and deleted) when its
//! receiver took it, refused it for good, or `retry_for` passed. So each
//! event is delivered at least once, and more than once only when a
//! replica dies (or its send outlives the backoff) between sending and
//! acknowledging, with the same idempotency key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::ctx::Ctx;
use super::notices::{Subject, event_streams, job_notices, subject_of};
use super::time::pause;
use super::wake::{Woken, wait};
use crate::config::EventKind;
use crate::config::Job;
use crate::inert::escape;
use crate::notify::{Channels, Event, SendError};
use crate::store::{DeliveryFailure, EventRecord, GaveUp, PendingEvent, StoreError};
use crate::telemetry;

/// How often every known stream is visited (missed wake-ups, retries,
/// entries of dead readers).
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Entries read from one stream at once.
const BATCH: usize = 64;

/// The shortest wait before an unacknowledged entry is sent again; the
/// wait doubles with each attempt up to [`MAX_BACKOFF`]. Never shorter
/// than the longest channel's timeout and this, so that a send still in
/// flight is not taken over.
const MIN_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How often a dead man's switch is looked at, at most.
const OVERDUE_EVERY: Duration = Duration::from_secs(10);

/// Delivers notification events until `cancel`; then one last pass over
/// what was written meanwhile, within [`SWEEP_EVERY`].
pub(super) async fn notifier(ctx: Arc<Ctx>, channels: Arc<Channels>, cancel: CancellationToken) {
    let notifier = Notifier::new(ctx, channels);
    let mut next_sweep = Instant::now();
    let mut next_overdue = Instant::now();
    loop {
        let mut pubsub = match notifier.ctx.store.notify_subscriber().await {
            Ok(pubsub) => Some(pubsub),
            Err(e) => {
                debug!(error = %e, "cannot subscribe to notification wake-ups yet");
                None
            }
        };
        let mut messages = pubsub.as_mut().map(|p| p.on_message());
        loop {
            match wait(messages.as_mut(), next_sweep.min(next_overdue), &cancel).await {
                Woken::Cancelled => {
                    let last = notifier.sweep(Visit::NewOnly);
                    let _ = tokio::time::timeout(SWEEP_EVERY, last).await;
                    return;
                }
                Woken::Unsubscribed => break,
                Woken::Message(stream) => {
                    if let Some(stream) = stream
                        && let Some(subject) = notifier.subject_of(&stream)
                    {
                        notifier.visit(&stream, &subject, Visit::NewOnly).await;
                    }
                    continue;
                }
                Woken::Due => {}
            }
            let now = Instant::now();
            if now >= next_overdue {
                notifier.check_overdue().await;
                next_overdue = now + notifier.overdue_period();
            }
            if now >= next_sweep {
                notifier.sweep(Visit::NewAndPending).await;
                next_sweep = now + SWEEP_EVERY;
                if messages.is_none() {
                    // Not subscribed: try again, the sweeps meanwhile
                    // deliver what wake-ups would have.
                    break;
                }
            }
        }
        if !pause(Duration::from_millis(200), &cancel).await {
            return;
        }
    }
}

/// What a visit of a stream looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Visit {
    /// Entries no reader read yet.
    NewOnly,
    /// Those, and entries read but not acknowledged whose backoff passed.
    NewAndPending,
}

/// What the notifier knows besides the replica's context.
struct Notifier {
    ctx: Arc<Ctx>,
    channels: Arc<Channels>,
    /// The shortest wait before an entry is sent again.
    min_backoff: Duration,
}

impl Notifier {
    fn new(ctx: Arc<Ctx>, channels: Arc<Channels>) -> Notifier {
        let min_backoff = channels
            .longest_timeout()
            .saturating_add(Duration::from_secs(1))
            .max(MIN_BACKOFF);
        Notifier {
            ctx,
            channels,
            min_backoff,
        }
    }

    /// Every stream this replica delivers from.
    fn streams(&self) -> BTreeMap<String, Subject> {
        let table = self.ctx.jobs.borrow().clone();
        event_streams(self.ctx.store.keys(), &table, &self.ctx.config)
    }

    /// The subject of `stream`, a key a wake-up named.
    fn subject_of(&self, stream: &str) -> Option<Subject> {
        let table = self.ctx.jobs.borrow().clone();
        subject_of(self.ctx.store.keys(), &table, &self.ctx.config, stream)
    }

    async fn sweep(&self, visit: Visit) {
        for (stream, subject) in self.streams() {
            self.visit(&stream, &subject, visit).await;
        }
    }

    /// Delivers what `stream` holds for this replica: new entries, and with
    /// [`Visit::NewAndPending`] those whose backoff passed.
    async fn visit(&self, stream: &str, subject: &Subject, visit: Visit) {
        let store = &self.ctx.store;
        let consumer = &self.ctx.identity.replica;
        let mut records = match store.read_events(stream, consumer, BATCH).await {
            Ok(records) => records,
            Err(e) => return self.store_failed(&e),
        };
        if visit == Visit::NewAndPending {
            match store.pending_events(stream, self.min_backoff, BATCH).await {
                Ok(pending) => {
                    let due: Vec<String> = pending
                        .iter()
                        .filter(|p| p.idle >= self.backoff(p))
                        .map(|p| p.id.clone())
                        .collect();
                    match store
                        .take_events(stream, consumer, self.min_backoff, &due)
                        .await
                    {
                        Ok(taken) => records.extend(taken),
                        Err(e) => self.store_failed(&e),
                    }
                }
                Err(e) => self.store_failed(&e),
            }
        }
        let sends = records
            .into_iter()
            .map(|record| self.deliver(stream, subject, record));
        let done: Vec<String> = futures_util::future::join_all(sends)
            .await
            .into_iter()
            .flatten()
            .collect();
        let done: Vec<&str> = done.iter().map(String::as_str).collect();
        if let Err(e) = store.events_done(stream, &done).await {
            // Left pending: sent again after their backoff, same keys.
            self.store_failed(&e);
        }
    }

    /// How long an entry read `deliveries` times waits before it is sent
    /// again.
    fn backoff(&self, pending: &PendingEvent) -> Duration {
        let doublings = u32::try_from(pending.deliveries.saturating_sub(1)).unwrap_or(u32::MAX);
        self.min_backoff
            .saturating_mul(2u32.saturating_pow(doublings.min(16)))
            .min(MAX_BACKOFF.max(self.min_backoff))
    }

    fn store_failed(&self, error: &StoreError) {
        debug!(error = %error, "notifications: Redis did not answer; retrying later");
    }

    /// Sends one entry; its id when it is done with (delivered, refused for
    /// good, or given up), None when it is to be sent again.
    async fn deliver(
        &self,
        stream: &str,
        subject: &Subject,
        record: EventRecord,
    ) -> Option<String> {
        let age = Duration::from_millis(
            u64::try_from(self.ctx.clock.now_ms() - record.written_ms()).unwrap_or(0),
        );
        let retry_for = self.ctx.config.daemon.notify.retry_for;
        // `test` is `notify test`'s alone: no script writes it.
        let Some(kind) = EventKind::parse(&record.event).filter(|k| *k != EventKind::Test) else {
            warn!(stream = %escape(stream), id = %escape(&record.id), event = %escape(&record.event), "dropping a notification event cronlease did not write (unknown event)");
            metrics::counter!(telemetry::UNTRUSTED_DATA, "source" => "events", "field" => "event")
                .increment(1);
            return Some(record.id);
        };
        let Some(channel) = self.channels.get(&record.channel) else {
            // Another replica may have the channel (a config being rolled
            // out); dropped once nobody delivered it within retry_for.
            if age > retry_for {
                warn!(channel = %escape(&record.channel), event = kind.as_str(), "dropping a notification for a channel no replica delivered within retry_for");
                return Some(record.id);
            }
            return None;
        };
        let event = event_of(subject, kind, &record);
        let dashboard_url = self.ctx.config.daemon.notify.dashboard_url.as_deref();
        let result = channel.send(&event, dashboard_url).await;
        let counted = |result: &'static str| {
            metrics::counter!(telemetry::NOTIFICATIONS, "channel" => record.channel.clone(), "event" => kind.as_str(), "result" => result).increment(1);
        };
        match result {
            Ok(receipt) => {
                counted("delivered");
                info!(channel = %record.channel, event = kind.as_str(), subject = subject.as_str(), key = %event.key, answer = %escape(&receipt.answer), "notification delivered");
                if let Err(e) = self
                    .ctx
                    .store
                    .note_delivered(&record.channel, self.ctx.clock.now_ms())
                    .await
                {
                    self.store_failed(&e);
                }
                Some(record.id)
            }
            Err(error) => {
                let gave_up = if error.is_permanent() || age > retry_for {
                    GaveUp::Dropped
                } else {
                    GaveUp::Retrying
                };
                self.failed(&record, &event, &error, gave_up).await;
                counted(match gave_up {
                    GaveUp::Dropped => "dropped",
                    GaveUp::Retrying => "retrying",
                });
                (gave_up == GaveUp::Dropped).then_some(record.id)
            }
        }
    }

    /// Logs and notes a failed delivery.
    async fn failed(
        &self,
        record: &EventRecord,
        event: &Event,
        error: &SendError,
        gave_up: GaveUp,
    ) {
        let kind = event.kind;
        let text: String = error.to_string().chars().take(300).collect();
        match gave_up {
            GaveUp::Dropped => {
                warn!(channel = %record.channel, event = kind.as_str(), error = %escape(&text), "notification not delivered, and given up")
            }
            GaveUp::Retrying => {
                warn!(channel = %record.channel, event = kind.as_str(), error = %escape(&text), "notification not delivered; retrying")
            }
        }
        let failure = DeliveryFailure {
            at_ms: self.ctx.clock.now_ms(),
            event: kind.as_str().to_string(),
            job: event.job.clone(),
            error: text,
            gave_up,
        };
        if let Err(e) = self.ctx.store.note_failed(&record.channel, &failure).await {
            self.store_failed(&e);
        }
    }

    /// The jobs with a dead man's switch.
    fn watched(&self) -> Vec<Arc<Job>> {
        let table = self.ctx.jobs.borrow().clone();
        table
            .values()
            .filter(|job| {
                job.notify.expect_success_within.is_some() && !job.notify.channels.is_empty()
            })
            .cloned()
            .collect()
    }

    /// A quarter of the shortest switch, within [100 ms, `OVERDUE_EVERY`].
    fn overdue_period(&self) -> Duration {
        self.watched()
            .iter()
            .filter_map(|job| job.notify.expect_success_within)
            .min()
            .map_or(OVERDUE_EVERY, |within| within / 4)
            .clamp(Duration::from_millis(100), OVERDUE_EVERY)
    }

    /// Looks at every dead man's switch (each writes its event at most
    /// once per silence, whoever looks).
    async fn check_overdue(&self) {
        for job in self.watched() {
            let Some(within) = job.notify.expect_success_within else {
                continue;
            };
            let notices = job_notices(self.ctx.store.keys(), &job);
            match self
                .ctx
                .store
                .check_overdue(&job.name, within, &notices)
                .await
            {
                Ok(true) => {
                    warn!(job = %job.name, within = %humantime::format_duration(within), "no ok outcome within expect_success_within: told overdue")
                }
                Ok(false) => {}
                Err(e) => self.store_failed(&e),
            }
        }
    }
}

/// The event a record tells, with its idempotency key: the stream's
/// subject and the entry id, the same for every attempt and every replica.
/// The record's own `job` is not trusted: the stream says whose it is.
fn event_of(subject: &Subject, kind: EventKind, record: &EventRecord) -> Event {
    Event {
        kind,
        key: format!("cronlease-{}-{}", subject.as_str(), record.id),
        job: match subject {
            Subject::Job(job) => Some(job.clone()),
            Subject::Replicas => None,
        },
        tick_ms: record.tick_ms,
        run_id: record.run_id.clone(),
        fence: record.fence,
        replica: record.replica.clone(),
        status: record.status.clone(),
        attempt: record.attempt,
        output_tail: record.output.clone(),
        occurred_ms: record.written_ms(),
        detail: Some(detail(kind, record)),
    }
}

/// One sentence on what happened, from the record's facts.
fn detail(kind: EventKind, record: &EventRecord) -> String {
    let at = |ms: Option<i64>| ms.map_or_else(|| "?".to_string(), super::time::rfc3339);
    let count = record.count.unwrap_or(1);
    match kind {
        EventKind::Failed | EventKind::Timeout | EventKind::LostLease | EventKind::Abandoned
            if count > 1 =>
        {
            format!(
                "{} ({}); still failing: {count} failures in a row since {}",
                kind.as_str(),
                record.status.as_deref().unwrap_or("?"),
                at(record.failing_since_ms)
            )
        }
        EventKind::Failed => "the run failed".to_string(),
        EventKind::Timeout => "the run ran past its timeout and was stopped".to_string(),
        EventKind::LostLease => "the run lost its lease and was stopped".to_string(),
        EventKind::Abandoned => {
            "the replica holding the run stopped renewing its lease; recorded abandoned".to_string()
        }
        EventKind::Recovered => format!(
            "ok again after {count} failure(s) since {}",
            at(record.failing_since_ms)
        ),
        EventKind::Missed
            if record.reason == Some(crate::store::MissedReason::NoMatchingReplica) =>
        {
            format!(
                "tick {} missed: no live replica had the tags its run_on asks for (no_matching_replica)",
                at(record.tick_ms)
            )
        }
        EventKind::Missed => format!(
            "{count} tick(s) nobody claimed, from {} to {}",
            at(record.tick_ms),
            at(record.last_tick_ms.or(record.tick_ms))
        ),
        EventKind::Late => format!(
            "started {} after its tick",
            humantime::format_duration(Duration::from_millis(
                u64::try_from(record.late_ms.unwrap_or(0)).unwrap_or(0)
            ))
        ),
        EventKind::Overdue => format!(
            "no ok outcome for {} (since {})",
            humantime::format_duration(Duration::from_millis(
                u64::try_from(record.within_ms.unwrap_or(0)).unwrap_or(0)
            )),
            at(record.ok_since_ms)
        ),
        EventKind::ReplicaDead => format!(
            "replica {} on {} last seen {}",
            record.replica.as_deref().unwrap_or("?"),
            record.host.as_deref().unwrap_or("?"),
            at(record.last_seen_ms)
        ),
        _ => kind.as_str().to_string(),
    }
}
