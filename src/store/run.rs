//! A run's life after its claim: renewals of its lease, the finish that
//! records its outcome (with the job's dedup window), the sweep of runs
//! whose holder died, and the missed ticks a claim jumped over.

use super::{Attempt, Claimant, Notices, Reply, Store, StoreError, append, as_int, duration_ms};
use crate::outcome::Outcome;
use redis::Script;

use std::time::Duration;

use redis::{RedisWrite, Value};

/// The finish script's keys: state, running, the run's lease, runs, done,
/// the job's lease, reruns, done_at, events (then the followers' inboxes).
const FINISH_KEYS: usize = 9;

/// The finish script's arguments, at most: 14 before the outcome's fields,
/// and up to 21 fields, name and value (`Outcome::each_stream_field`),
/// besides one per parameter of a job that has some.
const FINISH_ARGS: usize = 15 + 2 * 21;

/// Room for the finish's numbers, words and field names beside the keys,
/// ids, names and output counted one by one.
const FINISH_FIXED_BYTES: usize = 512;

/// How long a job's dedup window outlives its last outcome: a second
/// delivery of an outcome (a retry after a lost reply, a spooled copy) is
/// recognised as a duplicate while its run id is among the window's newest
/// [`dedup_entries`] and the job recorded an outcome less than this long
/// ago.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// The fewest run ids a job's dedup window remembers, however small its
/// `history`.
pub const DEDUP_MIN_ENTRIES: u32 = 100;

/// How many run ids a job's dedup window remembers: its `history` (at least
/// [`DEDUP_MIN_ENTRIES`]), so a job's keys in Redis hold at most about
/// 2 × `history` entries whatever its run rate. A delivery past the window
/// is recorded marked stale, never as a second current outcome.
pub fn dedup_entries(history: u32) -> u32 {
    history.max(DEDUP_MIN_ENTRIES)
}

/// One run's renewal, as the watchdog sends it.
#[derive(Debug, Clone)]
pub struct Renewal {
    pub job: String,
    pub run_id: String,
    pub lease_key: String,
}

/// How the finish script recorded an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// As the tick's current outcome.
    Current,
    /// As the tick's current outcome, though the run was no longer in
    /// flight in Redis: Redis lost the job's state after the run started
    /// (a restart without its data, a failover to a replica that lacked
    /// it), so nothing else can have recorded it.
    Restored,
    /// Marked stale: the run was no longer in flight in Redis and nothing
    /// was lost since it started, so it was recorded before: abandoned by
    /// a sweep after its lease lapsed, or this very outcome delivered
    /// before the dedup window forgot it.
    Stale,
    /// Not again: this outcome was recorded before (a retry, a spooled copy).
    Duplicate,
}

impl Recorded {
    /// Whether the outcome is now the run's current record.
    pub fn is_current(self) -> bool {
        matches!(self, Recorded::Current | Recorded::Restored)
    }
}

/// What the finish script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishReply {
    pub recorded: Recorded,
    /// The stream entry id.
    pub id: String,
    /// A pending rerun started for the caller now that the lease is free.
    pub rerun: Option<Rerun>,
}

/// Lets the finish script start a pending rerun of the job for the caller.
#[derive(Debug, Clone)]
pub struct RerunOffer<'a> {
    pub claimant: Claimant<'a>,
    pub new_run_id: &'a str,
}

/// A sweep request for one job.
#[derive(Debug, Clone)]
pub struct SweepRequest<'a> {
    pub job: &'a str,
    pub claimant: Claimant<'a>,
    /// The run id of a rerun, if the job wants abandoned runs rerun; None:
    /// they are only recorded.
    pub rerun: Option<&'a str>,
}

/// A rerun claimed by a sweep, for the caller to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rerun {
    pub tick_ms: i64,
    pub fence: u64,
    pub lease_key: String,
    pub started_ms: i64,
    /// What the first run carried besides its tick (outcome fields: a
    /// follower's root tick and upstreams, parameters).
    pub context: Vec<(String, String)>,
}

