//! Redis losing a job's state while a run is in flight (a restart without
//! its data, a failover to a replica that lacked it): the run's outcome is
//! its tick's current one, since nothing else can have recorded it, and a
//! run that a sweep did record stays stale. Driven through the library's
//! `Store` answer by answer, and through a real replica.

use std::time::Duration;

use cronlease::config::Overlap;
use cronlease::outcome::Outcome;
use cronlease::store::{Attempt, ClaimRequest, Claimant, Recorded, Store, SweepRequest};

use crate::support::{
    Cluster, RedisServer, claim_request, claimed_outcome, connect_store, current_by_tick, hget,
    now_ms, probe_job, read_outcomes, runtime, test_claimant, wait_until,
};

const PREFIX: &str = "cl";
const JOB: &str = "draw";

fn key(part: &str) -> String {
    format!("{PREFIX}:{{{JOB}}}:{part}")
}

fn flushall(server: &RedisServer) {
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut server.client())
        .expect("FLUSHALL");
}

async fn claim(store: &Store, request: &ClaimRequest<'_>) -> Outcome {
    claimed_outcome(store, request).await
}

async fn finish(store: &Store, outcome: &Outcome) -> Recorded {
    store
        .finish(
            outcome,
            100,
            None,
            Attempt::First,
            (
                &cronlease::store::NO_NOTICES,
                cronlease::store::GroupSlot::None,
            ),
        )
        .await
        .expect("finish")
        .recorded
}

/// Lets Redis's clock move past `ms`, so that what happens next is later.
async fn after(ms: i64) {
    while now_ms() <= ms + 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[test]
fn a_run_whose_claim_was_answered_late_and_whose_state_redis_lost_is_recorded_current() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, PREFIX, "1s").await;
        let claimant = test_claimant(Duration::from_secs(10), Overlap::Skip, 100);
        let first = claim_request(JOB, "late", now_ms() - 1000, claimant);
        // The first attempt won, but its answer never came: the replica asks
        // again with the same run id and learns it holds the claim.
        claim(&store, &first).await;
        let again = ClaimRequest {
            attempt: Attempt::Again,
            ..first
        };
        let outcome = claim(&store, &again).await;
        // Redis loses everything while the run is in flight.
        flushall(&server);
        assert_eq!(finish(&store, &outcome).await, Recorded::Restored);
        // Its outcome is the job's current one, and a second delivery of it
        // changes nothing.
        assert_eq!(
            hget(&server, &key("state"), "outcome_run_id").as_deref(),
            Some("late")
        );
        let again = store
            .finish(
                &outcome,
                100,
                None,
                Attempt::Again,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(again.recorded, Recorded::Duplicate);
    });
    let outcomes = read_outcomes(&mut server.client(), PREFIX, JOB);
    assert_eq!(outcomes.len(), 1, "{outcomes:#?}");
    assert!(!outcomes[0].stale(), "{outcomes:#?}");
    assert_eq!(outcomes[0].status(), "ok");
}

