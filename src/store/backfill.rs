//! Backfill (`cronlease backfill`): the plan script that decides, of a
//! range of a job's ticks at or below its high-water mark, which ran and
//! queues the others, and the take script a replica starts one queued tick
//! with. Beside them, the registry of jobs with queued ticks
//! (`<prefix>:backfills`), which spares the replicas a look at every job,
//! and its wake-up channel.

use redis::Value;

use super::{Claimant, Reply, Store, StoreError, duration_ms};

/// Whether the plan script only answers or also queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanMode {
    /// Decide and answer; change nothing (`--dry-run`).
    DryRun,
    /// Decide, queue the ticks to run, and wake the replicas.
    Queue,
}

impl PlanMode {
    fn as_arg(self) -> &'static str {
        match self {
            PlanMode::DryRun => "plan",
            PlanMode::Queue => "queue",
        }
    }
}

/// Why the plan left a tick out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// The runs stream holds a run's outcome of it.
    Ran,
    /// A run of it is in flight.
    Running,
    /// It waits to be rerun (`on_holder_lost = "rerun"`).
    Rerun,
    /// A backfill ran it.
    Backfilled,
    /// A backfill has it queued.
    Queued,
}

impl SkipReason {
    fn parse(text: &str) -> Option<SkipReason> {
        Some(match text {
            "ran" => SkipReason::Ran,
            "running" => SkipReason::Running,
            "rerun" => SkipReason::Rerun,
            "backfilled" => SkipReason::Backfilled,
            "queued" => SkipReason::Queued,
            _ => return None,
        })
    }

    /// As the plan prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Ran => "ran",
            SkipReason::Running => "running",
            SkipReason::Rerun => "rerun",
            SkipReason::Backfilled => "backfilled",
            SkipReason::Queued => "queued",
        }
    }
}

/// A tick the plan left out because it ran (or will).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkippedTick {
    pub tick_ms: i64,
    pub why: SkipReason,
    /// Its outcome's status (`ok`, `failed`, …), or `running`, `rerun`,
    /// `backfill`, `queued`.
    pub status: String,
    /// The run's id (a queued tick: the backfill's id; a rerun: empty).
    pub run_id: String,
}

/// What the plan script decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillPlan {
    /// The job's high-water mark (None: no tick was ever claimed).
    pub last_tick_ms: Option<i64>,
    /// Ticks to run (queued, unless a dry run), ascending.
    pub to_run: Vec<i64>,
    pub skipped: Vec<SkippedTick>,
    /// Ticks later than the high-water mark: the schedule's own.
    pub later: Vec<i64>,
}

/// What the take script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeReply {
    /// This replica is to run `tick_ms`.
    Claimed {
        tick_ms: i64,
        fence: u64,
        started_ms: i64,
        lease_key: String,
        /// Runs in flight whose holder stopped renewing: sweep the job.
        expired: i64,
        backfill_id: String,
    },
    /// The concurrency limit or the overlap policy holds the next tick back.
    Wait { expired: i64 },
    /// The job is paused: its backfill waits for `resume`.
    Paused,
    /// Nothing is queued.
    Empty,
    /// The job's state hash holds a `field` that is not a number.
    Corrupt { field: String, value: String },
}

pub(super) fn parse_plan(job: &str, value: Value) -> Result<BackfillPlan, StoreError> {
    let r = Reply::new(value, "backfill_plan")?;
    match r.string(0)?.as_str() {
        "plan" => {}
        "corrupt" => {
            return Err(StoreError::CorruptState {
                job: job.to_string(),
                field: r.string(1)?,
                value: r.string_or_empty(2),
            });
        }
        _ => return Err(r.bad()),
    }
    let ticks = |i: usize| -> Result<Vec<i64>, StoreError> {
        r.strings(i)
            .iter()
            .map(|t| t.parse().map_err(|_| r.bad()))
            .collect()
    };
    let last = r.int(1)?;
    let flat = r.strings(3);
    let mut skipped = Vec::with_capacity(flat.len() / 4);
    for item in flat.chunks(4) {
        let [tick, why, status, run_id] = item else {
            return Err(r.bad());
        };
        skipped.push(SkippedTick {
            tick_ms: tick.parse().map_err(|_| r.bad())?,
            why: SkipReason::parse(why).ok_or_else(|| r.bad())?,
            status: status.clone(),
            run_id: run_id.clone(),
        });
    }
    Ok(BackfillPlan {
        last_tick_ms: (last >= 0).then_some(last),
        to_run: ticks(2)?,
        skipped,
        later: ticks(4)?,
    })
}