/// What a sweep found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepReply {
    pub abandoned: u32,
    /// Run ids whose `running` entry was not one cronlease wrote: moved to
    /// the job's quarantine hash (`Keys::quarantine`).
    pub quarantined: Vec<String>,
    pub rerun: Option<Rerun>,
}

/// The rerun a finish or a sweep claimed for us: four items from `from`
/// and its context, or none.
pub(super) fn parse_rerun(r: &Reply, from: usize) -> Result<Option<Rerun>, StoreError> {
    if r.len() < from + 4 {
        return Ok(None);
    }
    Ok(Some(Rerun {
        tick_ms: r.int(from)?,
        fence: r.fence(from + 1)?,
        lease_key: r.string(from + 2)?,
        started_ms: r.int(from + 3)?,
        context: super::chain::pairs(r, from + 4),
    }))
}

pub(super) fn parse_finish(reply: Value) -> Result<FinishReply, StoreError> {
    let r = Reply::new(reply, "finish")?;
    let recorded = match r.string(0)?.as_str() {
        "current" => Recorded::Current,
        "restored" => Recorded::Restored,
        "stale" => Recorded::Stale,
        "duplicate" => Recorded::Duplicate,
        _ => return Err(r.bad()),
    };
    Ok(FinishReply {
        recorded,
        id: r.string_or_empty(1),
        rerun: parse_rerun(&r, 2)?,
    })
}

/// The sweep script's reply: how many runs it recorded abandoned, the run
/// ids it quarantined, and the rerun it started for us, if any.
pub(super) fn parse_sweep(reply: Value) -> Result<SweepReply, StoreError> {
    let r = Reply::new(reply, "sweep")?;
    Ok(SweepReply {
        abandoned: u32::try_from(r.int(0)?).unwrap_or(0),
        quarantined: r.strings(1),
        rerun: parse_rerun(&r, 2)?,
    })
}

/// What a renewal said of one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewed {
    /// The lease is still ours, and runs a whole lease again.
    Held,
    /// The lease is still ours, and an operator asked for the run to stop
    /// (`cronlease kill`): the holder stops it with `Stop::Killed`.
    KillAsked,
    /// The lease is not ours: another run holds it, or it is gone.
    Lost,
}

/// The renew pipeline's replies: held where the script answered 1 (the
/// lease is still ours), held with a kill asked where it answered 2;
/// anything else is a lease lost.
pub(super) fn parse_renewals(replies: &[Value]) -> Vec<Renewed> {
    replies
        .iter()
        .map(|r| match as_int(r) {
            Some(1) => Renewed::Held,
            Some(2) => Renewed::KillAsked,
            _ => Renewed::Lost,
        })
        .collect()
}

/// The bytes of `notices`' arguments and keys in a finish.
fn notices_bytes(notices: &Notices) -> usize {
    let followers = notices.followers();
    notices.arg().len()
        + followers.arg().len()
        + followers.inboxes().iter().map(String::len).sum::<usize>()
}

/// Whether a finishing run may hold a slot of a concurrency group, which
/// the finish then gives back (it reads the run's entry for it): only a
/// job with a `group`, or one whose table is not at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSlot {
    /// The job has a group, or may have had one when the run started.
    Maybe,
    /// The job has no group: nothing to give back, nothing to read.
    None,
}

impl GroupSlot {
    /// Of `job`: [`GroupSlot::Maybe`] when it names a group.
    pub fn of(job: &crate::config::Job) -> GroupSlot {
        match job.group {
            Some(_) => GroupSlot::Maybe,
            None => GroupSlot::None,
        }
    }

    fn as_arg(self) -> &'static str {
        match self {
            GroupSlot::Maybe => "1",
            GroupSlot::None => "0",
        }
    }
}

