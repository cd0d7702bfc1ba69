//! What Redis holds about one tick of a job, read once for `explain`:
//! the outcomes recorded from just before the tick on, the runs in
//! flight, the high-water mark, the pause and the operator actions.

use serde_json::Value;

use crate::operator::{HistoryEntry, OutputTail};
use crate::outcome::Trigger;
use crate::store::{Action, Store, StoreError};

/// How far before the tick the outcome stream is read: a run claimed a
/// little ahead of its tick, or by a replica whose estimate of Redis time
/// is a little off, is recorded after its tick all the same, and the run
/// in flight at the tick started before it.
const READ_BEFORE_TICK_MS: i64 = 3_600_000;
/// The most outcomes read: the stream keeps `[daemon] history` entries
/// (1,000 by default), so this is all of it in practice, and a bound on
/// what one page costs.
const MOST_OUTCOMES_READ: usize = 10_000;
/// The operator actions searched for the pause in force at the tick.
const ACTIONS_READ: usize = 200;

/// What Redis holds about the tick.
pub(super) struct Records {
    /// The outcomes from just before the tick on, oldest first, each with
    /// the host and recorder its entry names.
    pub(super) outcomes: Vec<Recorded>,
    pub(super) running: Vec<InFlight>,
    pub(super) last_tick: Option<i64>,
    /// Paused now: by whom, when (Redis ms), until when and why, as the
    /// state says.
    pub(super) pause: Option<crate::store::Pause>,
    pub(super) actions: Vec<Action>,
    /// The cluster's pause record (`pause --all`), and its pauses and
    /// resumes, newest first.
    pub(super) cluster_pause: Option<crate::store::ClusterPause>,
    pub(super) cluster_actions: Vec<Action>,
}

pub(super) struct Recorded {
    pub(super) entry: HistoryEntry,
    pub(super) host: String,
    pub(super) recorded_by: String,
}

/// A run in flight, from the job's `running` hash.
pub(super) struct InFlight {
    pub(super) run_id: String,
    pub(super) tick_ms: i64,
    pub(super) fence: u64,
    pub(super) replica: String,
    pub(super) host: String,
    pub(super) trigger: String,
    pub(super) started_ms: i64,
    pub(super) expires_ms: i64,
}

impl Records {
    pub(super) async fn read(
        store: &Store,
        job: &str,
        tick_ms: i64,
    ) -> Result<Records, StoreError> {
        let since = tick_ms.saturating_sub(READ_BEFORE_TICK_MS);
        let mut outcomes = Vec::new();
        for (id, fields) in store.history_since(job, since, MOST_OUTCOMES_READ).await? {
            let field = |name: &str| {
                fields
                    .iter()
                    .find_map(|(k, v)| (k == name).then(|| v.clone()))
                    .unwrap_or_default()
            };
            let (host, recorded_by) = (field("host"), field("recorded_by"));
            if let Ok(entry) = crate::operator::history::history_entry(id, fields, OutputTail::Omit)
            {
                outcomes.push(Recorded {
                    entry,
                    host,
                    recorded_by,
                });
            }
        }
        outcomes.reverse();
        let running = store
            .hash(&store.keys().running(job))
            .await?
            .into_iter()
            .filter_map(|(run_id, raw)| {
                let e: Value = serde_json::from_str(&raw).ok()?;
                Some(InFlight {
                    run_id,
                    tick_ms: e["tick"].as_i64()?,
                    fence: e["fence"].as_u64().unwrap_or(0),
                    replica: e["replica"].as_str().unwrap_or_default().to_string(),
                    host: e["host"].as_str().unwrap_or_default().to_string(),
                    trigger: e["trigger"].as_str().unwrap_or_default().to_string(),
                    started_ms: e["started"].as_i64().unwrap_or(0),
                    expires_ms: e["expires"].as_i64().unwrap_or(0),
                })
            })
            .collect();
        Ok(Records {
            outcomes,
            running,
            last_tick: store.last_tick(job).await?,
            pause: store.job_state(job).await?.pause,
            actions: store.actions(job, ACTIONS_READ).await?,
            cluster_pause: store.cluster_pause().await?,
            cluster_actions: store.cluster_actions(ACTIONS_READ).await?,
        })
    }

    /// The current (not stale) outcomes of tick `tick_ms`.
    pub(super) fn of_tick(&self, tick_ms: i64) -> impl Iterator<Item = &Recorded> {
        self.outcomes.iter().filter(move |r| {
            r.entry.tick_ms == tick_ms && !r.entry.stale && r.entry.trigger != Trigger::Manual
        })
    }
}
