//! Key names: the only place that knows how cronlease lays out its data in
//! Redis (the guide, "The data in Redis"). All keys of one job share the hash
//! tag `{job}`, so a script touches a single Redis Cluster slot.

/// Key `part` of a job: `<prefix>:{<job>}:<part>`.
pub(super) struct JobKey<'a> {
    prefix: &'a str,
    job: &'a str,
    part: &'a str,
}

impl std::fmt::Display for JobKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for piece in [self.prefix, ":{", self.job, "}:", self.part] {
            f.write_str(piece)?;
        }
        Ok(())
    }
}

/// The names of all keys cronlease writes under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    /// [`Keys::claims_channel`], named in every claim.
    claims_channel: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
            claims_channel: format!("{prefix}:claimed"),
        }
    }

    fn job_key(&self, job: &str, part: &str) -> String {
        self.job_key_arg(job, part).to_string()
    }

    /// Key `part` of `job` (as [`Keys::state`] and the like name it), to be
    /// written where it goes (a command's argument) without a `String` of
    /// its own.
    pub(super) fn job_key_arg<'a>(&'a self, job: &'a str, part: &'a str) -> JobKey<'a> {
        JobKey {
            prefix: &self.prefix,
            job,
            part,
        }
    }

    /// The length of [`Keys::job_key_arg`]`(job, part)`.
    pub(super) fn job_key_len(&self, job: &str, part: &str) -> usize {
        self.prefix.len() + job.len() + part.len() + 4
    }

    /// Hash: `last_tick`, `fence`, `paused`, last outcome summary.
    pub fn state(&self, job: &str) -> String {
        self.job_key(job, "state")
    }

    /// Hash: replica → the latest tick of a broadcast job (`mode =
    /// "every_replica"`) it claimed (`broadcast.lua`): its own high-water
    /// mark, so that it runs each tick once, restarts included.
    pub fn replica_ticks(&self, job: &str) -> String {
        self.job_key(job, "replica_ticks")
    }

    /// String with PX: the run id of `replica`'s run of a broadcast job
    /// (its lease; `…:lease:<run id>` with `overlap = "allow"`).
    pub fn replica_lease(&self, job: &str, replica: &str) -> String {
        format!("{}:replica:{replica}", self.lease(job))
    }

    /// Hash: run id → JSON of the run in flight.
    pub fn running(&self, job: &str) -> String {
        self.job_key(job, "running")
    }

    /// Stream: the live output of `job`'s run `run_id` (see
    /// [`crate::live`]).
    pub fn live(&self, job: &str, run_id: &str) -> String {
        let mut key = self.job_key(job, "live:");
        key.push_str(run_id);
        key
    }

    /// String with PX: the run id of the holder (`…:lease:<run id>` with
    /// `overlap = "allow"`).
    pub fn lease(&self, job: &str) -> String {
        self.job_key(job, "lease")
    }

    /// Sorted set: the run ids holding a slot of concurrency group
    /// `group`, each scored by its lease's end (Redis ms). Its own hash
    /// tag, not a job's: groups are refused on Redis Cluster.
    pub fn group_slots(&self, group: &str) -> String {
        format!("{}:{{group:{group}}}:slots", self.prefix)
    }

    /// Sorted set: the ticks waiting for a slot of `group`, members
    /// `<job> <tick> <until>` scored by tick.
    pub fn group_waiting(&self, group: &str) -> String {
        format!("{}:{{group:{group}}}:waiting", self.prefix)
    }

    /// Stream: one entry per outcome.
    pub fn runs(&self, job: &str) -> String {
        self.job_key(job, "runs")
    }

    /// Hash: run id → stream id of its recorded outcome, the dedup window
    /// of the previous release (until 7 days after the upgrade). Only read:
    /// by the finish script for a duplicate's stream id, and by
    /// [`super::Store::done_marker`].
    pub fn done(&self, job: &str) -> String {
        self.job_key(job, "done")
    }

    /// Sorted set: the run ids whose outcome is recorded, scored by the ms
    /// of the outcome's stream id, for the newest
    /// [`dedup_entries`](super::dedup_entries) runs (the dedup window).
    pub fn done_at(&self, job: &str) -> String {
        self.job_key(job, "done_at")
    }

    /// String with PX, written before the dedup window existed (until
    /// 7 days after the upgrade): marks one run id whose outcome is
    /// recorded. Only read, by [`super::Store::done_marker`].
    pub(super) fn legacy_done(&self, job: &str, run_id: &str) -> String {
        self.job_key(job, &format!("done:{run_id}"))
    }

    /// Hash: records found in the job's keys that cronlease did not write
    /// (`running:<run id>` → the raw entry), moved aside by the sweep and
    /// kept 30 days for whoever investigates.
    pub fn quarantine(&self, job: &str) -> String {
        self.job_key(job, "quarantine")
    }

    /// Hash: tick → fence of abandoned ticks waiting to be rerun
    /// (`on_holder_lost = "rerun"`).
    pub fn reruns(&self, job: &str) -> String {
        self.job_key(job, "reruns")
    }

    /// Stream: the outcomes of `upstream`'s runs that `follower` is to
    /// run after, not dealt with yet (in `upstream`'s hash tag: the script
    /// that records an outcome writes here).
    pub fn inbox(&self, upstream: &str, follower: &str) -> String {
        let mut key = self.job_key(upstream, "after:");
        key.push_str(follower);
        key
    }

    /// Sorted set: `<upstream> <run id>` of each upstream run a follower's
    /// run was started for (or recorded as not run), scored by when its
    /// inbox entry was deleted; see after.lua.
    pub fn caused(&self, job: &str) -> String {
        self.job_key(job, "caused")
    }

    /// Hash: root tick → the upstream runs that ended for it, while an
    /// `after_all` follower waits for the rest.
    pub fn joins(&self, job: &str) -> String {
        self.job_key(job, "joins")
    }

    /// Sorted set: the backfill ticks queued and not started yet
    /// (`<tick> <backfill id>`, scored by the tick).
    pub fn backfill(&self, job: &str) -> String {
        self.job_key(job, "backfill")
    }

    /// Sorted set: the ticks a backfill started a run of (`<tick> <run
    /// id>`, scored by the tick), the newest 100,000: so a second backfill
    /// of a range runs nothing twice, even once the runs stream trimmed
    /// their outcomes.
    pub fn backfilled(&self, job: &str) -> String {
        self.job_key(job, "backfilled")
    }

    /// Set: the jobs with queued backfill ticks (a hint the replicas read
    /// instead of every job's queue).
    pub fn backfill_registry(&self) -> String {
        format!("{}:backfills", self.prefix)
    }

    /// Pub/sub channel on which a backfill's plan (and each replica whose
    /// backfill run ended) publishes the job's name, to wake the replicas.
    pub fn backfill_channel(&self) -> String {
        format!("{}:backfill", self.prefix)
    }

    /// Stream: the operator actions on the job (pause, resume, trigger),
    /// who took them and how, newest last; capped.
    pub fn actions(&self, job: &str) -> String {
        self.job_key(job, "actions")
    }

    /// Stream: the job's notification events not delivered yet, one entry
    /// per event and channel, read by the consumer group
    /// `deliver`.
    pub fn events(&self, job: &str) -> String {
        self.job_key(job, "events")
    }

    /// The job whose [`Keys::events`] `key` is, if it is one (a job's name
    /// has no `:`; the replicas' stream and locks' keys do).
    pub fn job_of_events<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.prefix.as_str())?
            .strip_prefix(":{")?
            .strip_suffix("}:events")
            .filter(|job| !job.contains([':', '{', '}']))
    }

    /// Sorted set: the name of every lock acquired lately → when (Redis
    /// ms) a process last registered it; how the dashboard finds locks
    /// without a keyspace scan.
    pub fn lock_registry(&self) -> String {
        format!("{}:locks", self.prefix)
    }

    /// Hash: replica id → heartbeat JSON.
    pub fn replicas(&self) -> String {
        format!("{}:replicas", self.prefix)
    }

    /// Hash: replica id → the definition hash of each of its jobs (JSON:
    /// job → hash), written when its job table changes, not with every
    /// heartbeat (see [`crate::membership`]). Its name's hash tag is the
    /// whole name of [`Keys::replicas`], so both share a Cluster slot.
    pub fn replica_jobs(&self) -> String {
        format!("{0}:{{{0}:replicas}}:jobs", self.prefix)
    }

    /// Hash: replica id → JSON `{"by", "at_ms"}` of the operator who
    /// drained it (`cronlease drain`), until `cronlease undrain`; beside
    /// the heartbeats (the same hash tag as [`Keys::replica_jobs`]).
    pub fn drain(&self) -> String {
        format!("{0}:{{{0}:replicas}}:drain", self.prefix)
    }

    /// String with PX (the sign-in's lifetime): a dashboard sign-in
    /// through single sign-on, under the SHA-256 (hex) of the random id
    /// its browser's cookie holds; JSON of who signed in, the role claim's
    /// values and the ID token (for the provider's logout).
    #[cfg(feature = "dashboard")]
    pub fn sign_in(&self, id_hash: &str) -> String {
        format!("{}:sso:{id_hash}", self.prefix)
    }

    /// Stream: the replicas' own notification events (`replica_dead`),
    /// beside their heartbeats (the same hash tag as
    /// [`Keys::replica_jobs`]).
    pub fn replica_events(&self) -> String {
        format!("{0}:{{{0}:replicas}}:events", self.prefix)
    }

    /// Hash: `dead:<replica>` → the `last_seen_ms` of the silence already
    /// told (replica_dead.lua), and the replicas' `events_dropped`; beside
    /// their heartbeats.
    pub fn replicas_told(&self) -> String {
        format!("{0}:{{{0}:replicas}}:told", self.prefix)
    }

    /// Pub/sub channel on which a script that wrote notification events
    /// publishes the stream's key, to wake the replicas' notifiers.
    pub fn notify_channel(&self) -> String {
        format!("{}:notify", self.prefix)
    }

    /// Hash: `<channel>:ok` → Redis ms of the last delivery a receiver
    /// took, `<channel>:failed` → JSON of the last failed attempt.
    pub fn notify_health(&self) -> String {
        format!("{}:notify:health", self.prefix)
    }

    /// Pub/sub channel on which a script that filled a follower's inbox
    /// publishes the upstream's name, to wake the followers' replicas.
    pub fn after_channel(&self) -> String {
        format!("{}:after", self.prefix)
    }

    /// Pub/sub channel on which `cronlease kill` (kill.lua) publishes the
    /// id of each run it asks to stop, for its holder.
    pub fn kill_channel(&self) -> String {
        format!("{}:kill", self.prefix)
    }

    /// Hash: the cluster's pause (`cronlease pause --all`): `paused`
    /// ("1" or "0" once resumed or ended), `id` (fresh at every pause and
    /// resume, what the replicas acknowledge in their heartbeats), `by`,
    /// `at_ms`, and while paused `until_ms` and `reason`.
    pub fn pause_all(&self) -> String {
        format!("{}:pause_all", self.prefix)
    }

    /// Stream: the cluster's pauses and resumes, who, until when and why;
    /// capped. Its hash tag is the whole name of [`Keys::pause_all`], so
    /// one script writes both.
    pub fn pause_all_actions(&self) -> String {
        format!("{0}:{{{0}:pause_all}}:actions", self.prefix)
    }

    /// Sorted set: job → the Redis ms its timed pause ends at. A hint for
    /// the replicas' sweep of ended pauses (written after the pause,
    /// removed after its end): a job's pause ends at its next claim
    /// whether or not it is here.
    pub fn pause_ends(&self) -> String {
        format!("{}:pause_ends", self.prefix)
    }

    /// String: a random id written once per Redis deployment; its loss or
    /// change means Redis lost state.
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.prefix)
    }

    /// Pub/sub channel on which the claim script announces each claim as
    /// a line `<job> <tick> <fence>` (a batch's claims in one message).
    pub fn claims_channel(&self) -> &str {
        &self.claims_channel
    }

    /// Stream: manual run requests (`cronlease trigger`), read by the
    /// consumer group [`TRIGGER_GROUP`](super::triggers::TRIGGER_GROUP).
    pub fn triggers(&self) -> String {
        format!("{}:triggers", self.prefix)
    }

    /// The pseudo-job whose keys hold the lock NAME (`:` keeps it apart from
    /// every job name).
    pub fn lock_job(name: &str) -> String {
        format!("lock:{name}")
    }

    /// Pub/sub channel on which a lock's release is announced: its lease
    /// key with `released` for `lease` (`lock_release.lua` makes it so).
    pub fn lock_channel(&self, name: &str) -> String {
        self.lock_key(name, "released")
    }

    /// Key `part` of lock NAME: [`Keys::state`] and the like of its
    /// pseudo-job [`Keys::lock_job`], made in one step.
    pub fn lock_key(&self, name: &str, part: &str) -> String {
        let mut key = String::new();
        self.push_lock_key(&mut key, name, part);
        key
    }

    /// [`Keys::lock_key`] appended to `out` (for names made once per
    /// acquisition, in one buffer).
    pub fn push_lock_key(&self, out: &mut String, name: &str, part: &str) {
        out.reserve(self.prefix.len() + name.len() + part.len() + 10);
        for piece in [self.prefix.as_str(), ":{lock:", name, "}:", part] {
            out.push_str(piece);
        }
    }
}