impl Store {
    /// Sends `build`'s pipeline (one `script` call per lease, `count` of
    /// them) to every node; for each lease, whether a majority of the nodes
    /// said it is still held (1 or 2), and whether any of those asked for
    /// its run to stop (2). The daemon's runs and the library's locks
    /// renew this way.
    pub(super) async fn renew_all(
        &self,
        what: &'static str,
        script: &Script,
        count: usize,
        build: impl Fn() -> redis::Pipeline,
    ) -> Result<Vec<Renewed>, StoreError> {
        let build = &build;
        let answers = self
            .on_all(|conn| async move {
                let replies = self.query_with_script(conn, script, build).await?;
                Ok(parse_renewals(&replies))
            })
            .await;
        let answers = self.gather(what, answers)?;
        Ok((0..count)
            .map(|i| {
                let said = || answers.iter().filter_map(|lease| lease.get(i));
                if said().filter(|&&r| r != Renewed::Lost).count() < self.majority() {
                    Renewed::Lost
                } else if said().any(|&r| r == Renewed::KillAsked) {
                    Renewed::KillAsked
                } else {
                    Renewed::Held
                }
            })
            .collect())
    }

    /// Renews every lease in `renewals` in one pipeline: what each renewal
    /// said (with `quorum`: held on a majority of the masters).
    pub async fn renew(
        &self,
        renewals: &[Renewal],
        lease: Duration,
    ) -> Result<Vec<Renewed>, StoreError> {
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        let lease_ms = duration_ms(lease);
        let build = || {
            let mut pipe = redis::pipe();
            for renewal in renewals {
                pipe.cmd("EVALSHA")
                    .arg(self.scripts.renew.get_hash())
                    .arg(2)
                    .arg(&renewal.lease_key)
                    .arg(self.keys.running(&renewal.job))
                    .arg(&renewal.run_id)
                    .arg(lease_ms);
            }
            pipe
        };
        self.renew_all("renew", &self.scripts.renew, renewals.len(), build)
            .await
    }

    /// The finish script's keys ([`FINISH_KEYS`]) and arguments.
    fn finish_args(
        &self,
        outcome: &Outcome,
        history: u32,
        rerun: Option<&RerunOffer<'_>>,
        attempt: Attempt,
        (notices, slot): (&Notices, GroupSlot),
    ) -> redis::Cmd {
        let keys = &self.keys;
        let job = outcome.job.as_str();
        // The job's keys before and after the run's lease key.
        let (before, after) = (
            ["state", "running"],
            ["runs", "done", "lease", "reruns", "done_at", "events"],
        );
        let rerun_bytes = rerun.map_or(0, |offer| {
            offer.new_run_id.len() + offer.claimant.replica.len() + offer.claimant.host.len()
        });
        // Sized once: thousands of finishes wait in a batch at once.
        let bytes = before
            .iter()
            .chain(&after)
            .map(|part| keys.job_key_len(job, part))
            .sum::<usize>()
            + outcome.lease_key.len()
            + outcome.run_id.len()
            + rerun_bytes
            + outcome.replica.len()
            + outcome.host.len()
            + outcome.output.len()
            + notices_bytes(notices)
            + FINISH_FIXED_BYTES;
        let inboxes = notices.followers().inboxes();
        let mut args = redis::Cmd::with_capacity(FINISH_KEYS + inboxes.len() + FINISH_ARGS, bytes);
        for part in before {
            args.write_arg_fmt(keys.job_key_arg(job, part));
        }
        args.arg(&outcome.lease_key);
        for part in after {
            args.write_arg_fmt(keys.job_key_arg(job, part));
        }
        for inbox in inboxes {
            args.arg(inbox);
        }
        args.arg(&outcome.run_id)
            .arg(history)
            .arg(duration_ms(DEDUP_WINDOW))
            .arg(dedup_entries(history));
        match rerun {
            Some(offer) => args
                .arg("1")
                .arg(offer.claimant.overlap.as_str())
                .arg(duration_ms(offer.claimant.lease))
                .arg(offer.new_run_id)
                .arg(offer.claimant.min_fence)
                .arg(offer.claimant.replica)
                .arg(offer.claimant.host),
            None => args
                .arg("0")
                .arg("skip")
                .arg(0)
                .arg("")
                .arg(0)
                .arg("")
                .arg(""),
        };
        args.arg(attempt.as_arg())
            .arg(notices.arg())
            .arg(notices.followers().arg())
            .arg(slot.as_arg());
        outcome.each_stream_field(|name, value| {
            args.arg(name).write_arg_fmt(value);
        });
        args
    }

