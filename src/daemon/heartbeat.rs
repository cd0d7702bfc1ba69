//! The heartbeat task: every `heartbeat`, this replica's record goes to
//! Redis and everyone's comes back; from them the clock offset, the epoch
//! (state loss), the live replicas the claims rank among, the runs of dead
//! replicas to sweep, and replicas silent long enough to forget.

use super::ctx::Ctx;
use super::notices::{event_streams, replica_notices};
use super::runs::{start_reruns, sweep};
use super::state::{Drain, LiveReplica, OperatorMark};
use super::table::JobTable;
use crate::clock::local_now_us;
use crate::membership::{DrainState, Heartbeat};
use crate::store::REPLICA_FORGET_AFTER;
use crate::store::ServerTime;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::store::Epoch;
use serde::de::IgnoredAny;

/// The heartbeat reads Redis time (for the clock offset) every this many
/// beats.
pub(super) const CLOCK_EVERY_N_HEARTBEATS: u64 = 6;

/// What the heartbeat remembers from one beat to the next.
struct Beats {
    /// The epoch this replica creates if Redis has none; replaced by a
    /// fresh one once used.
    new_epoch: String,
    /// The epoch last seen, per Redis master (one but with `quorum`).
    epoch_seen: HashMap<String, String>,
    count: u64,
    /// Replicas whose record did not parse, named once each in the log.
    unreadable: std::collections::HashSet<String>,
    /// Where the job table's definition hashes (`Keys::replica_jobs`)
    /// stand: hashed and written again only when a reload replaces the
    /// table or Redis lost them, not at every beat (100,000 jobs take
    /// about a second to hash, and are ~2.8 MB).
    hashes: Hashes,
    /// Silences of other replicas (replica, its last `last_seen_ms`) told
    /// as `replica_dead`, or found told: not asked again.
    told_dead: std::collections::HashSet<(String, i64)>,
    /// The drain state the last record written told (see
    /// [`own_record`]): a change is announced to the others at once.
    drain_told: Option<DrainState>,
}

/// This replica's job hashes in Redis.
enum Hashes {
    /// Not made for the current table yet (or Redis lost them).
    Unknown,
    /// Made for this table, as JSON, and not stored yet: kept until they
    /// are (Redis may be away for many beats).
    Pending(Arc<JobTable>, Arc<str>),
    /// Redis has them for this table.
    Stored(Arc<JobTable>),
}

/// The gap between a replica's first two heartbeats; each next gap is
/// twice the last, up to `[daemon] heartbeat`.
const FIRST_GAP: Duration = Duration::from_millis(250);

/// Heartbeats every `[daemon] heartbeat`, and at once when asked
/// (`Ctx::heartbeat_now`). The first beats come quickly (at start, then
/// 0.25, 0.75, 1.75, 3.75 s… after it): replicas started together each
/// write their record at their first beat, and the first to beat finds
/// none of the others. Until its next beat it counts itself alone, ranks
/// itself first for every tick and claims them all: with many jobs a
/// second and a long heartbeat, a burst of needless claims lasting
/// seconds.
pub(super) async fn heartbeat_loop(ctx: Arc<Ctx>, cancel: CancellationToken) {
    let period = ctx.config.daemon.heartbeat;
    let mut gap = FIRST_GAP.min(period);
    let mut next = Instant::now();
    let mut beats = Beats {
        new_epoch: Uuid::new_v4().to_string(),
        epoch_seen: HashMap::new(),
        count: 0,
        unreadable: std::collections::HashSet::new(),
        hashes: Hashes::Unknown,
        told_dead: std::collections::HashSet::new(),
        drain_told: None,
    };
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep_until(next) => {
                // Counted from now, not from when it was due: a late beat
                // (a stalled process) is not followed by a burst.
                next = Instant::now() + gap;
                gap = (gap * 2).min(period);
            }
            () = ctx.heartbeat_now.notified() => {}
        }
        beat(&ctx, &mut beats).await;
    }
}

