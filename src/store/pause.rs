//! Pauses: a job's (`pause.lua`, with an optional end and reason), their
//! end when it comes (`pause_end.lua`, once, whoever comes first: a claim
//! or a replica's sweep), and the cluster's (`cronlease pause --all`,
//! `pause_all.lua` and `pause_all_end.lua`), which the replicas read and
//! pass to their claims.

use std::collections::BTreeMap;

use redis::Value;

use super::reply::Reply;
use super::{Store, StoreError};

/// A pause as an operator asks for it.
#[derive(Debug, Clone, Copy)]
pub struct PauseRequest<'a> {
    /// `user@host`, or the dashboard's operator.
    pub who: &'a str,
    /// Redis ms the pause ends at by itself; None: until resumed.
    pub until_ms: Option<i64>,
    /// Why, for `status`, `explain` and the dashboard ("" for none).
    pub reason: &'a str,
}

/// What a pause or a resume did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseAnswer {
    /// Done at this Redis time (ms).
    Done { at_ms: i64 },
    /// The pause's end is not after Redis time (`now_ms`): nothing changed.
    UntilPassed { now_ms: i64 },
}

/// The cluster's pause record (`<prefix>:pause_all`) as read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct ClusterPause {
    /// Fresh at every pause and resume; the replicas acknowledge it.
    pub id: String,
    /// Whether the record is a pause in force (else the last resume, or a
    /// timed pause that ended).
    pub paused: bool,
    pub by: String,
    /// Redis ms of the pause, resume or end.
    pub at_ms: i64,
    /// While paused: the Redis ms the pause ends at; None until resumed.
    pub until_ms: Option<i64>,
    /// While paused: why ("" for none).
    pub reason: String,
}

/// What a claim is told of the cluster's pause (`claim.lua`'s
/// `cluster_holds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterHold {
    /// The cluster is not paused.
    #[default]
    None,
    /// Paused until resumed.
    UntilResumed,
    /// Paused; ticks from this Redis ms on are not held.
    Until(i64),
}

impl ClusterHold {
    /// The claim script's argument.
    pub(super) fn as_arg(self) -> String {
        match self {
            ClusterHold::None => "none".to_string(),
            ClusterHold::UntilResumed => "hold".to_string(),
            ClusterHold::Until(ms) => ms.to_string(),
        }
    }
}

impl ClusterPause {
    /// What a claim is told of this record.
    pub fn hold(&self) -> ClusterHold {
        match (self.paused, self.until_ms) {
            (false, _) => ClusterHold::None,
            (true, None) => ClusterHold::UntilResumed,
            (true, Some(ms)) => ClusterHold::Until(ms),
        }
    }

    /// Whether it holds a tick at `tick_ms` (a pause in force whose end, if
    /// it has one, is later).
    pub fn holds(&self, tick_ms: i64) -> bool {
        self.paused && self.until_ms.is_none_or(|until| tick_ms < until)
    }

    /// The record in `fields` (HGETALL), if there is one; a record that
    /// does not read as one cronlease wrote is named in a warning and
    /// taken as absent.
    pub fn parse(fields: &BTreeMap<String, String>) -> Option<ClusterPause> {
        if fields.is_empty() {
            return None;
        }
        let int = |name: &str| fields.get(name).map(|v| v.parse::<i64>());
        let paused = match fields.get("paused").map(String::as_str) {
            Some("1") => true,
            Some("0") => false,
            _ => {
                tracing::warn!(
                    "unreadable cluster pause record in Redis (paused is neither 1 nor 0); taken as no cluster pause"
                );
                return None;
            }
        };
        let (Some(id), Some(Ok(at_ms))) = (fields.get("id"), int("at_ms")) else {
            tracing::warn!(
                "unreadable cluster pause record in Redis (no id or at_ms); taken as no cluster pause"
            );
            return None;
        };
        let until_ms = match int("until_ms") {
            None => None,
            Some(Ok(ms)) => Some(ms),
            Some(Err(_)) => {
                tracing::warn!(
                    "unreadable cluster pause record in Redis (until_ms is not a number); taken as no cluster pause"
                );
                return None;
            }
        };
        Some(ClusterPause {
            id: id.clone(),
            paused,
            by: fields.get("by").cloned().unwrap_or_default(),
            at_ms,
            until_ms,
            reason: fields.get("reason").cloned().unwrap_or_default(),
        })
    }

