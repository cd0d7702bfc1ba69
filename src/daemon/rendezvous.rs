//! Rendezvous claims: every replica ranks the live replicas for each
//! (job, tick) by a hash, so one claims at once and the others wait their
//! turn, skipping the claim if one was announced meanwhile (the claim
//! script announces it); and the listener of those announcements.

use super::ctx::Ctx;
use super::state::LiveReplicas;
use super::wake::listen;
use crate::telemetry;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::error;

use crate::store::{DRAIN_NOTICE, MAX_CLAIM_AHEAD_MS, MAX_FENCE, PAUSE_ALL_NOTICE};

/// The place of `replica` (this one) in the rendezvous order of `job`'s
/// `tick` among the `live` replicas whose tags match `run_on` (the job's:
/// a replica that may not run it takes no place, so the first matching
/// one claims at once): 0 claims at once, the others wait their turn.
pub(super) fn rank(
    live: &LiveReplicas,
    replica: &str,
    (job, run_on): (&str, &[String]),
    tick_ms: i64,
) -> usize {
    let live = live.snapshot();
    let own = rendezvous_score(replica, job, tick_ms);
    live.iter()
        .filter(|other| other.id != replica)
        .filter(|other| crate::config::tags_match(&other.tags, run_on))
        .filter(|other| rendezvous_score(&other.id, job, tick_ms) > own)
        .count()
}

/// How long each rank waits after the one before it for a claim to be
/// announced: also the takeover delay when the preferred replica is gone.
pub(super) const RANK_STEP: Duration = Duration::from_millis(100);

/// Ranks beyond this wait no longer (they all claim together).
pub(super) const MAX_RANK_WAIT: usize = 3;

/// The longest any rank waits: its claim must still reach Redis before
/// the claim deadline (`LATE_MS` after the tick).
const LONGEST_RANK_WAIT: Duration = Duration::from_millis(800);

/// How long a replica of rank `rank` waits after the tick for the claim of
/// a better-ranked one to be announced: `rank` steps of [`RANK_STEP`], or
/// of twice this replica's average claim time as the preferred one
/// (wake-up to answer, [`ClaimLatency`]) when that is longer. Under load (Redis or the replicas busy)
/// announcements come late, and a fixed step would have every replica
/// claim every tick, which adds the load that made them late.
pub(super) fn rank_wait(rank: usize, claim_latency_ms: u64) -> Duration {
    let step = RANK_STEP.max(Duration::from_millis(claim_latency_ms.saturating_mul(2)));
    let steps = u32::try_from(rank.min(MAX_RANK_WAIT)).unwrap_or(1);
    (step * steps).min(LONGEST_RANK_WAIT)
}

