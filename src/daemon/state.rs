//! A replica's small shared state, one owner each: the marks it holds Redis
//! to (from its own claims' answers only), what it heard other replicas
//! announce (a hint that a tick was claimed, never kept on disk nor handed
//! to Redis as a tick), and the live replicas it ranks claims among. Each type keeps its data behind one `std` mutex (never held
//! across an `.await`: every method takes the lock, reads or updates a few
//! integers, and returns), so no other part of the daemon touches a lock.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tracing::warn;

use super::table::JobMap;
use crate::store::MAX_FENCE;

/// A remembered tick later than this past the local clock at start was not
/// written by a claim (a clock set back by more is a different problem):
/// such marks are dropped at load, and named.
const MAX_REMEMBERED_AHEAD_MS: i64 = 24 * 3600 * 1000;

/// The highest tick and fence Redis's answers to this replica's own
/// requests showed for one job: what it holds Redis to if Redis loses
/// state. Beside them, what other replicas' announcements said, which is
/// evidence from any Redis client: it only ends a wait for a rendezvous
/// turn, and raises the fence a claim asks for by a bounded step.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Marks {
    pub(super) last_tick: Option<i64>,
    pub(super) fence: u64,
    /// The highest tick heard announced; never saved.
    #[serde(skip)]
    heard_tick: Option<i64>,
    /// The highest fence heard announced within [`MAX_HEARD_FENCE_STEP`]
    /// of `fence`; never saved.
    #[serde(skip)]
    heard_fence: u64,
}

/// How far above the fence its own answers showed a replica believes an
/// announced fence: a legitimate gap is the runs other replicas started
/// since its last answer; a forged one raises fences by at most this much
/// (fences only need to grow, so that costs nothing but numbers).
pub(super) const MAX_HEARD_FENCE_STEP: u64 = 1_000_000;

impl Marks {
    /// The fence a claim asks Redis to stay above: its own answers', or a
    /// higher one heard announced, so that after a Redis state loss no
    /// fence another replica handed out is handed out again.
    pub(super) fn min_fence(&self) -> u64 {
        self.fence.max(self.heard_fence)
    }
}

/// Every job's [`Marks`], kept in `state_dir/marks.json` too, so a replica
/// restarted together with a Redis that lost its data still remembers.
pub(super) struct MarkBook {
    path: PathBuf,
    marks: Mutex<JobMap<Marks>>,
    /// Set when `marks` changed since they were last written to disk.
    dirty: AtomicBool,
}

impl MarkBook {
    /// The marks remembered at `path` by an earlier run of this replica, if
    /// any (an unreadable file is named in the log and ignored, and so is
    /// a job's mark no claim could have set: a tick more than a day past
    /// `now_ms`, the local clock, or a fence past [`MAX_FENCE`]).
    pub(super) fn load(path: PathBuf, now_ms: i64) -> MarkBook {
        let mut marks: JobMap<Marks> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                warn!(path = %path.display(), error = %e, "ignoring unreadable remembered marks");
                JobMap::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => JobMap::default(),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot read remembered marks");
                JobMap::default()
            }
        };
        marks.retain(|job, marks| {
            let believable = marks.fence <= MAX_FENCE
                && marks
                    .last_tick
                    .is_none_or(|t| t <= now_ms.saturating_add(MAX_REMEMBERED_AHEAD_MS));
            if !believable {
                warn!(
                    path = %path.display(), job = %crate::inert::escape(job),
                    tick = marks.last_tick, fence = marks.fence,
                    "ignoring a remembered mark no claim could have set"
                );
            }
            believable
        });
        MarkBook {
            path,
            marks: Mutex::new(marks),
            dirty: AtomicBool::new(false),
        }
    }

    /// `job`'s marks (zero when it has none).
    pub(super) fn get(&self, job: &str) -> Marks {
        self.marks
            .lock()
            .expect("marks mutex poisoned: a panic while updating two integers")
            .get(job)
            .copied()
            .unwrap_or_default()
    }

    /// Whether `job`'s tick `tick_ms` (or a later one) is known or said to
    /// be claimed: Redis answered so, or another replica announced it.
    pub(super) fn covers(&self, job: &str, tick_ms: i64) -> bool {
        let marks = self.get(job);
        marks
            .last_tick
            .max(marks.heard_tick)
            .is_some_and(|last| last >= tick_ms)
    }

    /// Remembers an announced claim of `job` (which the caller checked is
    /// one of its jobs, with a tick no claim could set further ahead):
    /// in memory only.
    pub(super) fn hear(&self, job: &str, tick: i64, fence: u64) {
        self.update(job, |entry| {
            entry.heard_tick = Some(entry.heard_tick.map_or(tick, |t| t.max(tick)));
            if fence
                <= entry
                    .fence
                    .saturating_add(MAX_HEARD_FENCE_STEP)
                    .min(MAX_FENCE)
            {
                entry.heard_fence = entry.heard_fence.max(fence);
            }
            false
        });
    }

    /// Raises `job`'s marks to `tick` and `fence` (from Redis's answer to
    /// this replica) where those are higher; a fence past [`MAX_FENCE`] is
    /// not believed.
    pub(super) fn note(&self, job: &str, tick: Option<i64>, fence: Option<u64>) {
        let fence = fence.filter(|&f| f <= MAX_FENCE);
        self.update(job, |entry| {
            let before = (entry.last_tick, entry.fence);
            if let Some(tick) = tick {
                entry.last_tick = Some(entry.last_tick.map_or(tick, |t| t.max(tick)));
            }
            if let Some(fence) = fence {
                entry.fence = entry.fence.max(fence);
            }
            before != (entry.last_tick, entry.fence)
        });
    }

    /// Applies `raise` to `job`'s marks (made if missing); marks the book
    /// to be saved when it says it changed what is saved.
    fn update(&self, job: &str, raise: impl FnOnce(&mut Marks) -> bool) {
        let mut marks = self
            .marks
            .lock()
            .expect("marks mutex poisoned: a panic while updating two integers");
        // Looked up before it is inserted: `entry` would take an owned key,
        // a `String` made on every claim and announcement.
        let changed = match marks.get_mut(job) {
            Some(entry) => raise(entry),
            None => {
                let mut entry = Marks::default();
                let changed = raise(&mut entry);
                marks.insert(job.to_string(), entry);
                changed
            }
        };
        if changed {
            self.dirty.store(true, Ordering::Relaxed);
        }
    }

    /// Writes the marks to their file if they changed (blocking: call it
    /// from `spawn_blocking`).
    pub(super) fn save(&self) {
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return;
        }
        let snapshot = self
            .marks
            .lock()
            .expect("marks mutex poisoned: a panic while updating two integers")
            .clone();
        let json = serde_json::to_vec(&snapshot).unwrap_or_default();
        if let Err(e) = crate::spool::write_durably(&self.path, &json) {
            self.dirty.store(true, Ordering::Relaxed);
            warn!(error = %e, "cannot save the remembered high-water marks");
        }
    }
}

