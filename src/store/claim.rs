//! Claiming a tick: the claim script on one node, and with `quorum` on every
//! master with a majority of `claimed` inside the lease validity, the fence
//! raised everywhere to the highest, and a claim without a majority undone
//! where it landed.

use super::{
    Attempt, Claimant, Reply, Store, StoreError, append, as_int, duration_ms, lease_still_valid,
    protocol,
};
use crate::calendar::Exclusion;
use crate::link::Conn;
use crate::outcome::Trigger;
use redis::{RedisWrite, Value};
use std::time::Instant;

/// The claim script's keys: state, running, lease, runs, actions.
const CLAIM_KEYS: usize = 5;

/// The claim script's arguments (`claim.lua`).
const CLAIM_ARGS: usize = 19;

/// Room for the claim's numbers and words (tick, lease, overlap, …): at
/// most 20 digits for each of six numbers, and short words.
const CLAIM_NUMBERS_BYTES: usize = 160;

/// Everything the claim script needs to know.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    pub job: &'a str,
    pub tick_ms: i64,
    pub run_id: &'a str,
    pub claimant: Claimant<'a>,
    /// The highest `last_tick` this replica has seen for the job (-1: none).
    pub min_tick: i64,
    pub trigger: Trigger,
    pub when_busy: WhenBusy,
    /// How far ahead of its tick (by Redis time) the tick may be claimed,
    /// in ms; 0: not before the tick. Claimed ahead, the run still starts
    /// at the tick: [`ClaimReply::Claimed`] says when.
    pub lead_ms: i64,
    /// Redis time after which the claim must take no effect: an attempt
    /// that reaches Redis later (it sat in a paused server or a slow
    /// network after its caller stopped waiting) answers `Expired`.
    pub deadline_ms: i64,
    /// Whether an earlier attempt of this claim was sent.
    pub attempt: Attempt,
    /// The cluster's pause as the claimant knows it: a tick it holds is
    /// passed like a paused job's.
    pub cluster_pause: super::ClusterHold,
    /// Why the job's calendars leave the tick out, if they do: the
    /// script records it `excluded` (answer `Excluded`) instead of
    /// claiming it for a run.
    pub exclusion: Option<&'a Exclusion>,
    /// The job's concurrency group, if it has one: the claim takes one of
    /// its slots, or answers `GroupFull` and changes nothing else.
    pub group: Option<GroupClaim<'a>>,
}

/// What a claim of a job in a concurrency group says of the group.
#[derive(Debug, Clone, Copy)]
pub struct GroupClaim<'a> {
    pub name: &'a str,
    pub max: u32,
    /// Redis time until which the tick may wait for a slot: while it
    /// waits, younger ticks of the group let it go first.
    pub until_ms: i64,
}

/// What a claim does when a run of the job is in flight and the overlap
/// policy does not allow another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenBusy {
    /// Record the tick `skipped_overlap` (answer `Busy`).
    Skip,
    /// Answer `Wait`: catch-up of missed ticks with `misfire = "run_all"`
    /// runs them one after another.
    Wait,
}

/// What a claim found of the job's state in Redis before it acted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum StateCheck {
    /// Nothing the claimant remembers contradicts it.
    Sound,
    /// Behind what the claimant saw (Redis lost state): re-seeded from the
    /// claimant's marks.
    Behind,
    /// A field held a value no honest writer produces: treated as lost
    /// (re-seeded, overwritten by the claim) and kept in the state hash as
    /// needing repair until `cronlease repair`.
    Implausible(StateField),
}

/// A field of a job's state hash that a claim checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StateField {
    /// The high-water mark: later than Redis time plus the longest lead.
    LastTick,
    /// The fence: past [`super::MAX_FENCE`].
    Fence,
}

impl StateField {
    /// The field's name in the state hash.
    pub fn as_str(self) -> &'static str {
        match self {
            StateField::LastTick => "last_tick",
            StateField::Fence => "fence",
        }
    }

    /// The field named `name`, if a claim checks it.
    pub fn parse(name: &str) -> Option<StateField> {
        [StateField::LastTick, StateField::Fence]
            .into_iter()
            .find(|f| f.as_str() == name)
    }
}