/// One heartbeat: send ours, read everyone's, act on what they say.
async fn beat(ctx: &Arc<Ctx>, beats: &mut Beats) {
    let (record, drain) = own_record(ctx).await;
    let table = ctx.jobs.borrow().clone();
    let jobs = match &beats.hashes {
        Hashes::Stored(stored) if Arc::ptr_eq(stored, &table) => None,
        Hashes::Pending(hashed, json) if Arc::ptr_eq(hashed, &table) => Some(json.clone()),
        _ => {
            // Off the runtime's threads: a large table takes a while.
            let hashed = table.clone();
            let Ok(json) = tokio::task::spawn_blocking(move || job_hashes(&hashed)).await else {
                return;
            };
            let json: Arc<str> = json.into();
            beats.hashes = Hashes::Pending(table.clone(), json.clone());
            Some(json)
        }
    };
    let sent = local_now_us();
    // The clock offset drifts slowly: measure it every few heartbeats (an
    // idle replica sends as few commands as it can).
    let time = if beats.count.is_multiple_of(CLOCK_EVERY_N_HEARTBEATS) {
        ServerTime::Read
    } else {
        ServerTime::Skip
    };
    beats.count += 1;
    let reply = match ctx
        .store
        .heartbeat(
            &ctx.identity.replica,
            &record,
            jobs.as_deref(),
            &beats.new_epoch,
            time,
        )
        .await
    {
        Ok(reply) => reply,
        Err(e) => {
            ctx.redis.failed(&e);
            return;
        }
    };
    // Written now, or found there; if Redis lost them, the next beat
    // writes them again.
    if reply.jobs_stored {
        beats.hashes = Hashes::Stored(table);
    } else if matches!(beats.hashes, Hashes::Stored(_)) {
        beats.hashes = Hashes::Unknown;
    }
    if let Some(server_us) = reply.server_us {
        ctx.clock.observe(server_us, sent, local_now_us());
    }
    let server_ms = reply
        .server_us
        .map_or_else(|| ctx.clock.now_ms(), |us| us.div_euclid(1000));
    ctx.redis.answered();
    note_epochs(ctx, beats, &reply.epochs);
    tend_drain(ctx, beats, drain, &reply.drained).await;
    let others = read_others(ctx, beats, &reply.replicas);
    ctx.claims
        .live
        .replace(rendezvous_replicas(ctx, &others, &reply.drained, server_ms));
    for (replica, record) in &others {
        tend_silent(ctx, replica, record, server_ms).await;
    }
    tell_dead(ctx, beats, &others, server_ms).await;
    tend_pauses(ctx, server_ms).await;
}

/// The replicas the rendezvous ranks: the live ones but the drained
/// (they claim nothing, so no tick waits for a drained replica's turn),
/// with their tags; this one always, as far as it knows itself.
fn rendezvous_replicas(
    ctx: &Ctx,
    others: &[(&str, Heartbeat<serde::de::IgnoredAny>)],
    drained: &[String],
    server_ms: i64,
) -> Vec<LiveReplica> {
    let mut live: Vec<LiveReplica> = others
        .iter()
        .filter(|(_, record)| record.is_alive(server_ms) && record.drain.is_none())
        .filter(|(id, _)| !drained.iter().any(|d| d == id))
        .map(|(id, record)| LiveReplica {
            id: id.to_string(),
            tags: record.tags.clone(),
        })
        .collect();
    if !live.iter().any(|r| r.id == ctx.identity.replica) {
        live.push(LiveReplica {
            id: ctx.identity.replica.clone(),
            tags: ctx.config.daemon.tags.clone(),
        });
    }
    live
}

/// How many ended timed pauses one heartbeat ends at most (the next
/// heartbeats end the rest; a claim ends its job's first anyway).
const PAUSE_ENDS_PER_BEAT: usize = 100;