/// The replicas that heartbeat recently (this one included), sorted by
/// name, with their tags: the candidates of the rendezvous ranking. The
/// heartbeat replaces the list; the job loops read snapshots.
pub(super) struct LiveReplicas(Mutex<Arc<Vec<LiveReplica>>>);

/// One live replica: its name and its `[daemon] tags`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LiveReplica {
    pub(super) id: String,
    pub(super) tags: Vec<String>,
}

impl LiveReplicas {
    /// Only this replica, until the first heartbeat says more.
    pub(super) fn new(own: &str, tags: &[String]) -> LiveReplicas {
        LiveReplicas(Mutex::new(Arc::new(vec![LiveReplica {
            id: own.to_string(),
            tags: tags.to_vec(),
        }])))
    }

    pub(super) fn replace(&self, mut live: Vec<LiveReplica>) {
        live.sort_by(|a, b| a.id.cmp(&b.id));
        *self
            .0
            .lock()
            .expect("live mutex poisoned: a panic while swapping an Arc") = Arc::new(live);
    }

    pub(super) fn snapshot(&self) -> Arc<Vec<LiveReplica>> {
        self.0
            .lock()
            .expect("live mutex poisoned: a panic while swapping an Arc")
            .clone()
    }

    /// Whether some live replica (this one included) has every tag of
    /// `run_on`.
    pub(super) fn any_match(&self, run_on: &[String]) -> bool {
        self.snapshot()
            .iter()
            .any(|replica| crate::config::tags_match(&replica.tags, run_on))
    }
}

/// Whether this replica claims: out of the rendezvous when an operator
/// drained it (`cronlease drain`, read at each heartbeat) or once its
/// shutdown began. Out, it starts no run: no tick, catch-up, manual run,
/// follower, backfill or rerun; its runs in flight go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drain {
    /// In the rendezvous: it claims.
    Active,
    /// Drained by an operator until undrained.
    ByOperator,
    /// Shutting down: out for good (the next process starts in).
    Stopping,
}

/// The replica's [`Drain`], watched by the loops that wait to be back in.
pub(super) struct DrainSwitch {
    state: tokio::sync::watch::Sender<Drain>,
}

/// What the heartbeat read of this replica's operator mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OperatorMark {
    Drained,
    Undrained,
}

impl DrainSwitch {
    pub(super) fn new() -> DrainSwitch {
        DrainSwitch {
            state: tokio::sync::watch::Sender::new(Drain::Active),
        }
    }

    /// The state now.
    pub(super) fn get(&self) -> Drain {
        *self.state.borrow()
    }

