//! `status`: the report of the replicas and the jobs, read from their
//! heartbeats and each job's keys.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use chrono::DateTime;
use futures_util::{StreamExt as _, TryStreamExt as _};

use super::{
    BackfillLeft, BroadcastOutcome, BroadcastTick, JobStatus, LockStatus, Locks, OperatorError,
    READ_AHEAD, ReplicaStatus, StatusReport, groups, history, job_calendars, rfc3339,
};
use crate::config::Job;
use crate::membership::{DrainState, Heartbeat};
use crate::store::{RunningStatus, Store, StoreError};

/// How many outcomes `status` reads to find a broadcast job's latest
/// tick: enough for that many replicas.
const BROADCAST_OUTCOMES: usize = 256;

/// The latest tick of broadcast job `name` with an outcome, with its runs
/// in flight (`running`).
async fn broadcast_status(
    store: &Store,
    name: &str,
    running: &[RunningStatus],
) -> Result<Option<BroadcastTick>, OperatorError> {
    let Some((tick_ms, outcomes)) =
        history::broadcast_tick(store, name, BROADCAST_OUTCOMES).await?
    else {
        return Ok(None);
    };
    let ok = outcomes
        .iter()
        .filter(|o| o.status == crate::outcome::Status::Ok)
        .count();
    Ok(Some(BroadcastTick {
        tick: rfc3339(DateTime::from_timestamp_millis(tick_ms).unwrap_or_default()),
        tick_ms,
        ok,
        running: running.iter().filter(|r| r.tick_ms == tick_ms).count(),
        outcomes: outcomes
            .into_iter()
            .map(|o| BroadcastOutcome {
                replica: o.replica,
                status: o.status,
            })
            .collect(),
    }))
}

/// The status of replica `id` from its heartbeat record; `None` (and a
/// warning naming it) when the record does not parse.
fn parse_replica(id: &str, raw: &str, now_ms: i64) -> Option<ReplicaStatus> {
    let record = match Heartbeat::parse(raw) {
        Ok(record) => record,
        Err(e) => {
            tracing::warn!(replica = %id, error = %e, "unreadable heartbeat record in Redis; replica left out");
            return None;
        }
    };
    let alive = record.is_alive(now_ms);
    Some(ReplicaStatus {
        id: id.to_string(),
        host: record.host,
        pid: record.pid,
        version: record.version,
        started_ms: record.started_ms,
        last_seen_ms: record.last_seen_ms,
        alive,
        runs: record.runs,
        containment: record.containment,
        config_hash: record.config_hash,
        cluster_pause: record.cluster_pause,
        drain: record.drain,
        tags: record.tags,
        drained_by: None,
        max_runs: record.max_runs,
    })
}