    /// Of several masters' records (quorum), the newest.
    pub(super) fn newest(records: impl IntoIterator<Item = Option<ClusterPause>>) -> Option<Self> {
        records.into_iter().flatten().max_by_key(|r| r.at_ms)
    }
}

/// A pause script's answer: `{'paused' | 'resumed' | 'past', now}`.
fn parse_answer(reply: Value, what: &'static str) -> Result<PauseAnswer, StoreError> {
    let r = Reply::new(reply, what)?;
    let now = r.int(1)?;
    Ok(match r.string(0)?.as_str() {
        "past" => PauseAnswer::UntilPassed { now_ms: now },
        "paused" | "resumed" => PauseAnswer::Done { at_ms: now },
        _ => return Err(r.bad()),
    })
}

/// Of several masters' answers (quorum), one: any refusal, else the
/// latest time.
fn merge_answers(answers: Vec<PauseAnswer>) -> PauseAnswer {
    answers
        .iter()
        .find(|a| matches!(a, PauseAnswer::UntilPassed { .. }))
        .copied()
        .or_else(|| answers.iter().max_by_key(|a| answer_ms(a)).copied())
        .unwrap_or(PauseAnswer::Done { at_ms: 0 })
}

fn answer_ms(answer: &PauseAnswer) -> i64 {
    match answer {
        PauseAnswer::Done { at_ms } => *at_ms,
        PauseAnswer::UntilPassed { now_ms } => *now_ms,
    }
}