#[test]
fn after_a_state_loss_a_forgotten_run_is_current_and_an_abandoned_one_stale() {
    let server = RedisServer::start();
    let tick = now_ms() - 10_000;
    runtime().block_on(async {
        let store = connect_store(&server, PREFIX, "1s").await;
        let long = test_claimant(Duration::from_secs(10), Overlap::Allow, 100);
        let forgotten = claim(&store, &claim_request(JOB, "forgotten", tick, long)).await;
        flushall(&server);
        after(forgotten.started_ms).await;
        // The next claim comes from a replica that saw the first one: it
        // re-seeds the high-water mark and the fence, and a new lineage
        // begins. Its holder dies (a lease of one second nobody renews).
        let short = Claimant {
            lease: Duration::from_secs(1),
            min_fence: forgotten.fence,
            ..long
        };
        let next = ClaimRequest {
            min_tick: tick,
            ..claim_request(JOB, "abandoned", tick + 1000, short)
        };
        let abandoned = claim(&store, &next).await;
        assert!(abandoned.fence > forgotten.fence);
        assert_eq!(finish(&store, &forgotten).await, Recorded::Restored);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let swept = store
            .sweep(&SweepRequest {
                job: JOB,
                claimant: short,
                rerun: None,
            })
            .await
            .expect("sweep");
        assert_eq!(swept.abandoned, 1);
        // Its holder comes back: the sweep recorded its run, in this lineage.
        assert_eq!(finish(&store, &abandoned).await, Recorded::Stale);
        // A state written before lineages were recorded (no `born`) keeps
        // the rule it had: not in flight means recorded.
        let legacy = claim(&store, &claim_request(JOB, "legacy", tick + 2000, short)).await;
        let _: () = redis::cmd("HDEL")
            .arg(key("state"))
            .arg("born")
            .query(&mut server.client())
            .expect("HDEL");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let request = SweepRequest {
            job: JOB,
            claimant: short,
            rerun: None,
        };
        assert_eq!(store.sweep(&request).await.expect("sweep").abandoned, 1);
        assert_eq!(finish(&store, &legacy).await, Recorded::Stale);
    });
    let outcomes = read_outcomes(&mut server.client(), PREFIX, JOB);
    let current = current_by_tick(&outcomes, "");
    assert_eq!(current[&tick].run_id(), "forgotten", "{outcomes:#?}");
    for run_id in ["abandoned", "legacy"] {
        let own: Vec<_> = outcomes.iter().filter(|o| o.run_id() == run_id).collect();
        assert_eq!(own.len(), 2, "{run_id}: {outcomes:#?}");
        assert_eq!(own[0].status(), "abandoned");
        assert!(!own[0].stale());
        assert!(own[1].stale(), "{run_id}: {outcomes:#?}");
    }
}

/// A real replica: Redis is emptied under a run in flight; the run's own
/// outcome is recorded once, current, and the log says why.
#[test]
fn a_run_in_flight_when_redis_is_emptied_ends_with_its_own_current_outcome() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    cluster.start(
        "a",
        &probe_job("slow", "*/5 * * * * *", &file, "sleep 2", ""),
    );
    cluster.wait_ready();
    let run_id: String = wait_until(Duration::from_secs(20), "a run in flight", || {
        let ids: Vec<String> = redis::cmd("HKEYS")
            .arg("cl:{slow}:running")
            .query(&mut cluster.redis.client())
            .expect("HKEYS");
        ids.into_iter().next()
    });
    flushall(&cluster.redis);
    cluster.replicas[0].wait_for_log(
        "outcome recorded as current: Redis lost",
        Duration::from_secs(20),
    );
    cluster.stop_all();
    let log = cluster.logs();
    let outcomes = cluster.outcomes("slow");
    let own: Vec<_> = outcomes.iter().filter(|o| o.run_id() == run_id).collect();
    assert_eq!(own.len(), 1, "{outcomes:#?}\n{log}");
    assert!(!own[0].stale(), "{outcomes:#?}\n{log}");
    // Its own outcome: it ended, or its watchdog found the lease gone
    // with the rest of Redis's data and stopped it.
    assert!(
        matches!(own[0].status(), "ok" | "lost_lease"),
        "{outcomes:#?}\n{log}"
    );
    assert!(!log.contains("recorded as stale"), "{log}");
    current_by_tick(&outcomes, &log);
}

/// Only the heartbeat can see these wipes: the job is never due, so no
/// claim finds Redis behind. Each wipe is detected by every replica,
/// whichever of them writes the next epoch, the one it wrote before too.
#[test]
fn every_replica_detects_each_wipe_by_its_heartbeat() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("yearly", "0 0 0 1 1 *", &file, "true", "");
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    // Both have beaten once, so both have seen the epoch.
    wait_until(Duration::from_secs(20), "both replicas' records", || {
        let n: usize = redis::cmd("HLEN")
            .arg(format!("{PREFIX}:replicas"))
            .query(&mut cluster.redis.client())
            .expect("HLEN");
        (n == 2).then_some(())
    });
    for wipe in 1..=2 {
        flushall(&cluster.redis);
        for replica in &cluster.replicas {
            wait_until(Duration::from_secs(20), "the wipe detected", || {
                let detected = replica.log().matches("REDIS STATE LOSS DETECTED").count();
                (detected == wipe).then_some(())
            });
        }
    }
    cluster.stop_all();
}