/// The claim script's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimReply {
    /// We hold the tick: run it under this fence.
    Claimed {
        fence: u64,
        /// When the run starts by Redis time: the claim's time, or the
        /// tick when it was claimed ahead of it.
        started_ms: i64,
        /// Redis time of this answer, in µs: a run claimed ahead starts
        /// `started_ms` (in µs) `- redis_now_us` after the answer arrived,
        /// so never before its tick by Redis time, whatever the local
        /// clock says.
        redis_now_us: i64,
        lease_key: String,
        /// Runs of this job in flight whose lease lapsed: a sweep is due.
        expired: u32,
        /// What the claim found of the job's state before it acted.
        state: StateCheck,
        /// The high-water mark before this claim (-1: none, -2: unknown, a
        /// retry of a claim that had won); schedule ticks between it and
        /// this tick were missed.
        previous: i64,
        /// With `min_replicas_ack`: how many replicas acknowledged the claim
        /// within `ack_timeout` (`WAIT`).
        acked: Option<u32>,
    },
    /// The tick is this far ahead of Redis time; ask again then.
    Early { ms: i64 },
    /// Someone claimed it (or a later tick) already. `fence` is the job's
    /// current fence.
    Taken {
        last_tick: i64,
        state: StateCheck,
        fence: u64,
    },
    /// The job is paused; the tick is skipped.
    Paused {
        state: StateCheck,
        previous: i64,
        fence: u64,
    },
    /// A run is in flight and `overlap = "skip"`: recorded as skipped.
    Busy {
        holder: String,
        state: StateCheck,
        previous: i64,
        fence: u64,
    },
    /// The job's calendars leave the tick out: recorded `excluded`, the
    /// high-water mark moved to it.
    Excluded {
        state: StateCheck,
        previous: i64,
        fence: u64,
    },
    /// Catch-up only: a run is in flight; ask again in this many ms.
    Wait { ms: i64 },
    /// The claim ran after its deadline (this many ms after the tick) and
    /// took no effect; no earlier attempt with this run id can win any more.
    Expired { late_ms: i64 },
    /// An earlier attempt with this run id won, but its lease lapsed before
    /// we heard of it: the run must not start (a sweep records it).
    Lapsed,
    /// The job's state hash holds a `field` that is not a number
    /// (`last_tick` or `fence`: another writer, a bug, a partial restore):
    /// nothing was claimed, since which ticks ran cannot be known.
    Corrupt { field: String, value: String },
    /// The job has started its `max_runs` runs of the schedule: it has no
    /// more ticks. Nothing was claimed.
    Ended { runs_started: u64, fence: u64 },
    /// The job's concurrency group has no slot free (`used` of its max,
    /// `waiting` ticks waiting, this one among them): nothing changed; the
    /// caller asks again while the tick's grace lasts.
    GroupFull { used: u64, waiting: u64, fence: u64 },
}

pub(super) fn parse_claim(reply: Value) -> Result<ClaimReply, StoreError> {
    let r = Reply::new(reply, "claim")?;
    Ok(match r.string(0)?.as_str() {
        "claimed" => ClaimReply::Claimed {
            fence: r.fence(1)?,
            started_ms: r.int(2)?,
            lease_key: r.string(3)?,
            expired: u32::try_from(r.int_or(4, 0)).unwrap_or(0),
            state: r.state_check(5)?,
            previous: r.int_or(6, -1),
            acked: None,
            redis_now_us: r.int(7)?,
        },
        "early" => ClaimReply::Early { ms: r.int(1)? },
        "taken" => ClaimReply::Taken {
            last_tick: r.int(1)?,
            state: r.state_check(2)?,
            fence: r.fence_or_zero(3)?,
        },
        "paused" => ClaimReply::Paused {
            state: r.state_check(1)?,
            previous: r.int_or(2, -1),
            fence: r.fence_or_zero(3)?,
        },
        "excluded" => ClaimReply::Excluded {
            state: r.state_check(1)?,
            previous: r.int_or(2, -1),
            fence: r.fence_or_zero(3)?,
        },
        "busy" => ClaimReply::Busy {
            holder: r.string_or_empty(1),
            state: r.state_check(2)?,
            previous: r.int_or(3, -1),
            fence: r.fence_or_zero(4)?,
        },
        "wait" => ClaimReply::Wait {
            ms: r.int(1)?.max(1),
        },
        "expired" => ClaimReply::Expired { late_ms: r.int(1)? },
        "lapsed" => ClaimReply::Lapsed,
        "corrupt" => ClaimReply::Corrupt {
            field: r.string(1)?,
            value: r.string_or_empty(2),
        },
        "group_full" => ClaimReply::GroupFull {
            used: u64::try_from(r.int(1)?).unwrap_or(0),
            waiting: u64::try_from(r.int(2)?).unwrap_or(0),
            fence: r.fence_or_zero(3)?,
        },
        "ended" => ClaimReply::Ended {
            runs_started: u64::try_from(r.int(1)?).unwrap_or(0),
            fence: r.fence_or_zero(2)?,
        },
        _ => return Err(r.bad()),
    })
}