/// Reads the cluster's pause record (its change makes the next heartbeat
/// come at once, so that it acknowledges the new record soon), and ends
/// the timed pauses whose end has come: the cluster's, and the jobs' that
/// `Keys::pause_ends` lists. Each end is recorded once whichever replica
/// gets there first (the scripts compare the pause they end), so every
/// live replica may try.
pub(super) async fn tend_pauses(ctx: &Ctx, server_ms: i64) {
    read_cluster_pause(ctx).await;
    if let Some(record) = ctx.claims.cluster_pause()
        && record.paused
        && record.until_ms.is_some_and(|until| until <= server_ms)
    {
        match ctx.store.end_cluster_pause(&record.id).await {
            Ok(true) => {
                info!(pause = %record.id, "the cluster's timed pause ended");
                read_cluster_pause(ctx).await;
            }
            Ok(false) => {}
            Err(e) => debug!(error = %e, "cannot end the cluster's timed pause yet"),
        }
    }
    let ended = match ctx.store.pauses_ended(server_ms, PAUSE_ENDS_PER_BEAT).await {
        Ok(ended) => ended,
        Err(e) => {
            debug!(error = %e, "cannot read the timed pauses that ended");
            return;
        }
    };
    for (job, until_ms) in ended {
        match ctx.store.end_pause(&job, until_ms).await {
            Ok(true) => info!(job = %job, "the job's timed pause ended"),
            Ok(false) => {}
            Err(e) => debug!(job = %job, error = %e, "cannot end the job's timed pause yet"),
        }
    }
}

/// Reads the cluster's pause record into the claims' copy; a change wakes
/// the heartbeat, whose record then names the new one.
pub(super) async fn read_cluster_pause(ctx: &Ctx) {
    match ctx.store.cluster_pause().await {
        Ok(record) => {
            let id = record.as_ref().map(|r| r.id.clone());
            let paused = record.as_ref().is_some_and(|r| r.paused);
            if ctx.claims.hold_cluster_pause(record) {
                info!(
                    pause = id.as_deref().unwrap_or("-"),
                    paused, "the cluster's pause record changed"
                );
                ctx.heartbeat_now.notify_one();
            }
        }
        Err(e) => debug!(error = %e, "cannot read the cluster's pause record"),
    }
}

/// Reads the cluster's pause and this replica's drain mark, before its
/// first claim.
pub(super) async fn read_holds(ctx: &Ctx) {
    read_cluster_pause(ctx).await;
    read_drain(ctx).await;
}

/// Reads this replica's drain mark: a replica an operator drained stays
/// drained across its restarts. Redis not answering leaves it in; its
/// first heartbeat reads the mark again.
async fn read_drain(ctx: &Ctx) {
    match ctx.store.drained().await {
        Ok(drained) if drained.contains_key(&ctx.identity.replica) => {
            ctx.drain.follow(OperatorMark::Drained);
            info!("drained by an operator (cronlease undrain puts it back): claiming nothing");
        }
        Ok(_) => {}
        Err(e) => debug!(error = %e, "cannot read this replica's drain mark yet"),
    }
}

/// Removes a forgotten replica from the consumer groups of the events
/// streams this replica knows (where it holds no entry).
async fn forget_event_consumer(ctx: &Ctx, replica: &str) {
    if ctx.store.is_quorum() {
        return;
    }
    let table = ctx.jobs.borrow().clone();
    for stream in event_streams(ctx.store.keys(), &table, &ctx.config).into_keys() {
        if let Err(e) = ctx.store.drop_event_consumer(&stream, replica).await {
            debug!(%replica, %stream, error = %e, "cannot remove a forgotten replica's notification consumer");
        }
    }
}