    /// Runs the finish script for `outcome`; with `rerun`, a pending rerun
    /// of the job may be started for the caller. `attempt`: whether this
    /// outcome was sent before (only then can it be a duplicate).
    /// `notices`: the job's rules, for the events the outcome causes.
    pub async fn finish(
        &self,
        outcome: &Outcome,
        history: u32,
        rerun: Option<&RerunOffer<'_>>,
        attempt: Attempt,
        (notices, slot): (&Notices, GroupSlot),
    ) -> Result<FinishReply, StoreError> {
        let args = self.finish_args(outcome, history, rerun, attempt, (notices, slot));
        let keys = FINISH_KEYS + notices.followers().inboxes().len();
        if !self.is_quorum() {
            let conn = self.single("finish").await?;
            if self.batches(&conn) {
                let reply = self.scripts.finishes.call(conn, args, keys).await?;
                return parse_finish(reply);
            }
        }
        // Boxed, as the claim's paths that do not batch are.
        let args = &args;
        let answers = Box::pin(self.on_all(|conn| async move {
            let build = || {
                let mut pipe = redis::pipe();
                pipe.cmd("EVALSHA")
                    .arg(self.scripts.finish.get_hash())
                    .arg(keys);
                append(&mut pipe, args);
                pipe
            };
            let reply = self
                .query_with_script(conn, &self.scripts.finish, build)
                .await?
                .into_iter()
                .next()
                .unwrap_or(Value::Nil);
            parse_finish(reply)
        }))
        .await;
        // With `quorum`: the outcome is recorded once a majority has it (a
        // retry or the spool sends it again; the done marker makes that a
        // no-op where it landed). The current record, if any, is the answer.
        let mut answers = self.gather("finish", answers)?;
        let best = answers
            .iter()
            .position(|a| a.recorded.is_current())
            .unwrap_or(0);
        Ok(answers.swap_remove(best))
    }

    /// Runs the sweep script for one job.
    pub async fn sweep(&self, request: &SweepRequest<'_>) -> Result<SweepReply, StoreError> {
        let keys = &self.keys;
        let mut invocation = self.scripts.sweep.prepare_invoke();
        invocation
            .key(keys.state(request.job))
            .key(keys.running(request.job))
            .key(keys.lease(request.job))
            .key(keys.runs(request.job))
            .key(keys.reruns(request.job))
            .key(keys.quarantine(request.job))
            .key(keys.events(request.job));
        let followers = request.claimant.notices.followers();
        for inbox in followers.inboxes() {
            invocation.key(inbox);
        }
        invocation
            .arg(request.claimant.replica)
            .arg(request.claimant.host)
            .arg(request.claimant.history)
            .arg(if request.rerun.is_some() { "1" } else { "0" })
            .arg(request.claimant.overlap.as_str())
            .arg(duration_ms(request.claimant.lease))
            .arg(request.rerun.unwrap_or(""))
            .arg(request.claimant.min_fence)
            .arg(request.claimant.notices.arg())
            .arg(followers.arg());
        let invocation = &invocation;
        let answers = self
            .on_all(|mut conn| async move {
                let reply: Value = invocation.invoke_async(&mut conn).await?;
                parse_sweep(reply)
            })
            .await;
        // With `quorum` each master records the runs whose lease lapsed
        // there; reruns are not offered (the config refuses them).
        let answers = self.gather("sweep", answers)?;
        let mut quarantined: Vec<String> =
            answers.iter().flat_map(|a| a.quarantined.clone()).collect();
        quarantined.sort();
        quarantined.dedup();
        Ok(SweepReply {
            abandoned: answers.iter().map(|a| a.abandoned).max().unwrap_or(0),
            quarantined,
            rerun: answers.into_iter().find_map(|a| a.rerun),
        })
    }