impl ClaimReply {
    /// What the claim found of the job's state, if the answer says.
    pub fn state(&self) -> Option<&StateCheck> {
        match self {
            ClaimReply::Claimed { state, .. }
            | ClaimReply::Taken { state, .. }
            | ClaimReply::Paused { state, .. }
            | ClaimReply::Excluded { state, .. }
            | ClaimReply::Busy { state, .. } => Some(state),
            _ => None,
        }
    }

    /// The answer's name, as the claim script says it.
    pub fn kind(&self) -> &'static str {
        match self {
            ClaimReply::Claimed { .. } => "claimed",
            ClaimReply::Early { .. } => "early",
            ClaimReply::Taken { .. } => "taken",
            ClaimReply::Paused { .. } => "paused",
            ClaimReply::Busy { .. } => "busy",
            ClaimReply::Excluded { .. } => "excluded",
            ClaimReply::Wait { .. } => "wait",
            ClaimReply::Expired { .. } => "expired",
            ClaimReply::Lapsed => "lapsed",
            ClaimReply::Corrupt { .. } => "corrupt",
            ClaimReply::Ended { .. } => "ended",
            ClaimReply::GroupFull { .. } => "group_full",
        }
    }
}

/// Whether a quorum claim's lease had time left when the masters agreed.
#[derive(Debug, Clone, Copy)]
enum LeaseLeft {
    Enough,
    TooLittle,
}

/// The answer a majority of masters gave, merged (the highest fence, tick
/// and wait, the earliest start), if there is one.
fn majority_answer(answers: &[&ClaimReply], majority: usize) -> Option<ClaimReply> {
    let kind = answers
        .iter()
        .map(|a| a.kind())
        .find(|kind| answers.iter().filter(|a| a.kind() == *kind).count() >= majority)?;
    let mut same = answers
        .iter()
        .filter(|a| a.kind() == kind)
        .map(|a| (*a).clone());
    let first = same.next()?;
    Some(same.fold(first, ClaimReply::merge))
}

impl ClaimReply {
    // Long by design: one match over the answers' kinds, each merged field by field.
    /// Two masters' answers of the same kind as one: the highest fence,
    /// tick and wait, the earliest start, the worst state found. Answers of
    /// different kinds keep the first.
    fn merge(self, next: ClaimReply) -> ClaimReply {
        match (self, next) {
            (
                ClaimReply::Claimed {
                    fence,
                    started_ms,
                    lease_key,
                    expired,
                    state,
                    previous,
                    acked,
                    redis_now_us,
                },
                ClaimReply::Claimed {
                    fence: f,
                    started_ms: s,
                    redis_now_us: n,
                    expired: e,
                    state: r,
                    previous: p,
                    ..
                },
            ) => ClaimReply::Claimed {
                fence: fence.max(f),
                started_ms: started_ms.min(s),
                lease_key,
                expired: expired.max(e),
                state: state.max(r),
                previous: previous.max(p),
                acked,
                // The earliest master's time: the longest wait to the tick.
                redis_now_us: redis_now_us.min(n),
            },
            (
                ClaimReply::Taken {
                    last_tick,
                    state,
                    fence,
                },
                ClaimReply::Taken {
                    last_tick: t,
                    state: r,
                    fence: f,
                },
            ) => ClaimReply::Taken {
                last_tick: last_tick.max(t),
                state: state.max(r),
                fence: fence.max(f),
            },
            (
                ClaimReply::Paused {
                    state,
                    previous,
                    fence,
                },
                ClaimReply::Paused {
                    state: r,
                    previous: p,
                    fence: f,
                },
            ) => ClaimReply::Paused {
                state: state.max(r),
                previous: previous.max(p),
                fence: fence.max(f),
            },
            (
                ClaimReply::Excluded {
                    state,
                    previous,
                    fence,
                },
                ClaimReply::Excluded {
                    state: r,
                    previous: p,
                    fence: f,
                },
            ) => ClaimReply::Excluded {
                state: state.max(r),
                previous: previous.max(p),
                fence: fence.max(f),
            },
            (
                ClaimReply::Busy {
                    holder,
                    state,
                    previous,
                    fence,
                },
                ClaimReply::Busy {
                    state: r,
                    previous: p,
                    fence: f,
                    ..
                },
            ) => ClaimReply::Busy {
                holder,
                state: state.max(r),
                previous: previous.max(p),
                fence: fence.max(f),
            },
            (ClaimReply::Early { ms }, ClaimReply::Early { ms: m }) => {
                ClaimReply::Early { ms: ms.max(m) }
            }
            (ClaimReply::Wait { ms }, ClaimReply::Wait { ms: m }) => {
                ClaimReply::Wait { ms: ms.max(m) }
            }
            (ClaimReply::Expired { late_ms }, ClaimReply::Expired { late_ms: l }) => {
                ClaimReply::Expired {
                    late_ms: late_ms.max(l),
                }
            }
            (merged, _) => merged,
        }
    }
}