/// Builds the status report. Jobs are the job table's (`jobs`: a config's,
/// or a running replica's) when there is one, else every job some
/// replica's heartbeat mentions. Drift: with a table, the replicas whose
/// hash of a job differs from the table's; without, those outside the
/// largest group of replicas that agree.
pub async fn status<J: Borrow<Job>>(
    store: &Store,
    jobs: Option<&BTreeMap<String, J>>,
    prefix: &str,
    locks: Locks<'_>,
) -> Result<StatusReport, OperatorError> {
    let now_ms = store.server_time_ms().await?;
    let groups = groups::groups_of(
        jobs.iter()
            .flat_map(|table| table.values())
            .map(|job| job.borrow()),
    );
    let replicas = read_replicas(store, now_ms).await?;
    let names = job_names(jobs, &replicas);
    let replicas_ref = &replicas;
    let jobs = futures_util::stream::iter(names)
        .map(|name| async move {
            let job = jobs.and_then(|table| table.get(&name)).map(Borrow::borrow);
            job_status(store, name, job, now_ms, replicas_ref).await
        })
        .buffered(READ_AHEAD)
        .try_collect()
        .await?;
    let names = match locks {
        Locks::Named(names) => names.to_vec(),
        Locks::Existing => store.lock_names().await?,
    };
    let mut held = Vec::with_capacity(names.len());
    for name in names {
        let holder = match store.lock_holder(&name).await {
            Ok(holder) => holder,
            // A holder record cronlease did not write: named, left out.
            Err(e @ StoreError::Protocol { .. }) => {
                tracing::warn!(lock = %name, error = %e, "unreadable lock record in Redis; lock left out");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        held.push(LockStatus {
            holder: holder.as_ref().map(|h| h.holder.clone()),
            host: holder.as_ref().map(|h| h.host.clone()),
            fence: holder.as_ref().map(|h| h.fence),
            since_ms: holder.as_ref().map(|h| h.since.as_millisecond()),
            time_left_ms: holder
                .as_ref()
                .map(|h| i64::try_from(h.time_left.as_millis()).unwrap_or(i64::MAX)),
            holds: holder.as_ref().map(|h| h.holds),
            name,
        });
    }
    let channels = store.channel_health().await?;
    let cluster_pause = store.cluster_pause().await?.filter(|p| p.holds(now_ms));
    let groups = groups::read_use(store, groups, now_ms).await?;
    Ok(StatusReport {
        prefix: prefix.to_string(),
        now_ms,
        cluster_pause,
        replicas,
        jobs,
        locks: held,
        channels,
        groups,
    })
}

/// Every replica whose heartbeat record parses, by id.
pub(super) async fn read_replicas(
    store: &Store,
    now_ms: i64,
) -> Result<Vec<ReplicaStatus>, OperatorError> {
    let mut replicas: Vec<ReplicaStatus> = store
        .hash(&store.keys().replicas())
        .await?
        .iter()
        .filter_map(|(id, raw)| parse_replica(id, raw, now_ms))
        .collect();
    replicas.sort_by(|a, b| a.id.cmp(&b.id));
    let drained = store.drained().await?;
    for replica in &mut replicas {
        if let Some(mark) = drained.get(&replica.id) {
            replica.drain.get_or_insert(DrainState::Draining);
            replica.drained_by = Some(mark.clone());
        }
    }
    if replicas.iter().any(|r| r.config_hash.is_empty()) {
        let stored = store.hash(&store.keys().replica_jobs()).await?;
        fill_job_hashes(&mut replicas, &stored);
    }
    Ok(replicas)
}

/// The definition hashes of the replicas whose records carry none, from
/// `stored` (`Keys::replica_jobs`: replica id → JSON); one that does not
/// parse is named and left out.
fn fill_job_hashes(replicas: &mut [ReplicaStatus], stored: &[(String, String)]) {
    for (id, raw) in stored {
        let Some(replica) = replicas
            .iter_mut()
            .find(|r| r.id == *id && r.config_hash.is_empty())
        else {
            continue;
        };
        match crate::membership::parse_job_hashes(raw) {
            Ok(hashes) => replica.config_hash = hashes,
            Err(e) => {
                tracing::warn!(replica = %id, error = %e, "unreadable job hashes in Redis; its drift is not shown");
            }
        }
    }
}

/// The jobs `status` reports: the table's, else every job some replica's
/// heartbeat names, sorted (a name no job can have is named in a warning
/// and left out: it would become a key).
pub(super) fn job_names<J>(
    jobs: Option<&BTreeMap<String, J>>,
    replicas: &[ReplicaStatus],
) -> Vec<String> {
    match jobs {
        Some(jobs) => jobs.keys().cloned().collect(),
        None => {
            let mut names: Vec<String> = replicas
                .iter()
                .flat_map(|r| r.config_hash.keys().cloned())
                .filter(|name| {
                    let valid = crate::config::is_name(name, 128);
                    if !valid {
                        tracing::warn!(job = %crate::inert::escape(name), "a replica's heartbeat names a job no table can have; left out");
                    }
                    valid
                })
                .collect();
            names.sort();
            names.dedup();
            names
        }
    }
}

/// One job's line of the report: its state and runs in flight from Redis,
/// its schedule and next tick from `job` (the config's, if any), and the
/// replicas whose definition differs.
async fn job_status(
    store: &Store,
    name: String,
    job: Option<&Job>,
    now_ms: i64,
    replicas: &[ReplicaStatus],
) -> Result<JobStatus, OperatorError> {
    let state = store.job_state(&name).await?;
    let running = store.running_runs(&name).await?;
    let broadcast = match job.map(|j| j.mode) {
        Some(crate::config::Mode::EveryReplica) => broadcast_status(store, &name, &running).await?,
        _ => None,
    };
    let left = store.backfill_left(&name).await?;
    let backfill = (left > 0).then_some(BackfillLeft {
        left,
        queued: state.backfill_queued.max(left),
    });
    let config_drift = drift(&name, job.map(|j| j.definition_hash()), replicas);
    let now = DateTime::from_timestamp_millis(now_ms).unwrap_or_default();
    let window = job
        .and_then(|j| j.schedule.as_ref())
        .map(|t| t.window())
        .unwrap_or_default();
    let pause = state.pause.as_ref().filter(|p| p.holds_at(now_ms));
    Ok(JobStatus {
        schedule: job
            .and_then(|j| j.schedule.as_ref())
            .map(|s| s.expression().to_string()),
        timezone: job
            .and_then(|j| j.schedule.as_ref())
            .map(|s| s.timezone().name().to_string()),
        next_tick: job
            .filter(|j| !runs_spent(j, state.runs_started))
            .and_then(|j| j.next_after(now))
            .map(rfc3339),
        after: job
            .and_then(|j| j.after.as_ref())
            .map(|a| a.upstreams.clone())
            .unwrap_or_default(),
        followers: job
            .map(|j| j.followers.iter().map(|f| f.job.clone()).collect())
            .unwrap_or_default(),
        warning: job.and_then(|j| {
            crate::config::job_warning(j, now).or_else(|| runs_warning(j, state.runs_started))
        }),
        unplaced: job.and_then(|j| placement_warning(j, replicas)),
        broadcast,
        run_on: job.map(|j| j.run_on.clone()).unwrap_or_default(),
        mode: job
            .map(|j| j.mode)
            .filter(|m| *m != crate::config::Mode::One),
        matching_replicas: matching_replicas(job.map_or(&[], |j| &j.run_on), replicas),
        active_from: window.from.map(rfc3339),
        active_until: window.until.map(rfc3339),
        max_runs: job.and_then(|j| j.max_runs),
        runs_started: state.runs_started,
        calendars: job.map(job_calendars).unwrap_or_default(),
        paused: pause.is_some(),
        paused_by: pause.and_then(|p| p.by.clone()),
        paused_at_ms: pause.and_then(|p| p.at_ms),
        paused_until_ms: pause.and_then(|p| p.until_ms),
        paused_reason: pause.and_then(|p| p.reason.clone()),
        running,
        last_outcome: state.last_outcome,
        missed_ticks: state.missed_ticks,
        config_drift,
        needs_repair: state.needs_repair,
        backfill,
        name,
    })
}

/// The live replicas, not drained, whose tags have every tag of
/// `run_on`: those that may start the job's runs.
fn matching_replicas(run_on: &[String], replicas: &[ReplicaStatus]) -> Vec<String> {
    replicas
        .iter()
        .filter(|r| r.alive && r.drain.is_none())
        .filter(|r| crate::config::tags_match(&r.tags, run_on))
        .map(|r| r.id.clone())
        .collect()
}

/// Why no run of `job` starts while no live replica has the tags its
/// `run_on` asks for: its ticks are recorded missed
/// (`no_matching_replica`).
fn placement_warning(job: &Job, replicas: &[ReplicaStatus]) -> Option<String> {
    if job.run_on.is_empty() || !matching_replicas(&job.run_on, replicas).is_empty() {
        return None;
    }
    Some(format!(
        "no live replica has tags {}: its ticks are recorded missed (no_matching_replica) until one with them runs",
        job.run_on.join(", ")
    ))
}

/// Whether `job` has started every run its `max_runs` allows.
fn runs_spent(job: &Job, runs_started: u64) -> bool {
    job.max_runs
        .is_some_and(|max| runs_started >= u64::from(max))
}

/// Why `job` will not run again when it has started its `max_runs` runs.
fn runs_warning(job: &Job, runs_started: u64) -> Option<String> {
    let max = job.max_runs?;
    runs_spent(job, runs_started).then(|| {
        format!(
            "the job has started {runs_started} runs of its schedule and max_runs is {max}: it will not run again; raise max_runs to let it run more"
        )
    })
}

/// The live replicas whose hash of `job` differs from `expected` (the
/// config's), or, without one, from the most common hash.
pub(super) fn drift(
    job: &str,
    expected: Option<String>,
    replicas: &[ReplicaStatus],
) -> Vec<String> {
    let hashes: Vec<(&str, &str)> = replicas
        .iter()
        .filter(|r| r.alive)
        .filter_map(|r| Some((r.id.as_str(), r.config_hash.get(job)?.as_str())))
        .collect();
    let reference = match expected {
        Some(hash) => hash,
        None => {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, hash) in &hashes {
                *counts.entry(hash).or_default() += 1;
            }
            match counts.into_iter().max_by_key(|(_, n)| *n) {
                Some((hash, _)) => hash.to_string(),
                None => return Vec::new(),
            }
        }
    };
    hashes
        .into_iter()
        .filter(|(_, hash)| *hash != reference)
        .map(|(id, _)| id.to_string())
        .collect()
}
