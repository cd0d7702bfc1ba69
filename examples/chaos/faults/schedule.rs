//! The fault schedule: one fault at a time, of a kind drawn by weight from
//! the seeded generator, with a quiet gap between; and the choice of the
//! replica a fault hits.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::FaultKind;
use crate::harness::config::ALLOW_JOB;
use crate::harness::{Harness, interrupted};

/// After start-up, the cluster runs this long before the first fault; no
/// fault starts later than this before the end.
const WARM_UP: Duration = Duration::from_secs(4);
const COOL_DOWN: Duration = Duration::from_secs(12);

/// Which replica a fault may hit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Any, at random.
    Any,
    /// Most often one that holds a run of a non-`allow` job.
    PreferHolder,
}

impl Harness {
    /// The fault loop: one fault at a time, a quiet gap between, until
    /// `COOL_DOWN` before the end; then quiet until `duration`.
    pub fn inject_faults(&mut self, duration: Duration) -> Result<()> {
        let wipes_allowed = 1 + duration.as_secs() / 120;
        let mut wipes = 0;
        println!(
            "\nrunning for {:?} under faults (kinds: {}); Ctrl-C stops early…",
            duration,
            self.kinds
                .iter()
                .map(|(k, _)| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !self.nap(WARM_UP) {
            return Ok(());
        }
        let last_start = duration.saturating_sub(COOL_DOWN);
        while self.started.elapsed() < last_start && !interrupted() {
            let mut kinds = self.kinds.clone();
            if wipes >= wipes_allowed {
                kinds.retain(|(k, _)| *k != FaultKind::RedisWipe);
            }
            if kinds.is_empty() {
                break;
            }
            let kind = self.rng.weighted(&kinds);
            if kind == FaultKind::RedisWipe {
                wipes += 1;
            }
            let fault = self.inject(kind)?;
            println!("  [{:6.1}s] {}", self.elapsed(), fault.describe());
            self.log_fault(fault);
            let gap = Duration::from_millis(self.rng.range(1_000, 3_000));
            if !self.nap(gap) {
                break;
            }
        }
        while self.started.elapsed() < duration && self.nap(Duration::from_millis(200)) {}
        if interrupted() {
            println!("interrupted after {:.1} s", self.elapsed());
        }
        Ok(())
    }

    /// A target replica: for `PreferHolder`, most often one that holds a
    /// run of a non-`allow` job (waiting up to 2 s for one). The random
    /// draws do not depend on the state, so a seed replays the same sequence.
    pub fn pick_target(&mut self, target: Target) -> usize {
        let n = self.replicas.len();
        let index = self.rng.next() as usize;
        let prefer = self.rng.chance(70) && target == Target::PreferHolder;
        let deadline = Instant::now() + Duration::from_secs(2);
        while prefer && Instant::now() < deadline {
            let holders: BTreeSet<String> = self
                .held()
                .into_iter()
                .filter(|h| h.job != ALLOW_JOB)
                .map(|h| h.replica)
                .collect();
            let candidates: Vec<usize> = (0..n)
                .filter(|&i| holders.contains(&self.replicas[i].name))
                .collect();
            if !candidates.is_empty() {
                return candidates[index % candidates.len()];
            }
            if !self.nap(Duration::from_millis(50)) {
                break;
            }
        }
        index % n
    }
}