impl Store {
    /// Runs the claim script; with `min_replicas_ack`, followed by `WAIT`
    /// in the same pipeline on the same connection. With `quorum`, on every
    /// master at once: see `Store::claim_quorum`.
    pub async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimReply, StoreError> {
        // The paths that do not batch are boxed: under load thousands of
        // claims wait in the batcher at once, each in a future only as big
        // as the batcher's.
        if self.is_quorum() {
            return Box::pin(self.claim_quorum(request)).await;
        }
        let conn = self.single("claim").await?;
        if self.batches(&conn) {
            let reply = self
                .scripts
                .claims
                .call(conn, self.claim_args(request), Store::claim_keys(request))
                .await?;
            return parse_claim(reply);
        }
        Box::pin(self.claim_on(conn, request)).await
    }

    /// The claim over a quorum (the Redlock idea). Sent to every master at
    /// once with one run id; it holds only when a majority answered
    /// `claimed` and the lease, less the time the round took and a clock
    /// drift allowance, has time left. Its fence is the highest of the
    /// majority's, and a second round raises every master's fence to it
    /// (a majority must answer): a later claim's majority shares a master
    /// with this one, so its fence is higher. A claim that does not hold
    /// is undone on the masters where it landed, so that the tick can
    /// still be claimed.
    async fn claim_quorum(&self, request: &ClaimRequest<'_>) -> Result<ClaimReply, StoreError> {
        let sent = Instant::now();
        let majority = self.majority();
        let replies = self
            .on_all_until_majority(
                |conn| async move { self.claim_on(conn, request).await },
                |reply| matches!(reply, ClaimReply::Claimed { .. }),
            )
            .await;
        let answers: Vec<&ClaimReply> = replies
            .iter()
            .filter_map(|reply| reply.as_ref().ok())
            .collect();
        let agreed = majority_answer(&answers, majority);
        let mut valid = lease_still_valid(request.claimant.lease, sent);
        if valid && let Some(claimed @ ClaimReply::Claimed { fence, .. }) = &agreed {
            let raised = self.raise_fence(request.job, *fence).await;
            valid = lease_still_valid(request.claimant.lease, sent);
            match raised {
                Ok(()) if valid => return Ok(claimed.clone()),
                Ok(()) => {}
                Err(e) => {
                    self.release_claims(request, &replies).await;
                    return Err(e);
                }
            }
        }
        self.release_claims(request, &replies).await;
        if let Some(reply) = agreed.filter(|reply| !matches!(reply, ClaimReply::Claimed { .. })) {
            return Ok(reply);
        }
        let lease = if valid {
            LeaseLeft::Enough
        } else {
            LeaseLeft::TooLittle
        };
        Err(self.no_quorum(&replies, &answers, lease))
    }

    /// Raises the job's fence to `fence` on a majority of the masters, so
    /// that no master hands out a lower one later.
    pub(super) async fn raise_fence(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        let state = self.keys.state(job);
        let state = &state;
        let raised = self
            .on_all_until_majority(
                |mut conn| async move {
                    let raised: i64 = self
                        .scripts
                        .raise_fence
                        .key(state)
                        .arg(fence)
                        .invoke_async(&mut conn)
                        .await?;
                    Ok(raised)
                },
                |_| true,
            )
            .await;
        self.gather("claim (raising the fence)", raised).map(|_| ())
    }