    /// Records `ticks` (ascending) of `job` as missed, told as one `missed`
    /// event by `notices`, or as `excluded` those the job's calendars
    /// leave out (with the exclusion); returns how many were new missed
    /// ticks.
    pub async fn record_missed(
        &self,
        job: &str,
        ticks: &[(i64, Option<crate::calendar::Exclusion>)],
        recorder: &Claimant<'_>,
    ) -> Result<u64, StoreError> {
        let mut invocation = self.scripts.missed.prepare_invoke();
        invocation
            .key(self.keys.state(job))
            .key(self.keys.runs(job))
            .key(self.keys.events(job))
            .arg(recorder.replica)
            .arg(recorder.host)
            .arg(recorder.history)
            .arg(recorder.notices.arg());
        for (tick, exclusion) in ticks {
            match exclusion {
                None => invocation.arg(*tick),
                Some(exclusion) => invocation.arg(format!("{tick} {}", exclusion.as_arg())),
            };
        }
        let new: Vec<u64> = self.invoke_on_all("record_missed", &invocation).await?;
        Ok(new.into_iter().max().unwrap_or(0))
    }

    /// Records `job`'s tick `tick_ms` as missed because no live replica
    /// has every tag of `run_on` (`unplaced.lua`): once, and only when no
    /// claim or record covers it yet. When this call recorded it, the
    /// high-water mark it moved past (-1: none), whose gap to the tick the
    /// caller records missed ([`Store::record_missed`]).
    pub async fn record_unplaced(
        &self,
        job: &str,
        tick_ms: i64,
        recorder: &Claimant<'_>,
        run_on: &[String],
    ) -> Result<Option<i64>, StoreError> {
        let mut invocation = self.scripts.unplaced.prepare_invoke();
        invocation
            .key(self.keys.state(job))
            .key(self.keys.runs(job))
            .key(self.keys.events(job))
            .arg(tick_ms)
            .arg(recorder.replica)
            .arg(recorder.host)
            .arg(recorder.history)
            .arg(recorder.notices.arg())
            .arg(self.keys.claims_channel())
            .arg(job)
            .arg(run_on.join(" "));
        let answers: Vec<i64> = self.invoke_on_all("record_unplaced", &invocation).await?;
        Ok(answers.into_iter().filter(|previous| *previous >= -1).min())
    }

    /// The stream id of a run's recorded outcome, once there is one (and
    /// while the dedup window and the stream remember it): the entry of the
    /// ms the window dated it with this run id, or what an earlier release
    /// kept (its `done` hash, or the per-run key of the release before).
    /// The three places are asked in one round trip, so a caller polling
    /// for an outcome not recorded yet pays one per poll.
    pub async fn done_marker(&self, job: &str, run_id: &str) -> Result<Option<String>, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("ZSCORE")
            .arg(self.keys.done_at(job))
            .arg(run_id)
            .cmd("HGET")
            .arg(self.keys.done(job))
            .arg(run_id)
            .cmd("GET")
            .arg(self.keys.legacy_done(job, run_id));
        let pipe = &pipe;
        type Markers = (Option<String>, Option<String>, Option<String>);
        let (ms, previous, legacy): Markers = self
            .read(|mut conn| async move { pipe.query_async(&mut conn).await })
            .await?;
        if let Some(ms) = ms {
            let mut cmd = redis::cmd("XRANGE");
            cmd.arg(self.keys.runs(job)).arg(&ms).arg(&ms);
            let entries: Vec<(String, Vec<(String, String)>)> = self.read_cmd(cmd).await?;
            let ours = entries.into_iter().find(|(_, fields)| {
                fields
                    .iter()
                    .any(|(name, value)| name == "run_id" && value == run_id)
            });
            if let Some((id, _)) = ours {
                return Ok(Some(id));
            }
        }
        Ok(previous.or(legacy))
    }
}
