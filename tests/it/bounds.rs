//! What cronlease keeps in Redis is bounded by the job table, not by the
//! run rate: the dedup window of each job (a retried or spooled outcome is
//! applied once; one delivered after the window is recorded, marked stale,
//! never current), the keys after many runs, replicas gone for a day, and
//! locks nobody uses any more. Driven through the library's `Store` against
//! a private `redis-server`, and, for the spool, through real replicas.

use std::time::Duration;

use cronlease::config::Overlap;
use cronlease::outcome::Outcome;
use cronlease::spool::{DEFAULT_MAX_BYTES, Spool};
use cronlease::store::{
    Attempt, ClaimReply, ClaimRequest, DEDUP_MIN_ENTRIES, LockHolderTag, LockReply, LockRequest,
    LockTicket, Recorded, Reentry, Store, dedup_entries,
};

use crate::support::{
    Cluster, RedisServer, claim_request, claimed_outcome, connect_store, hget, now_ms, ok_outcome,
    read_outcomes, runtime, test_claimant, wait_until,
};

/// The prefix `support::write_config_section` gives replicas.
const PREFIX: &str = "cl";
const JOB: &str = "draw";
const LEASE: Duration = Duration::from_secs(10);

async fn store(server: &RedisServer) -> Store {
    connect_store(server, PREFIX, "1s").await
}

fn key(part: &str) -> String {
    format!("{PREFIX}:{{{JOB}}}:{part}")
}

/// Claims `tick` for `run_id` and returns the outcome its run would record
/// (started when the claim said, as a replica's run is).
async fn claim(store: &Store, run_id: &str, tick_ms: i64, history: u32) -> Outcome {
    let request = claim_request(
        JOB,
        run_id,
        tick_ms,
        test_claimant(LEASE, Overlap::Skip, history),
    );
    claimed_outcome(store, &request).await
}

/// Claims and finishes `count` ticks, one second apart from `first_tick`.
async fn run_ticks(store: &Store, first_tick: i64, count: usize, history: u32) {
    for n in 0..count {
        let tick = first_tick + 1000 * n as i64;
        let outcome = claim(store, &format!("run-{tick}"), tick, history).await;
        let reply = store
            .finish(
                &outcome,
                history,
                None,
                Attempt::First,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(reply.recorded, Recorded::Current);
    }
}

#[test]
fn a_retried_claim_whose_first_attempt_won_is_answered_claimed_with_its_fence() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = store(&server).await;
        let tick = now_ms() - 10_000;
        // Overlap allowed: the runs left in flight do not hold the next ticks.
        let claimant = test_claimant(LEASE, Overlap::Allow, 100);
        let first = claim_request(JOB, "won", tick, claimant);
        let ClaimReply::Claimed { fence, .. } = store.claim(&first).await.expect("claim") else {
            panic!("a fresh tick with no rival is claimed");
        };
        // Its reply was lost: the retry carries the same run id.
        let retry = ClaimRequest {
            attempt: Attempt::Again,
            ..first
        };
        match store.claim(&retry).await.expect("claim") {
            ClaimReply::Claimed { fence: again, .. } => assert_eq!(again, fence),
            other => panic!("the retry of a claim that won: expected claimed, got {other:?}"),
        }
        // A rival's first attempt at the same tick finds it taken; the next
        // tick's fence is one more, and at least one above the highest fence
        // the claimant saw (a Redis that lost state).
        let rival = claim_request(JOB, "rival", tick, claimant);
        assert!(matches!(
            store.claim(&rival).await.expect("claim"),
            ClaimReply::Taken { .. }
        ));
        let next = claim_request(JOB, "next", tick + 1_000, claimant);
        let ClaimReply::Claimed { fence: after, .. } = store.claim(&next).await.expect("claim")
        else {
            panic!("the next tick is free");
        };
        assert_eq!(after, fence + 1);
        let seen = cronlease::store::Claimant {
            min_fence: after + 40,
            ..claimant
        };
        let ClaimReply::Claimed { fence: lifted, .. } = store
            .claim(&claim_request(JOB, "lifted", tick + 2_000, seen))
            .await
            .expect("claim")
        else {
            panic!("the tick after is free");
        };
        assert_eq!(lifted, after + 41);
        assert_eq!(
            hget(&server, &key("state"), "fence").as_deref(),
            Some(lifted.to_string().as_str())
        );
    });
}

