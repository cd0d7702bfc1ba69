//! A replica's small shared state, one owner each: the marks it holds Redis
//! to (which also say which ticks were claimed, by the answers it got and
//! the claims others announced), and the live replicas it ranks claims
//! among. Each type keeps its data behind one `std` mutex (never held
//! across an `.await`: every method takes the lock, reads or updates a few
//! integers, and returns), so no other part of the daemon touches a lock.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tracing::warn;

use super::JobMap;

/// The highest tick and fence this replica has seen for one job: what it
/// holds Redis to if Redis loses state.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Marks {
    pub(super) last_tick: Option<i64>,
    pub(super) fence: u64,
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
    /// any (an unreadable file is named in the log and ignored).
    pub(super) fn load(path: PathBuf) -> MarkBook {
        let marks = match std::fs::read(&path) {
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

    /// Whether `job`'s tick `tick_ms` (or a later one) is known to be
    /// claimed: its high-water mark, raised only by Redis's answers and by
    /// the claims other replicas announced, has reached it. A claim of it
    /// would be answered `taken`, even after Redis lost its state (the
    /// claim hands Redis this mark).
    pub(super) fn covers(&self, job: &str, tick_ms: i64) -> bool {
        self.get(job).last_tick.is_some_and(|last| last >= tick_ms)
    }

    /// Raises `job`'s marks to `tick` and `fence` where those are higher.
    pub(super) fn note(&self, job: &str, tick: Option<i64>, fence: Option<u64>) {
        let mut marks = self
            .marks
            .lock()
            .expect("marks mutex poisoned: a panic while updating two integers");
        let raise = |entry: &mut Marks| {
            let before = (entry.last_tick, entry.fence);
            if let Some(tick) = tick {
                entry.last_tick = Some(entry.last_tick.map_or(tick, |t| t.max(tick)));
            }
            if let Some(fence) = fence {
                entry.fence = entry.fence.max(fence);
            }
            before != (entry.last_tick, entry.fence)
        };
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

/// The replicas that heartbeat recently (this one included), sorted: the
/// candidates of the rendezvous ranking. The heartbeat replaces the list;
/// the job loops read snapshots.
pub(super) struct LiveReplicas(Mutex<Arc<Vec<String>>>);

impl LiveReplicas {
    /// Only this replica, until the first heartbeat says more.
    pub(super) fn new(own: &str) -> LiveReplicas {
        LiveReplicas(Mutex::new(Arc::new(vec![own.to_string()])))
    }

    pub(super) fn replace(&self, mut live: Vec<String>) {
        live.sort();
        *self
            .0
            .lock()
            .expect("live mutex poisoned: a panic while swapping an Arc") = Arc::new(live);
    }

    pub(super) fn snapshot(&self) -> Arc<Vec<String>> {
        self.0
            .lock()
            .expect("live mutex poisoned: a panic while swapping an Arc")
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_only_rise_and_survive_a_restart() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("marks.json");
        let book = MarkBook::load(path.clone());
        book.note("draw", Some(2_000), Some(7));
        book.note("draw", Some(1_000), Some(3));
        let marks = book.get("draw");
        assert_eq!((marks.last_tick, marks.fence), (Some(2_000), 7));
        book.save();
        let again = MarkBook::load(path).get("draw");
        assert_eq!((again.last_tick, again.fence), (Some(2_000), 7));
    }

    #[test]
    fn a_mark_covers_its_tick_and_earlier_ones_but_a_fence_alone_none() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let book = MarkBook::load(dir.path().join("marks.json"));
        book.note("draw", Some(2_000), None);
        book.note("draw", Some(1_000), Some(3));
        assert!(book.covers("draw", 2_000) && book.covers("draw", 1_500));
        assert!(!book.covers("draw", 2_001) && !book.covers("other", 0));
        book.note("manual", None, Some(9));
        assert!(!book.covers("manual", 0), "a trigger's fence claims no tick");
    }
}