    /// Why a quorum claim did not hold: each master's answer.
    fn no_quorum(
        &self,
        replies: &[Result<ClaimReply, StoreError>],
        answers: &[&ClaimReply],
        lease: LeaseLeft,
    ) -> StoreError {
        let won = answers.iter().filter(|a| a.kind() == "claimed").count();
        let described: Vec<String> = self
            .nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| match reply {
                Ok(reply) => format!("{}: {}", node.name, reply.kind()),
                Err(e) => format!("{}: {e}", node.name),
            })
            .collect();
        StoreError::NoQuorum {
            what: "claim",
            reachable: replies.iter().filter(|reply| reply.is_ok()).count() >= self.majority(),
            detail: format!(
                "{} of {} Redis masters claimed the tick{}, {} needed ({})",
                won,
                self.nodes.len(),
                match lease {
                    LeaseLeft::Enough => "",
                    LeaseLeft::TooLittle => " but too late for the lease",
                },
                self.majority(),
                described.join("; ")
            ),
        }
    }

    /// Undoes this run id's claim on each master where it landed (or may
    /// have: an unanswered attempt), best effort: a claim left behind
    /// lapses with its lease, and a sweep records it abandoned.
    async fn release_claims(
        &self,
        request: &ClaimRequest<'_>,
        replies: &[Result<ClaimReply, StoreError>],
    ) {
        let releases = self.nodes.iter().zip(replies).filter_map(|(node, reply)| {
            let previous = match reply {
                Ok(ClaimReply::Claimed { previous, .. }) => *previous,
                Err(e) if e.is_ambiguous() => -2,
                _ => return None,
            };
            Some(async move {
                let mut conn = node.conn().await?;
                let released: i64 = self
                    .scripts
                    .release
                    .key(self.keys.state(request.job))
                    .key(self.keys.running(request.job))
                    .key(self.keys.lease(request.job))
                    .arg(request.run_id)
                    .arg(request.tick_ms)
                    .arg(previous)
                    .invoke_async(&mut conn)
                    .await?;
                Ok::<_, StoreError>(released)
            })
        });
        for result in futures_util::future::join_all(releases).await {
            if let Err(e) = result {
                tracing::debug!(job = request.job, run_id = request.run_id, error = %e, "could not undo a minority claim; it lapses with its lease");
            }
        }
    }

    /// The claim script's keys ([`CLAIM_KEYS`]) and arguments for `request`.
    fn claim_args(&self, request: &ClaimRequest<'_>) -> redis::Cmd {
        let keys = &self.keys;
        let job = request.job;
        let parts = ["state", "running", "lease", "runs", "actions"];
        let notices = request.claimant.notices;
        let exclusion = request.exclusion.map(Exclusion::as_arg).unwrap_or_default();
        // Sized once: thousands of claims wait in a batch at once.
        let bytes = parts
            .iter()
            .map(|part| keys.job_key_len(job, part))
            .sum::<usize>()
            + request.run_id.len()
            + request.claimant.replica.len()
            + request.claimant.host.len()
            + keys.claims_channel().len()
            + job.len()
            + notices.arg().len()
            + exclusion.len()
            + keys.job_key_len(job, "events")
            + request.group.map_or(0, |g| 3 * g.name.len() + 60)
            + CLAIM_NUMBERS_BYTES;
        let mut args = redis::Cmd::with_capacity(CLAIM_KEYS + CLAIM_ARGS, bytes);
        for part in parts {
            args.write_arg_fmt(keys.job_key_arg(job, part));
        }
        if !notices.is_none() {
            args.write_arg_fmt(keys.job_key_arg(job, "events"));
        }
        if let Some(group) = &request.group {
            args.arg(keys.group_slots(group.name))
                .arg(keys.group_waiting(group.name));
        }
        args.arg(request.tick_ms)
            .arg(request.run_id)
            .arg(duration_ms(request.claimant.lease))
            .arg(request.claimant.overlap.as_str())
            .arg(request.claimant.replica)
            .arg(request.claimant.host)
            .arg(request.lead_ms)
            .arg(request.claimant.history)
            .arg(request.min_tick)
            .arg(request.claimant.min_fence)
            .arg(request.trigger.as_str())
            .arg(match request.when_busy {
                WhenBusy::Skip => "0",
                WhenBusy::Wait => "1",
            })
            .arg(keys.claims_channel())
            .arg(request.job)
            .arg(request.deadline_ms)
            .arg(request.attempt.as_arg())
            .arg(request.claimant.max_runs.map_or(-1, i64::from))
            .arg(request.cluster_pause.as_arg())
            .arg(exclusion);
        if let Some(group) = &request.group {
            args.arg(notices.arg())
                .arg(group.name)
                .arg(group.max)
                .arg(group.until_ms);
        } else if !notices.is_none() {
            args.arg(notices.arg());
        }
        args
    }

    /// How many keys [`Store::claim_args`] names: the job's events stream
    /// too when the claim may tell a late start.
    fn claim_keys(request: &ClaimRequest<'_>) -> usize {
        let events = usize::from(!request.claimant.notices.is_none());
        let group = if request.group.is_some() { 2 } else { 0 };
        CLAIM_KEYS + events + group
    }

    async fn claim_on(
        &self,
        conn: Conn,
        request: &ClaimRequest<'_>,
    ) -> Result<ClaimReply, StoreError> {
        let args = self.claim_args(request);
        let build = || {
            let mut pipe = redis::pipe();
            pipe.cmd("EVALSHA")
                .arg(self.scripts.claim.get_hash())
                .arg(Store::claim_keys(request));
            append(&mut pipe, &args);
            if let Some((replicas, timeout)) = self.wait_replicas {
                pipe.cmd("WAIT").arg(replicas).arg(duration_ms(timeout));
            }
            pipe
        };
        let mut replies = self
            .query_with_script(conn, &self.scripts.claim, build)
            .await?
            .into_iter();
        let mut reply = parse_claim(replies.next().unwrap_or(Value::Nil))?;
        if let (ClaimReply::Claimed { acked, .. }, Some(count)) = (&mut reply, replies.next()) {
            *acked = Some(
                as_int(&count)
                    .ok_or_else(|| protocol("WAIT", &count))?
                    .max(0) as u32,
            );
        }
        Ok(reply)
    }

    /// Claims a tick of a broadcast job (`mode = "every_replica"`) for the
    /// claimant's replica (`broadcast.lua`): against its own high-water
    /// mark, with no rendezvous. Answers as a claim does. Never with a
    /// quorum (the config refuses it), nor batched.
    pub async fn claim_broadcast(
        &self,
        request: &ClaimRequest<'_>,
    ) -> Result<ClaimReply, StoreError> {
        let keys = &self.keys;
        let job = request.job;
        let notices = request.claimant.notices;
        let exclusion = request.exclusion.map(Exclusion::as_arg).unwrap_or_default();
        let mut invocation = self.scripts.broadcast.prepare_invoke();
        invocation
            .key(keys.state(job))
            .key(keys.running(job))
            .key(keys.replica_lease(job, request.claimant.replica))
            .key(keys.runs(job))
            .key(keys.actions(job))
            .key(keys.replica_ticks(job));
        if !notices.is_none() {
            invocation.key(keys.events(job));
        }
        invocation
            .arg(request.tick_ms)
            .arg(request.run_id)
            .arg(duration_ms(request.claimant.lease))
            .arg(request.claimant.overlap.as_str())
            .arg(request.claimant.replica)
            .arg(request.claimant.host)
            .arg(0)
            .arg(request.claimant.history)
            .arg(-1)
            .arg(request.claimant.min_fence)
            .arg(request.trigger.as_str())
            .arg(match request.when_busy {
                WhenBusy::Skip => "0",
                WhenBusy::Wait => "1",
            })
            .arg("")
            .arg(job)
            .arg(request.deadline_ms)
            .arg(request.attempt.as_arg())
            .arg(-1)
            .arg(request.cluster_pause.as_arg())
            .arg(exclusion)
            .arg(notices.arg());
        let replies: Vec<Value> = self.invoke_on_all("claim_broadcast", &invocation).await?;
        parse_claim(replies.into_iter().next().unwrap_or(Value::Nil))
    }

    /// `replica`'s high-water mark of a broadcast job, if it has one.
    pub async fn replica_last_tick(
        &self,
        job: &str,
        replica: &str,
    ) -> Result<Option<i64>, StoreError> {
        let key = self.keys.replica_ticks(job);
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&key).arg(replica);
        let raw: Option<String> = self.read_cmd(cmd).await?;
        Ok(raw.and_then(|raw| raw.parse().ok()))
    }

    /// The job's high-water mark, if it has one.
    /// With `quorum`, the highest of a majority's.
    pub async fn last_tick(&self, job: &str) -> Result<Option<i64>, StoreError> {
        let key = self.keys.state(job);
        let key = &key;
        let answers = self
            .on_all(|mut conn| async move {
                let raw: Option<i64> = redis::cmd("HGET")
                    .arg(key)
                    .arg("last_tick")
                    .query_async(&mut conn)
                    .await?;
                Ok(raw)
            })
            .await;
        Ok(self
            .gather("last_tick", answers)?
            .into_iter()
            .flatten()
            .max())
    }
}