impl Store {
    /// Pauses a job (with `quorum`: on a majority of the masters) and
    /// records it in the job's actions, in one script. A timed pause is
    /// also noted in [`super::Keys::pause_ends`] for the replicas' sweep.
    pub async fn pause(
        &self,
        job: &str,
        request: &PauseRequest<'_>,
    ) -> Result<PauseAnswer, StoreError> {
        let until = request
            .until_ms
            .map(|ms| ms.to_string())
            .unwrap_or_default();
        let answer = self
            .pause_script(job, "pause", request.who, &until, request.reason)
            .await?;
        if let (PauseAnswer::Done { .. }, Some(until)) = (answer, request.until_ms) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(self.keys.pause_ends()).arg(until).arg(job);
            self.write_everywhere("pause (its end)", cmd).await?;
        }
        Ok(answer)
    }

    /// Resumes a job and records it in the job's actions; returns the
    /// Redis time it happened.
    pub async fn resume(&self, job: &str, who: &str) -> Result<i64, StoreError> {
        let answer = self.pause_script(job, "resume", who, "", "").await?;
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(self.keys.pause_ends()).arg(job);
        self.write_everywhere("resume (its end)", cmd).await?;
        Ok(answer_ms(&answer))
    }

    async fn pause_script(
        &self,
        job: &str,
        action: &str,
        who: &str,
        until: &str,
        reason: &str,
    ) -> Result<PauseAnswer, StoreError> {
        let mut invocation = self.scripts.pause.prepare_invoke();
        invocation
            .key(self.keys.state(job))
            .key(self.keys.actions(job))
            .arg(action)
            .arg(who)
            .arg(until)
            .arg(reason);
        let answers: Vec<Value> = self.invoke_on_all("pause", &invocation).await?;
        let answers = answers
            .into_iter()
            .map(|a| parse_answer(a, "pause"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(merge_answers(answers))
    }

    /// Ends `job`'s timed pause that ends at `until_ms` if its end has
    /// come and nobody ended it yet (`pause_end.lua`); whether this call
    /// did. Its entry in [`super::Keys::pause_ends`] goes, unless a new
    /// pause replaced it.
    pub async fn end_pause(&self, job: &str, until_ms: i64) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.pause_end.prepare_invoke();
        invocation
            .key(self.keys.state(job))
            .key(self.keys.actions(job))
            .arg(until_ms);
        let ended: Vec<i64> = self.invoke_on_all("pause_end", &invocation).await?;
        let forget = redis::Script::new(
            "if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('ZREM', KEYS[1], ARGV[1]) end return 0",
        );
        let mut invocation = forget.prepare_invoke();
        invocation
            .key(self.keys.pause_ends())
            .arg(job)
            .arg(until_ms);
        let _: Vec<i64> = self.invoke_on_all("pause_end", &invocation).await?;
        Ok(ended.contains(&1))
    }

    /// The jobs whose timed pause ends at or before `now_ms` (the
    /// caller's estimate of Redis time), with its end: at most `count`.
    pub async fn pauses_ended(
        &self,
        now_ms: i64,
        count: usize,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let mut cmd = redis::cmd("ZRANGEBYSCORE");
        cmd.arg(self.keys.pause_ends())
            .arg("-inf")
            .arg(now_ms)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(count);
        let found: Vec<(String, f64)> = self.read_cmd(cmd).await?;
        Ok(found
            .into_iter()
            .filter(|(job, _)| crate::config::is_name(job, 128))
            .map(|(job, until)| (job, until as i64))
            .collect())
    }

    /// Pauses every job of the cluster (`pause_all.lua`) under the fresh
    /// `id`, recorded in the cluster's actions, and tells the replicas.
    pub async fn pause_all(
        &self,
        request: &PauseRequest<'_>,
        id: &str,
    ) -> Result<PauseAnswer, StoreError> {
        let until = request
            .until_ms
            .map(|ms| ms.to_string())
            .unwrap_or_default();
        self.pause_all_script("pause", request.who, &until, request.reason, id)
            .await
    }

    /// Resumes the cluster (its jobs paused on their own stay paused)
    /// under the fresh `id`; returns the Redis time it happened.
    pub async fn resume_all(&self, who: &str, id: &str) -> Result<i64, StoreError> {
        let answer = self.pause_all_script("resume", who, "", "", id).await?;
        Ok(answer_ms(&answer))
    }

    async fn pause_all_script(
        &self,
        action: &str,
        who: &str,
        until: &str,
        reason: &str,
        id: &str,
    ) -> Result<PauseAnswer, StoreError> {
        let mut invocation = self.scripts.pause_all.prepare_invoke();
        invocation
            .key(self.keys.pause_all())
            .key(self.keys.pause_all_actions())
            .arg(action)
            .arg(who)
            .arg(until)
            .arg(reason)
            .arg(id);
        let answers: Vec<Value> = self.invoke_on_all("pause_all", &invocation).await?;
        let answers = answers
            .into_iter()
            .map(|a| parse_answer(a, "pause_all"))
            .collect::<Result<Vec<_>, _>>()?;
        let answer = merge_answers(answers);
        if let PauseAnswer::Done { .. } = answer {
            // A hint that wakes the replicas' heartbeats (see the claims
            // listener); they also read the record at every heartbeat.
            let mut cmd = redis::cmd("PUBLISH");
            cmd.arg(self.keys.claims_channel())
                .arg(format!("{PAUSE_ALL_NOTICE}{id}"));
            self.write_everywhere("pause_all (telling the replicas)", cmd)
                .await?;
        }
        Ok(answer)
    }

    /// The cluster's pause record, if there is one (with `quorum`: the
    /// newest of the masters').
    pub async fn cluster_pause(&self) -> Result<Option<ClusterPause>, StoreError> {
        let key = self.keys.pause_all();
        let key = &key;
        let answers = self
            .on_all(|mut conn| async move {
                let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
                    .arg(key)
                    .query_async(&mut conn)
                    .await?;
                Ok(ClusterPause::parse(&fields))
            })
            .await;
        let answers = self.gather("cluster_pause", answers)?;
        Ok(ClusterPause::newest(answers))
    }

    /// Ends the cluster's timed pause `id` if its end has come and nobody
    /// ended it yet (`pause_all_end.lua`); whether this call did.
    pub async fn end_cluster_pause(&self, id: &str) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.pause_all_end.prepare_invoke();
        invocation
            .key(self.keys.pause_all())
            .key(self.keys.pause_all_actions())
            .arg(id);
        let ended: Vec<i64> = self.invoke_on_all("pause_all_end", &invocation).await?;
        Ok(ended.contains(&1))
    }

    /// `cmd` on every master (a majority must take it).
    pub(super) async fn write_everywhere(
        &self,
        what: &'static str,
        cmd: redis::Cmd,
    ) -> Result<(), StoreError> {
        let cmd = &cmd;
        let answers = self
            .on_all(|mut conn| async move { Ok(cmd.query_async::<Value>(&mut conn).await?) })
            .await;
        self.gather(what, answers).map(|_| ())
    }
}

/// The start of the message on the claims channel that tells the replicas
/// the cluster's pause changed (then its id): not a claim announcement
/// (`<job> <tick> <fence>`), since no job name holds `!`.
pub const PAUSE_ALL_NOTICE: &str = "!pause_all ";