pub(super) fn parse_take(value: Value) -> Result<TakeReply, StoreError> {
    let r = Reply::new(value, "backfill_take")?;
    match r.string(0)?.as_str() {
        "claimed" => Ok(TakeReply::Claimed {
            tick_ms: r.int(1)?,
            fence: r.fence(2)?,
            started_ms: r.int(3)?,
            lease_key: r.string(4)?,
            expired: r.int_or(5, 0),
            backfill_id: r.string_or_empty(6),
        }),
        "wait" => Ok(TakeReply::Wait {
            expired: r.int_or(1, 0),
        }),
        "paused" => Ok(TakeReply::Paused),
        "empty" => Ok(TakeReply::Empty),
        "corrupt" => Ok(TakeReply::Corrupt {
            field: r.string(1)?,
            value: r.string_or_empty(2),
        }),
        _ => Err(r.bad()),
    }
}

/// A plan request: the candidate ticks, ascending, of one job.
#[derive(Debug, Clone)]
pub struct PlanRequest<'a> {
    pub job: &'a str,
    /// The backfill's id, kept with each tick it queues.
    pub id: &'a str,
    /// At most this many backfill runs of the job at once.
    pub concurrency: u32,
    pub mode: PlanMode,
    pub ticks: &'a [i64],
}

impl Store {
    /// Decides which of `request.ticks` ran and, with
    /// [`PlanMode::Queue`], queues the others (backfill_plan.lua) and
    /// registers the job for the replicas.
    pub async fn backfill_plan(
        &self,
        request: &PlanRequest<'_>,
    ) -> Result<BackfillPlan, StoreError> {
        let keys = &self.keys;
        let job = request.job;
        let mut invocation = self.scripts.backfill_plan.prepare_invoke();
        invocation
            .key(keys.state(job))
            .key(keys.running(job))
            .key(keys.runs(job))
            .key(keys.reruns(job))
            .key(keys.backfill(job))
            .key(keys.backfilled(job))
            .arg(request.id)
            .arg(request.concurrency)
            .arg(request.mode.as_arg())
            .arg(keys.backfill_channel())
            .arg(job);
        for tick in request.ticks {
            invocation.arg(*tick);
        }
        let mut conn = self.single("backfill").await?;
        let mut register = redis::cmd("SADD");
        register.arg(keys.backfill_registry()).arg(job);
        // Registered before the plan too: should this command die right
        // after queueing, the replicas' visits still find the queue (a
        // job registered with nothing queued is taken out by the first
        // replica that looks).
        if request.mode == PlanMode::Queue {
            let _: i64 = register.query_async(&mut conn).await?;
        }
        let reply: Value = invocation.invoke_async(&mut conn).await?;
        let plan = parse_plan(job, reply)?;
        if request.mode == PlanMode::Queue && !plan.to_run.is_empty() {
            let _: i64 = register.query_async(&mut conn).await?;
        }
        Ok(plan)
    }

    /// Starts the run of `job`'s lowest queued backfill tick for
    /// `claimant` with run id `run_id` (backfill_take.lua).
    pub async fn backfill_take(
        &self,
        job: &str,
        run_id: &str,
        claimant: &Claimant<'_>,
        cluster_pause: super::ClusterHold,
    ) -> Result<TakeReply, StoreError> {
        let keys = &self.keys;
        let mut invocation = self.scripts.backfill_take.prepare_invoke();
        invocation
            .key(keys.state(job))
            .key(keys.running(job))
            .key(keys.lease(job))
            .key(keys.backfill(job))
            .key(keys.backfilled(job));
        if let Some(group) = claimant.group {
            invocation
                .key(keys.group_slots(&group.name))
                .key(keys.group_waiting(&group.name));
        }
        invocation
            .arg(run_id)
            .arg(duration_ms(claimant.lease))
            .arg(claimant.overlap.as_str())
            .arg(claimant.replica)
            .arg(claimant.host)
            .arg(claimant.min_fence)
            .arg(keys.claims_channel())
            .arg(job)
            .arg(cluster_pause.as_arg())
            .arg(claimant.group.map_or("", |g| g.name.as_str()))
            .arg(claimant.group.map_or(0, |g| g.max));
        let mut conn = self.single("backfill").await?;
        let reply: Value = invocation.invoke_async(&mut conn).await?;
        parse_take(reply)
    }