#[test]
fn a_retried_finish_is_applied_once_within_the_window() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = store(&server).await;
        let tick = now_ms() - 60_000;
        let outcome = claim(&store, "first", tick, 1000).await;
        let first = store
            .finish(
                &outcome,
                1000,
                None,
                Attempt::First,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(first.recorded, Recorded::Current);
        // Other runs are recorded in between (fewer than the window holds).
        run_ticks(&store, tick + 1000, 50, 1000).await;
        let again = store
            .finish(
                &outcome,
                1000,
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
        assert_eq!(again.id, first.id, "the duplicate names the first record");
    });
    let outcomes = read_outcomes(&mut server.client(), PREFIX, JOB);
    let firsts = outcomes.iter().filter(|o| o.run_id() == "first").count();
    assert_eq!(firsts, 1, "the outcome is in the stream once");
}

#[test]
fn an_outcome_the_previous_release_recorded_is_still_a_duplicate_and_found() {
    let server = RedisServer::start();
    let mut redis = server.client();
    // The previous release's window: a hash run id -> stream id, and the
    // sorted set scored by Redis time (a ms or so after the entry's id).
    let id: String = redis::cmd("XADD")
        .arg(key("runs"))
        .arg("*")
        .arg("run_id")
        .arg("legacy")
        .arg("status")
        .arg("ok")
        .query(&mut redis)
        .expect("XADD");
    let ms: i64 = id.split('-').next().unwrap().parse().unwrap();
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(key("done"))
        .arg("legacy")
        .arg(&id)
        .cmd("ZADD")
        .arg(key("done_at"))
        .arg(ms + 3)
        .arg("legacy")
        .query(&mut redis)
        .expect("HSET, ZADD");
    runtime().block_on(async {
        let store = store(&server).await;
        let outcome = ok_outcome(JOB, "legacy", now_ms() - 60_000, 1, key("lease"));
        let again = store
            .finish(
                &outcome,
                1000,
                None,
                Attempt::Again,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(
            (again.recorded, again.id.as_str()),
            (Recorded::Duplicate, id.as_str())
        );
        assert_eq!(
            store
                .done_marker(JOB, "legacy")
                .await
                .expect("Redis answers"),
            Some(id.clone())
        );
        // One recorded now is found by its window's date.
        let outcome = claim(&store, "fresh", now_ms() - 30_000, 1000).await;
        let first = store
            .finish(
                &outcome,
                1000,
                None,
                Attempt::First,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(
            store
                .done_marker(JOB, "fresh")
                .await
                .expect("Redis answers"),
            Some(first.id)
        );
        assert_eq!(
            store
                .done_marker(JOB, "never")
                .await
                .expect("Redis answers"),
            None
        );
    });
}

#[test]
fn an_outcome_delivered_after_the_window_is_recorded_stale_never_current() {
    let server = RedisServer::start();
    let history = 1; // the window is then DEDUP_MIN_ENTRIES run ids
    let window = dedup_entries(history) as usize;
    assert_eq!(window, DEDUP_MIN_ENTRIES as usize);
    runtime().block_on(async {
        let store = store(&server).await;
        let tick = now_ms() - 3_600_000;
        let outcome = claim(&store, "old", tick, history).await;
        let first = store
            .finish(
                &outcome,
                history,
                None,
                Attempt::First,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(first.recorded, Recorded::Current);
        run_ticks(&store, tick + 1000, window, history).await;
        let current_before = hget(&server, &key("state"), "outcome_run_id");
        // The window forgot "old": a late copy (a spool delivered hours
        // later) is recorded, marked stale, and the job's current outcome
        // stays the latest run's.
        let late = store
            .finish(
                &outcome,
                history,
                None,
                Attempt::Again,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(late.recorded, Recorded::Stale);
        assert_eq!(
            hget(&server, &key("state"), "outcome_run_id"),
            current_before
        );
    });
    let outcomes = read_outcomes(&mut server.client(), PREFIX, JOB);
    let late = outcomes
        .iter()
        .rfind(|o| o.run_id() == "old")
        .expect("the late copy is in the stream");
    assert!(late.stale(), "the late copy is marked stale");
}

#[test]
fn a_jobs_keys_after_many_runs_stay_within_the_bound() {
    let server = RedisServer::start();
    let history = 50;
    let runs = 3 * DEDUP_MIN_ENTRIES as usize;
    runtime().block_on(async {
        let store = store(&server).await;
        run_ticks(&store, now_ms() - 2 * 3_600_000, runs, history).await;
    });
    let mut redis = server.client();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{PREFIX}:{{{JOB}}}:*"))
        .query(&mut redis)
        .expect("KEYS");
    let mut sorted = keys.clone();
    sorted.sort();
    // state, the runs stream, and the dedup window: no run in flight, no
    // lease held, no rerun pending.
    assert_eq!(
        sorted,
        ["done_at", "runs", "state"].map(key),
        "after {runs} runs"
    );
    let window = dedup_entries(history) as i64;
    let done_at: i64 = redis::cmd("ZCARD")
        .arg(key("done_at"))
        .query(&mut redis)
        .unwrap();
    assert_eq!(done_at, window);
    // MAXLEN ~ trims whole stream nodes (100 entries by default).
    let stream: i64 = redis::cmd("XLEN")
        .arg(key("runs"))
        .query(&mut redis)
        .unwrap();
    assert!(stream <= i64::from(history) + 100, "stream holds {stream}");
    // A job removed from the table: its window expires after 7 days.
    let ttl: i64 = redis::cmd("PTTL")
        .arg(key("done_at"))
        .query(&mut redis)
        .unwrap();
    assert!(ttl > 6 * 24 * 3_600_000, "done expires in {ttl} ms");
}

#[test]
fn a_spooled_outcome_delivered_twice_by_two_replicas_is_applied_once() {
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = format!("[jobs.{JOB}]\nschedule = \"@yearly\"\ncommand = [\"true\"]\n");
    // The run's replica lost Redis's reply to its finish: its outcome went
    // to the spool, and (say the spool was restored on a second host) two
    // replicas hold a copy. Redis did record it the first time.
    let outcome = runtime().block_on(async {
        let store = store(&cluster.redis).await;
        let outcome = claim(&store, "spooled", now_ms() - 10_000, 1000).await;
        let reply = store
            .finish(
                &outcome,
                1000,
                None,
                Attempt::First,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(reply.recorded, Recorded::Current);
        outcome
    });
    for name in ["alpha", "bravo"] {
        cluster.config(name, "", &jobs);
        let spool = Spool::open(&cluster.path(name).join("state"), DEFAULT_MAX_BYTES)
            .expect("open the spool");
        spool.save(&outcome).expect("spool the outcome");
    }
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    for name in ["alpha", "bravo"] {
        let spool = Spool::open(&cluster.path(name).join("state"), DEFAULT_MAX_BYTES)
            .expect("open the spool");
        wait_until(Duration::from_secs(20), "the spool delivered", || {
            spool.pending().ok().filter(|p| p.is_empty()).map(|_| ())
        });
    }
    let copies = cluster
        .outcomes(JOB)
        .iter()
        .filter(|o| o.run_id() == "spooled")
        .count();
    assert_eq!(copies, 1, "recorded once\n{}", cluster.logs());
    cluster.stop_all();
}

#[test]
fn a_replica_silent_for_a_day_is_forgotten_with_its_trigger_consumer() {
    let mut cluster = Cluster::new(RedisServer::start());
    let mut redis = cluster.redis.client();
    let day_ago = now_ms() - 25 * 3_600_000;
    let record = serde_json::json!({
        "host": "gone", "pid": 1, "version": "0.1.0", "started_ms": day_ago,
        "last_seen_ms": day_ago, "heartbeat_ms": 1000, "lease_ms": 2000,
        "config_hash": {}, "runs": [],
    });
    let _: () = redis::cmd("HSET")
        .arg(format!("{PREFIX}:replicas"))
        .arg("gone")
        .arg(record.to_string())
        .query(&mut redis)
        .expect("HSET replicas");
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(format!("{PREFIX}:triggers"))
        .arg("replicas")
        .arg("$")
        .arg("MKSTREAM")
        .query(&mut redis)
        .expect("XGROUP CREATE");
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg(format!("{PREFIX}:triggers"))
        .arg("replicas")
        .arg("gone")
        .query(&mut redis)
        .expect("XGROUP CREATECONSUMER");
    let jobs = format!("[jobs.{JOB}]\nschedule = \"@yearly\"\ncommand = [\"true\"]\n");
    cluster.start("alpha", &jobs);
    cluster.wait_ready();
    wait_until(
        Duration::from_secs(20),
        "the silent replica forgotten",
        || {
            let known: bool = redis::cmd("HEXISTS")
                .arg(format!("{PREFIX}:replicas"))
                .arg("gone")
                .query(&mut redis)
                .expect("HEXISTS");
            (!known).then_some(())
        },
    );
    let consumers = |redis: &mut redis::Connection| -> Vec<String> {
        let info: Vec<Vec<redis::Value>> = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(format!("{PREFIX}:triggers"))
            .arg("replicas")
            .query(redis)
            .expect("XINFO CONSUMERS");
        info.iter()
            .filter_map(|fields| {
                let name = fields.get(1)?;
                redis::from_redis_value::<String>(name.clone()).ok()
            })
            .collect()
    };
    // The consumer goes with a command of its own after the record (the
    // triggers stream is in another hash slot than the replicas' hash).
    wait_until(
        Duration::from_secs(10),
        "the silent replica's trigger consumer deleted",
        || (!consumers(&mut redis).contains(&"gone".to_string())).then_some(()),
    );
    // A clean shutdown takes this replica's heartbeat and consumer with it.
    cluster.stop_all();
    let known: bool = redis::cmd("HEXISTS")
        .arg(format!("{PREFIX}:replicas"))
        .arg("alpha")
        .query(&mut redis)
        .expect("HEXISTS");
    assert!(!known, "alpha's heartbeat outlived its shutdown");
    assert!(
        consumers(&mut redis).is_empty(),
        "{:?}",
        consumers(&mut redis)
    );
}

/// A plain acquisition by `holder`, as the library asks it.
fn request(holder: &LockHolderTag) -> LockRequest<'_> {
    LockRequest {
        reentry: Reentry::Once,
        lease: LEASE,
        holder,
        since_ms: now_ms(),
    }
}

/// Acquires `lock` (free, or held by this very ticket) and releases it;
/// the fence it was granted.
async fn grant_and_release(
    store: &Store,
    lock: &LockTicket,
    holder: &LockHolderTag,
) -> Option<u64> {
    let reply = store
        .lock_acquire(lock, request(holder))
        .await
        .expect("lock");
    assert!(
        store
            .lock_release(lock, Reentry::Once)
            .await
            .expect("release")
    );
    reply.granted()
}

#[test]
fn an_old_lock_state_is_kept_by_the_next_grant_with_a_higher_fence() {
    let server = RedisServer::start();
    let state = format!("{PREFIX}:{{lock:busy}}:state");
    // A state made 29 and a half days ago (its fence started from the
    // Redis time in µs then), an hour from its expiry.
    let made_ms = now_ms() - 29 * 24 * 3_600_000 - 12 * 3_600_000;
    let old_fence = made_ms * 1000 + 5;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&state)
        .arg("fence")
        .arg(old_fence)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&state)
        .arg(3_600_000)
        .ignore()
        .query(&mut server.client())
        .expect("HSET, PEXPIRE");
    let pttl = || -> i64 {
        redis::cmd("PTTL")
            .arg(&state)
            .query(&mut server.client())
            .expect("PTTL")
    };
    let fences = runtime().block_on(async {
        let store = store(&server).await;
        let holder = LockHolderTag::new("test", "localhost");
        let mut fences = Vec::new();
        for round in 0..2 {
            let lock = store.lock_ticket("busy", &format!("{round}"));
            fences.extend(grant_and_release(&store, &lock, &holder).await);
            // The first grant pushed the expiry back 30 days; the second,
            // of a state as good as new, leaves it.
            assert!(pttl() > 29 * 24 * 3_600_000, "round {round}: {} ms", pttl());
        }
        fences
    });
    let now_us = now_ms() * 1000;
    assert!(
        fences[0] as i64 > old_fence && (now_us - 60_000_000..now_us).contains(&(fences[0] as i64)),
        "fences {fences:?} after {old_fence}: lifted to the Redis time"
    );
    assert_eq!(fences[1], fences[0] + 1);
}

#[test]
fn a_lock_forgets_its_keys_when_unused_and_its_fence_still_grows() {
    let server = RedisServer::start();
    let state = format!("{PREFIX}:{{lock:nightly}}:state");
    let forget = || {
        let _: i64 = redis::cmd("DEL")
            .arg(&state)
            .query(&mut server.client())
            .expect("DEL");
    };
    // A fence an older cronlease handed out: its restart rule began from
    // the Redis time in ms, and a busy lock ran ahead of it. It kept the
    // state 30 days after the last acquisition.
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&state)
        .arg("fence")
        .arg(now_ms() + 1_000_000_000)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&state)
        .arg(30 * 24 * 3_600_000_u64)
        .ignore()
        .query(&mut server.client())
        .expect("HSET, PEXPIRE");
    let fences = runtime().block_on(async {
        let store = store(&server).await;
        let holder = LockHolderTag::new("test", "localhost");
        let mut fences = Vec::new();
        for round in 0..4 {
            // Rounds 0 and 1: one acquisition. Rounds 2 and 3: a busy lock,
            // 300 acquisitions in a few ms (more than one a ms: the fence
            // runs ahead of the time in ms, not of the time in µs).
            let acquisitions = if round < 2 { 1 } else { 300 };
            for i in 0..acquisitions {
                let lock = store.lock_ticket("nightly", &format!("{round}-{i}"));
                let reply = store
                    .lock_acquire(&lock, request(&holder))
                    .await
                    .expect("lock");
                let LockReply::Acquired { fence } = reply else {
                    panic!("a free lock: expected acquired, got {reply:?}");
                };
                fences.push(fence);
                assert!(
                    store
                        .lock_release(&lock, Reentry::Once)
                        .await
                        .expect("release")
                );
            }
            // The state expires 30 days after it was made, and acquisitions
            // do not push that back (the lease lives as long as it is held).
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&state)
                .query(&mut server.client())
                .expect("PTTL");
            assert!(
                ttl > 29 * 24 * 3_600_000,
                "the lock state expires in {ttl} ms"
            );
            // Simulate those 30 days passing.
            forget();
        }
        // An acquisition leaves the state's expiry where it was; a
        // released lock leaves no lease.
        let lock = store.lock_ticket("nightly", "last");
        store
            .lock_acquire(&lock, request(&holder))
            .await
            .expect("lock");
        let _: i64 = redis::cmd("PEXPIRE")
            .arg(&state)
            .arg(3_600_000)
            .query(&mut server.client())
            .expect("PEXPIRE");
        assert!(
            store
                .lock_release(&lock, Reentry::Once)
                .await
                .expect("release")
        );
        fences.extend(grant_and_release(&store, &lock, &holder).await);
        let (ttl, lease): (i64, i64) = redis::pipe()
            .cmd("PTTL")
            .arg(&state)
            .cmd("EXISTS")
            .arg(format!("{PREFIX}:{{lock:nightly}}:lease"))
            .query(&mut server.client())
            .expect("PTTL, EXISTS");
        assert!(
            (1..=3_600_000).contains(&ttl) && lease == 0,
            "state expires in {ttl} ms, lease exists: {lease}"
        );
        fences
    });
    assert!(
        fences.windows(2).all(|pair| pair[1] > pair[0]),
        "fences {fences:?}: each above the last, across forgotten keys"
    );
    // After the first expiry, a forgotten lock's fence starts from the
    // Redis time in µs.
    let now_us = now_ms() * 1000;
    assert!(
        (now_us - 60_000_000..now_us).contains(&(fences[1] as i64)),
        "fence {} after the keys expired",
        fences[1]
    );
}