/// A 64-bit score of (replica, job, tick); the highest score claims first.
pub(super) fn rendezvous_score(replica: &str, job: &str, tick_ms: i64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in replica
        .bytes()
        .chain([0])
        .chain(job.bytes())
        .chain([0])
        .chain(tick_ms.to_le_bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64's finalizer: FNV alone mixes the last bytes poorly.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// Listens to the claims channel and remembers, per job, the highest tick
/// announced. Reconnects on its own; a gap only costs extra claims.
pub(super) async fn claims_listener(ctx: Arc<Ctx>, cancel: CancellationToken) {
    let mut forged = Forged {
        logged: None,
        since: 0,
    };
    let subscribe = || ctx.store.claims_subscriber();
    listen(subscribe, "claim announcements", &cancel, |payload| {
        let jobs = ctx.jobs.borrow().clone();
        let latest = ctx.clock.now_ms() + MAX_CLAIM_AHEAD_MS + CLOCK_SLACK_MS;
        for line in payload.lines() {
            if line.starts_with(PAUSE_ALL_NOTICE) || line.starts_with(DRAIN_NOTICE) {
                // The cluster's pause or a replica's drain changed: the
                // heartbeat reads it.
                ctx.heartbeat_now.notify_one();
                continue;
            }
            match announced_claim(line) {
                Some((job, tick, fence))
                    if jobs.contains_key(job) && tick <= latest && fence <= MAX_FENCE =>
                {
                    // A hint: it ends a wait for a turn, and raises the
                    // fence asked for (see `MarkBook::hear`).
                    ctx.marks.hear(job, tick, fence);
                }
                _ => forged.note(line),
            }
        }
    })
    .await;
}

/// One line of an announcement, `<job> <tick> <fence>` (job names have no
/// spaces), if it is one.
fn announced_claim(line: &str) -> Option<(&str, i64, u64)> {
    let mut parts = line.split(' ');
    let (job, tick, fence) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some((job, tick.parse().ok()?, fence.parse().ok()?))
}

/// How far the replica's estimate of Redis time may be off, beyond the
/// longest lead, before an announced tick counts as forged.
const CLOCK_SLACK_MS: i64 = 3_000;

/// Announcement lines no replica sent (a job this replica does not have, a
/// tick no claim could set yet, a fence past [`MAX_FENCE`], not a claim at
/// all): counted, and logged at most every [`FORGED_LOG_EVERY`] with the
/// count since.
struct Forged {
    logged: Option<Instant>,
    since: u64,
}

const FORGED_LOG_EVERY: Duration = Duration::from_secs(10);

impl Forged {
    fn note(&mut self, line: &str) {
        metrics::counter!(telemetry::UNTRUSTED_DATA, "source" => "announcement").increment(1);
        self.since += 1;
        if self
            .logged
            .is_some_and(|at| at.elapsed() < FORGED_LOG_EVERY)
        {
            return;
        }
        error!(
            line = %crate::inert::escape(&line.chars().take(200).collect::<String>()),
            count = self.since,
            "ignoring claim announcements no replica sent (a job this replica lacks, a tick later than any claim could set, or not a claim): some Redis client publishes on the claims channel"
        );
        self.logged = Some(Instant::now());
        self.since = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::latency::ClaimLatency;

    #[test]
    fn ranks_wait_longer_when_claims_are_slow_but_never_past_the_deadline() {
        assert_eq!(rank_wait(1, 0), RANK_STEP);
        assert_eq!(rank_wait(2, 10), 2 * RANK_STEP);
        assert_eq!(rank_wait(1, 150), Duration::from_millis(300));
        assert_eq!(rank_wait(3, 150), LONGEST_RANK_WAIT);
        assert_eq!(rank_wait(9, 0), 3 * RANK_STEP);
        let latency = ClaimLatency::default();
        for _ in 0..64 {
            latency.observe(Duration::from_millis(400));
        }
        assert!((390..=400).contains(&latency.ms()), "{}", latency.ms());
    }

    #[test]
    fn an_announcement_carries_claims_and_skips_what_is_not_one() {
        let payload = "draw 1000 7\nreport 2000 3\ngarbage\nx 1 -2\nold 5 6\nlong 1 2 3";
        let claims: Vec<_> = payload.lines().filter_map(announced_claim).collect();
        assert_eq!(
            claims,
            [("draw", 1_000, 7), ("report", 2_000, 3), ("old", 5, 6)]
        );
    }

    #[test]
    fn only_the_replicas_that_match_a_job_take_a_place_in_its_ranking() {
        use crate::daemon::state::LiveReplica;
        let tags = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let live = LiveReplicas::new("a", &tags(&["gpu"]));
        live.replace(vec![
            LiveReplica {
                id: "a".into(),
                tags: tags(&["gpu"]),
            },
            LiveReplica {
                id: "b".into(),
                tags: tags(&["eu", "gpu"]),
            },
            LiveReplica {
                id: "c".into(),
                tags: Vec::new(),
            },
        ]);
        let run_on = tags(&["gpu"]);
        let mut c_first_among_all = 0;
        for tick in 0..200 {
            let tick_ms = 1_795_000_000_000 + tick * 1000;
            let matching: Vec<usize> = ["a", "b"]
                .iter()
                .map(|id| rank(&live, id, ("train", &run_on), tick_ms))
                .collect();
            let mut sorted = matching.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1], "tick {tick_ms}: {matching:?}");
            if rank(&live, "c", ("train", &[]), tick_ms) == 0 {
                c_first_among_all += 1;
            }
        }
        // c, which does not match, would often come first among everyone:
        // a matching replica waits for none of those turns.
        assert!(c_first_among_all > 20, "{c_first_among_all}");
        let only_b = tags(&["eu", "gpu"]);
        assert_eq!(rank(&live, "b", ("train", &only_b), 1_795_000_000_000), 0);
    }

    #[test]
    fn rendezvous_spreads_ticks_evenly_and_ranks_are_a_permutation() {
        let replicas = ["web-1", "web-2", "web-3"];
        let mut first = [0usize; 3];
        for tick in 0..3000 {
            let tick_ms = 1_795_000_000_000 + tick * 1000;
            let mut scores: Vec<(u64, usize)> = replicas
                .iter()
                .enumerate()
                .map(|(i, r)| (rendezvous_score(r, "draw", tick_ms), i))
                .collect();
            scores.sort_unstable_by(|a, b| b.cmp(a));
            first[scores[0].1] += 1;
        }
        for count in first {
            assert!((850..=1150).contains(&count), "uneven: {first:?}");
        }
    }
}