/// Tells of replicas silent past their `dead_after` (`replica_dead`, when
/// `[daemon] notify_on` has it): each silence once, whichever replica
/// notices first (replica_dead.lua).
async fn tell_dead(
    ctx: &Ctx,
    beats: &mut Beats,
    others: &[(&str, Heartbeat<IgnoredAny>)],
    server_ms: i64,
) {
    let dead: Vec<&(&str, Heartbeat<IgnoredAny>)> = others
        .iter()
        .filter(|(replica, record)| {
            record.silent_for_ms(server_ms) > record.dead_after_ms()
                && !beats
                    .told_dead
                    .contains(&(replica.to_string(), record.last_seen_ms))
        })
        .collect();
    if dead.is_empty() {
        return;
    }
    let notices = replica_notices(ctx.store.keys(), &ctx.config);
    if notices.is_none() {
        return;
    }
    for (replica, record) in dead {
        let silent_ms = record.silent_for_ms(server_ms);
        match ctx
            .store
            .tell_replica_dead(replica, record.last_seen_ms, silent_ms, &notices)
            .await
        {
            Ok(told) => {
                if told {
                    warn!(%replica, host = %record.host, silent_ms, "replica silent past its dead_after: told replica_dead");
                }
                beats
                    .told_dead
                    .insert((replica.to_string(), record.last_seen_ms));
            }
            Err(e) => debug!(%replica, error = %e, "cannot tell of a dead replica yet"),
        }
    }
    // Forgotten replicas need no memory.
    beats
        .told_dead
        .retain(|(replica, _)| others.iter().any(|(id, _)| id == replica));
}

/// Follows this replica's drain mark (`drained`: the replicas an operator
/// drained), and tells the others at once when the drain state its record
/// says changed, so that they rank without it (or with it) from then on.
async fn tend_drain(ctx: &Ctx, beats: &mut Beats, written: Option<DrainState>, drained: &[String]) {
    let mark = if drained.contains(&ctx.identity.replica) {
        OperatorMark::Drained
    } else {
        OperatorMark::Undrained
    };
    if ctx.drain.follow(mark) {
        match mark {
            OperatorMark::Drained => {
                info!("drained by an operator: claiming nothing; runs in flight go on")
            }
            OperatorMark::Undrained => info!("undrained by an operator: claiming again"),
        }
        // The record says so at once.
        ctx.heartbeat_now.notify_one();
    }
    if written != beats.drain_told {
        match ctx.store.announce_drain(&ctx.identity.replica).await {
            Ok(()) => beats.drain_told = written,
            Err(e) => debug!(error = %e, "cannot announce this replica's drain state yet"),
        }
    }
}

/// This replica's heartbeat record, as JSON (its job hashes apart: see
/// [`job_hashes`]), and the drain state it tells.
async fn own_record(ctx: &Ctx) -> (String, Option<DrainState>) {
    let runs = ctx.runs.watchdog.list();
    let drain = match (ctx.drain.get(), runs.is_empty()) {
        (Drain::Active, _) => None,
        (Drain::ByOperator | Drain::Stopping, true) => Some(DrainState::Drained),
        (Drain::ByOperator | Drain::Stopping, false) => Some(DrainState::Draining),
    };
    let record = Heartbeat {
        host: ctx.identity.host.clone(),
        pid: u64::from(ctx.identity.pid),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_ms: ctx.started_ms,
        last_seen_ms: ctx.clock.now_ms(),
        heartbeat_ms: own_heartbeat_ms(ctx),
        lease_ms: i64::try_from(ctx.config.daemon.lease.as_millis()).unwrap_or(i64::MAX / 8),
        config_hash: BTreeMap::new(),
        runs,
        containment: ctx.containment_name().map(str::to_string),
        cluster_pause: ctx.claims.cluster_pause().map(|p| p.id),
        drain,
        tags: ctx.config.daemon.tags.clone(),
        max_runs: ctx.capacity.max(),
    };
    (record.to_json(), drain)
}

/// The definition hash of each job of `table`, as JSON (job → hash), for
/// `Keys::replica_jobs`.
fn job_hashes(table: &JobTable) -> String {
    let hashes: BTreeMap<&str, String> = table
        .values()
        .map(|job| (job.name.as_str(), job.definition_hash()))
        .collect();
    serde_json::to_string(&hashes).expect("a map of strings is JSON")
}