    /// The jobs the registry says have queued backfill ticks.
    pub async fn backfill_jobs(&self) -> Result<Vec<String>, StoreError> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(self.keys.backfill_registry());
        self.read_cmd(cmd).await
    }

    /// Takes `job` out of the registry once nothing of it is queued: out,
    /// then back in if a plan queued ticks meanwhile (a plan queues before
    /// it registers, so either this sees its ticks or its registration
    /// comes after).
    pub async fn backfill_settle(&self, job: &str) -> Result<(), StoreError> {
        let mut conn = self.single("backfill").await?;
        let registry = self.keys.backfill_registry();
        let _: i64 = redis::cmd("SREM")
            .arg(&registry)
            .arg(job)
            .query_async(&mut conn)
            .await?;
        let left: i64 = redis::cmd("ZCARD")
            .arg(self.keys.backfill(job))
            .query_async(&mut conn)
            .await?;
        if left > 0 {
            let _: i64 = redis::cmd("SADD")
                .arg(&registry)
                .arg(job)
                .query_async(&mut conn)
                .await?;
        }
        Ok(())
    }

    /// How many of `job`'s backfill ticks are queued, not started yet.
    pub async fn backfill_left(&self, job: &str) -> Result<u64, StoreError> {
        let mut cmd = redis::cmd("ZCARD");
        cmd.arg(self.keys.backfill(job));
        self.read_cmd(cmd).await
    }

    /// Wakes every replica's backfill task for `job`.
    pub async fn wake_backfill(&self, job: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(self.keys.backfill_channel()).arg(job);
        let _: i64 = self.read_cmd(cmd).await?;
        Ok(())
    }

    /// A subscription to the backfill wake-ups (each message a job's name).
    pub async fn backfill_subscriber(&self) -> Result<redis::aio::PubSub, StoreError> {
        self.subscriber(&self.keys.backfill_channel()).await
    }

    /// The outcomes of `job` recorded after stream id `after` (`-`: from
    /// the start), oldest first, at most `count`.
    pub async fn outcomes_after(
        &self,
        job: &str,
        after: &str,
        count: usize,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, StoreError> {
        let mut cmd = redis::cmd("XRANGE");
        let start = if after == "-" {
            "-".to_string()
        } else {
            format!("({after}")
        };
        cmd.arg(self.keys.runs(job))
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(count);
        self.read_cmd(cmd).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_plan_reads_back() {
        let reply = Value::Array(vec![
            bulk("plan"),
            bulk("5000"),
            Value::Array(vec![bulk("1000"), bulk("2000")]),
            Value::Array(vec![bulk("3000"), bulk("ran"), bulk("ok"), bulk("r1")]),
            Value::Array(vec![bulk("6000")]),
        ]);
        let plan = parse_plan("j", reply).expect("a plan");
        assert_eq!(plan.last_tick_ms, Some(5000));
        assert_eq!(plan.to_run, [1000, 2000]);
        assert_eq!(plan.skipped[0].why, SkipReason::Ran);
        assert_eq!(plan.later, [6000]);
    }

    #[test]
    fn a_plan_with_a_bad_item_is_an_error() {
        let reply = Value::Array(vec![
            bulk("plan"),
            bulk("-1"),
            Value::Array(vec![bulk("x")]),
            Value::Array(vec![]),
            Value::Array(vec![]),
        ]);
        assert!(parse_plan("j", reply).is_err());
        let reply = Value::Array(vec![
            bulk("plan"),
            bulk("-1"),
            Value::Array(vec![]),
            Value::Array(vec![bulk("1"), bulk("why")]),
            Value::Array(vec![]),
        ]);
        assert!(parse_plan("j", reply).is_err());
    }

    #[test]
    fn a_take_reads_back() {
        let reply = Value::Array(vec![
            bulk("claimed"),
            bulk("1000"),
            Value::Int(7),
            Value::Int(1234),
            bulk("k"),
            Value::Int(0),
            bulk("b"),
        ]);
        assert!(matches!(
            parse_take(reply),
            Ok(TakeReply::Claimed {
                tick_ms: 1000,
                fence: 7,
                ..
            })
        ));
        assert_eq!(
            parse_take(Value::Array(vec![bulk("empty")])).ok(),
            Some(TakeReply::Empty)
        );
        assert!(parse_take(Value::Array(vec![bulk("what")])).is_err());
    }
}