    /// Whether the replica claims nothing.
    pub(super) fn is_out(&self) -> bool {
        self.get() != Drain::Active
    }

    /// Follows the operator's mark (a shutdown stays one); whether the
    /// state changed.
    pub(super) fn follow(&self, mark: OperatorMark) -> bool {
        self.state.send_if_modified(|state| {
            let next = match (*state, mark) {
                (Drain::Stopping, _) => Drain::Stopping,
                (_, OperatorMark::Drained) => Drain::ByOperator,
                (_, OperatorMark::Undrained) => Drain::Active,
            };
            let changed = *state != next;
            *state = next;
            changed
        })
    }

    /// Out for good: shutdown began.
    pub(super) fn stop(&self) {
        self.state.send_replace(Drain::Stopping);
    }

    /// Returns once the replica is in the rendezvous, or `false` when
    /// `cancel` comes first.
    pub(super) async fn wait_in(&self, cancel: &tokio_util::sync::CancellationToken) -> bool {
        let mut watch = self.state.subscribe();
        tokio::select! {
            () = cancel.cancelled() => false,
            found = watch.wait_for(|state| *state == Drain::Active) => found.is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_only_rise_and_survive_a_restart() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("marks.json");
        let book = MarkBook::load(path.clone(), 0);
        book.note("draw", Some(2_000), Some(7));
        book.note("draw", Some(1_000), Some(3));
        let marks = book.get("draw");
        assert_eq!((marks.last_tick, marks.fence), (Some(2_000), 7));
        book.save();
        let again = MarkBook::load(path, 0).get("draw");
        assert_eq!((again.last_tick, again.fence), (Some(2_000), 7));
    }

    #[test]
    fn a_mark_covers_its_tick_and_earlier_ones_but_a_fence_alone_none() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let book = MarkBook::load(dir.path().join("marks.json"), 0);
        book.note("draw", Some(2_000), None);
        book.note("draw", Some(1_000), Some(3));
        assert!(book.covers("draw", 2_000) && book.covers("draw", 1_500));
        assert!(!book.covers("draw", 2_001) && !book.covers("other", 0));
        book.note("manual", None, Some(9));
        assert!(
            !book.covers("manual", 0),
            "a trigger's fence claims no tick"
        );
    }

    #[test]
    fn what_was_heard_ends_a_wait_but_is_never_saved_nor_a_tick_for_redis() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("marks.json");
        let book = MarkBook::load(path.clone(), 0);
        book.note("draw", Some(1_000), Some(5));
        book.hear("draw", 9_000, 8);
        assert!(book.covers("draw", 9_000), "heard: no need to wait");
        let marks = book.get("draw");
        assert_eq!(
            marks.last_tick,
            Some(1_000),
            "the claim's min_tick is its own"
        );
        assert_eq!(
            marks.min_fence(),
            8,
            "a heard fence is asked to be stayed above"
        );
        // A fence far above what Redis answered is not believed.
        book.hear("draw", 9_000, 5 + MAX_HEARD_FENCE_STEP + 1);
        assert_eq!(book.get("draw").min_fence(), 8);
        book.save();
        let again = MarkBook::load(path, 0);
        assert!(!again.covers("draw", 9_000), "nothing heard was saved");
        assert_eq!(again.get("draw").min_fence(), 5);
    }

    #[test]
    fn marks_no_claim_could_have_set_are_dropped_at_load() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("marks.json");
        let text = format!(
            r#"{{"future":{{"last_tick":4102444800000,"fence":1}},"huge":{{"last_tick":1,"fence":{}}},"fine":{{"last_tick":1000,"fence":2}}}}"#,
            MAX_FENCE + 1
        );
        std::fs::write(&path, text).expect("write marks");
        let book = MarkBook::load(path, 2_000);
        assert_eq!(book.get("future").last_tick, None);
        assert_eq!(book.get("huge").fence, 0);
        assert_eq!(book.get("fine").last_tick, Some(1_000));
        book.note("fine", None, Some(MAX_FENCE + 1));
        assert_eq!(book.get("fine").fence, 2, "nor believed from an answer");
    }

    #[test]
    fn a_drain_follows_the_operators_mark_but_a_shutdown_stays() {
        let switch = DrainSwitch::new();
        assert!(!switch.is_out());
        assert!(switch.follow(OperatorMark::Drained));
        assert_eq!(switch.get(), Drain::ByOperator);
        assert!(!switch.follow(OperatorMark::Drained));
        assert!(switch.follow(OperatorMark::Undrained));
        assert_eq!(switch.get(), Drain::Active);
        switch.stop();
        assert!(!switch.follow(OperatorMark::Undrained));
        assert!(!switch.follow(OperatorMark::Drained));
        assert_eq!(switch.get(), Drain::Stopping);
    }
}