fn own_heartbeat_ms(ctx: &Ctx) -> i64 {
    i64::try_from(ctx.config.daemon.heartbeat.as_millis()).unwrap_or(i64::MAX / 8)
}

/// A changed epoch means Redis lost its data: state loss. So does an epoch
/// this replica had to create again: the one it saw was gone. Each epoch
/// it creates is a new one, so a replica that saw the one it created
/// before finds this one changed too.
fn note_epochs(ctx: &Ctx, beats: &mut Beats, epochs: &[Epoch]) {
    for now in epochs {
        if now.created {
            beats.new_epoch = Uuid::new_v4().to_string();
        }
        match beats.epoch_seen.insert(now.node.clone(), now.epoch.clone()) {
            None if now.created => info!(epoch = %now.epoch, redis = %now.node, "created the deployment epoch"),
            Some(previous) if now.created || previous != now.epoch => ctx.redis.state_loss(
                None,
                &format!("the deployment epoch of {} changed from {previous} to {} (Redis restarted without its data, or failed over to a replica that lacked it)", now.node, now.epoch),
            ),
            _ => {}
        }
    }
}

/// The other replicas' records, without their definition hashes (which
/// only `status` reads); unreadable ones are named once and taken as
/// absent.
fn read_others<'r>(
    ctx: &Ctx,
    beats: &mut Beats,
    replicas: &'r [(String, String)],
) -> Vec<(&'r str, Heartbeat<IgnoredAny>)> {
    let mut others = Vec::with_capacity(replicas.len());
    for (id, raw) in replicas {
        if *id == ctx.identity.replica {
            continue;
        }
        match Heartbeat::parse_without_hashes(raw) {
            Ok(record) => others.push((id.as_str(), record)),
            Err(e) => {
                if beats.unreadable.insert(id.clone()) {
                    warn!(replica = %id, error = %e, "unreadable heartbeat record in Redis; that replica is taken as absent");
                }
            }
        }
    }
    others
}

/// A replica silent past its heartbeat and lease: its runs are swept on
/// every heartbeat for a while (a lease renewed just before it died expires
/// up to a lease later); after that it is just history, and after
/// [`REPLICA_FORGET_AFTER`] it is forgotten.
async fn tend_silent(
    ctx: &Arc<Ctx>,
    replica: &str,
    record: &Heartbeat<IgnoredAny>,
    server_ms: i64,
) {
    let silent_for = record.silent_for_ms(server_ms);
    if silent_for > REPLICA_FORGET_AFTER.as_millis() as i64 {
        match ctx.store.forget_replica(replica, record.last_seen_ms).await {
            Ok(true) => {
                info!(%replica, silent_ms = silent_for, "forgot a replica silent for longer than {}", humantime::format_duration(REPLICA_FORGET_AFTER));
                forget_event_consumer(ctx, replica).await;
            }
            Ok(false) => {}
            Err(e) => {
                debug!(%replica, error = %e, "cannot forget a long-silent replica yet")
            }
        }
        return;
    }
    // A drained replica's sweep would record them without a rerun: the
    // others sweep.
    if ctx.drain.is_out() {
        return;
    }
    let dead_after = record.dead_after_ms();
    let sweep_until = record.sweep_until_ms(own_heartbeat_ms(ctx));
    if silent_for <= dead_after || silent_for > sweep_until {
        return;
    }
    if !record.runs.is_empty() {
        debug!(%replica, silent_ms = silent_for, runs = record.runs.len(), "replica is silent; sweeping its runs");
    }
    for run in &record.runs {
        let job = ctx.jobs.borrow().get(&run.job).cloned();
        if let Some(job) = job {
            let runs = ctx.run_side();
            start_reruns(&runs, &job, sweep(&runs, &job).await);
        }
    }
}
