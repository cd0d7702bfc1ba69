//! The library's cluster locks (`Cluster::lock`) against a private Redis,
//! each contender on its own connection: one holder at a time with rising
//! fences, a waiter woken by the release (and silent while it waits), and
//! `lost()` when the lease can no longer be proven (its key deleted, or
//! Redis paused past it), reentrancy, quorum, and who holds it.

use std::time::Duration;

use cronlease::{Cluster, LockError, RedisSettings};

use crate::support::{RedisServer, cluster, multi_thread_runtime as runtime};

const PREFIX: &str = "cl";

/// Commands Redis has executed so far (`INFO stats`).
fn commands(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut redis.client())
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats has total_commands_processed")
}

#[test]
fn one_holder_at_a_time_with_rising_fences() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let (a, b) = (cluster(&redis).await, cluster(&redis).await);
        let first = a
            .lock("migration")
            .holder("a")
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        assert!(
            b.lock("migration")
                .try_acquire()
                .await
                .expect("Redis answers")
                .is_none(),
            "two holders at once"
        );
        let first_fence = first.fence();
        assert!(
            first.release().await.expect("Redis answers"),
            "the holder releases"
        );
        let second = b
            .lock("migration")
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("free again after the release");
        assert!(
            second.fence() > first_fence,
            "{} after {first_fence}",
            second.fence()
        );
        second.release().await.expect("Redis answers");
    });
}

#[test]
fn a_vanished_holder_is_replaced_by_the_next_acquisition() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let (a, b) = (cluster(&redis).await, cluster(&redis).await);
        let lease = Duration::from_secs(1);
        let vanished = a
            .lock("report")
            .holder("a")
            .lease(lease)
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        let vanished_fence = vanished.fence();
        // Dropped without a release: the renewals stop, the record stays
        // until the lease lapses and someone takes the lock.
        drop(vanished);
        let next = b
            .lock("report")
            .holder("b")
            .acquire_within(Duration::from_secs(10))
            .await
            .expect("Redis answers")
            .expect("the lease lapses");
        assert!(next.fence() > vanished_fence);
        let info = b
            .lock("report")
            .info()
            .await
            .expect("Redis answers")
            .expect("held");
        assert_eq!(
            (info.holder.as_str(), info.fence, info.holds),
            ("b", next.fence(), 1)
        );
        // A lock is its lease and its state; nothing of it in `running`.
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{PREFIX}:{{lock:report}}:*"))
            .query(&mut redis.client())
            .expect("KEYS");
        keys.sort();
        assert_eq!(
            keys,
            [
                format!("{PREFIX}:{{lock:report}}:lease"),
                format!("{PREFIX}:{{lock:report}}:state")
            ]
        );
        next.release().await.expect("Redis answers");
    });
}

#[test]
fn a_waiter_sleeps_until_the_release_wakes_it() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let (a, b) = (cluster(&redis).await, cluster(&redis).await);
        let held = a
            .lock("report")
            .lease(Duration::from_secs(30))
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        let waiter = tokio::spawn(async move {
            let guard = b.lock("report").acquire().await.expect("Redis answers");
            let fence = guard.fence();
            guard.release().await.expect("Redis answers");
            fence
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = commands(&redis);
        tokio::time::sleep(Duration::from_secs(3)).await;
        // The holder's renewals (every 10 s) and the two INFO calls; the
        // waiter sends nothing while it waits.
        let spent = commands(&redis) - before;
        assert!(spent <= 4, "{spent} commands in 3 s of waiting");
        let held_fence = held.fence();
        held.release().await.expect("Redis answers");
        // Long before the holder's 30 s lease could have lapsed.
        let fence = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the release woke the waiter")
            .expect("the waiter does not panic");
        assert!(fence > held_fence);
    });
}

#[test]
fn a_release_is_published_only_when_someone_asked_for_the_lock_meanwhile() {
    let redis = RedisServer::start();
    let mut listener = redis.client();
    let mut releases = listener.as_pubsub();
    releases
        .subscribe(format!("{PREFIX}:{{lock:report}}:released"))
        .expect("SUBSCRIBE");
    releases
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("a read timeout");
    let rt = runtime();
    let (a, b) = rt.block_on(async { (cluster(&redis).await, cluster(&redis).await) });
    let take = || async {
        a.lock("report")
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free")
    };
    // Nobody asked for it while it was held: the release publishes nothing.
    rt.block_on(async { assert!(take().await.release().await.expect("Redis answers")) });
    assert!(
        releases.get_message().is_err(),
        "a release was published though nobody asked for the lock"
    );
    // A waiter, then a try that gives up at once: one release, published.
    let held = rt.block_on(take());
    let waiter = rt.spawn(async move {
        let guard = b.lock("report").acquire().await.expect("Redis answers");
        let fence = guard.fence();
        guard.release().await.expect("Redis answers");
        fence
    });
    rt.block_on(async {
        let lease = format!("{PREFIX}:{{lock:report}}:lease");
        for _ in 0..100 {
            let record: String = redis::cmd("GET")
                .arg(&lease)
                .query(&mut redis.client())
                .expect("GET");
            if record.ends_with('w') {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            a.lock("report")
                .try_acquire()
                .await
                .expect("Redis answers")
                .is_none()
        );
        let held_fence = held.fence();
        assert!(held.release().await.expect("Redis answers"));
        let fence = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the release woke the waiter")
            .expect("the waiter does not panic");
        assert!(fence > held_fence);
    });
    // The holder's release (the refused attempts marked its record); the
    // waiter's own release, which nobody asked for, is silent.
    let message = releases.get_message().expect("the release published");
    assert_eq!(
        message.get_channel_name(),
        format!("{PREFIX}:{{lock:report}}:released")
    );
    assert!(
        releases.get_message().is_err(),
        "the waiter's release was published though nobody asked for the lock"
    );
}

#[test]
fn lost_fires_when_the_lease_is_gone() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let a = cluster(&redis).await;
        let guard = a
            .lock("nightly")
            .lease(Duration::from_secs(3))
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        // Held: lost() stays pending while the renewals get through.
        assert!(
            tokio::time::timeout(Duration::from_millis(2500), guard.lost())
                .await
                .is_err(),
            "lost() fired while the lock was held"
        );
        let _: () = redis::cmd("DEL")
            .arg(format!("{PREFIX}:{{lock:nightly}}:lease"))
            .query(&mut redis.client())
            .expect("DEL");
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("lost() fired after the lease key was deleted");
        assert!(
            !guard.release().await.expect("Redis answers"),
            "released a lock it had lost"
        );
    });
}

#[test]
fn a_renewal_keeps_the_state_of_a_held_lock_and_makes_it_again_if_gone() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let a = cluster(&redis).await;
        let guard = a
            .lock("kept")
            .lease(Duration::from_secs(1))
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        let state = format!("{PREFIX}:{{lock:kept}}:state");
        // Gone under the holder (a holder whose clock ran days behind could
        // see it expire): the next renewal, within a third of the lease,
        // makes it again with the holder's fence and the idle TTL.
        let _: () = redis::cmd("DEL")
            .arg(&state)
            .query(&mut redis.client())
            .expect("DEL");
        tokio::time::sleep(Duration::from_millis(800)).await;
        let (fence, ttl): (Option<u64>, i64) = redis::pipe()
            .cmd("HGET")
            .arg(&state)
            .arg("fence")
            .cmd("PTTL")
            .arg(&state)
            .query(&mut redis.client())
            .expect("HGET, PTTL");
        assert_eq!(fence, Some(guard.fence()));
        assert!(ttl > 29 * 24 * 3_600_000, "the state expires in {ttl} ms");
        let info = a
            .lock("kept")
            .info()
            .await
            .expect("Redis answers")
            .expect("held");
        assert_eq!(info.fence, guard.fence());
        let fence = guard.fence();
        assert!(guard.release().await.expect("Redis answers"));
        let next = a
            .lock("kept")
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("free");
        assert_eq!(next.fence(), fence + 1);
        assert!(next.release().await.expect("Redis answers"));
    });
}

#[test]
fn one_keeper_renews_every_held_lock_and_reports_each_loss_alone() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let a = cluster(&redis).await;
        let take = |name: &'static str, lease_ms: u64| {
            let a = a.clone();
            async move {
                a.lock(name)
                    .lease(Duration::from_millis(lease_ms))
                    .try_acquire()
                    .await
                    .expect("Redis answers")
                    .expect("the lock is free")
            }
        };
        // Two leases, renewed by the cluster's one keeper at their own pace.
        let (short, long) = (take("short", 1000).await, take("long", 1500).await);
        let either_lost = || async {
            tokio::select! {
                () = short.lost() => "short",
                () = long.lost() => "long",
            }
        };
        let lost = tokio::time::timeout(Duration::from_secs(3), either_lost()).await;
        assert!(lost.is_err(), "{lost:?} lost while both were renewed");
        let pttl = |name: &str| {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(format!("{PREFIX}:{{lock:{name}}}:lease"))
                .query(&mut redis.client())
                .expect("PTTL");
            ttl
        };
        // Three seconds on, past both leases: still there.
        assert!(pttl("short") > 0 && pttl("long") > 0);
        let _: () = redis::cmd("DEL")
            .arg(format!("{PREFIX}:{{lock:short}}:lease"))
            .query(&mut redis.client())
            .expect("DEL");
        tokio::time::timeout(Duration::from_secs(3), short.lost())
            .await
            .expect("lost() fired for the lock whose lease was deleted");
        assert!(
            tokio::time::timeout(Duration::from_secs(2), long.lost())
                .await
                .is_err(),
            "the other lock was reported lost too"
        );
        assert!(pttl("long") > 0, "the other lock is still renewed");
        assert!(!short.release().await.expect("Redis answers"));
        assert!(long.release().await.expect("Redis answers"));
    });
}

#[test]
fn a_quorum_lock_holds_with_a_majority_and_is_refused_clearly_without_one() {
    let mut servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let rt = runtime();
    let quorum = || async {
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        Cluster::connect(
            RedisSettings::quorum(&urls)
                .key_prefix(PREFIX)
                .command_timeout(Duration::from_millis(300))
                .connect_timeout(Duration::from_millis(300)),
        )
        .await
        .expect("the test's masters answer")
    };
    let (a, b) = rt.block_on(async { (quorum().await, quorum().await) });
    // Each master starts the lock's fence from its own clock; the holder's
    // is the highest, and a re-entry and `info` (the first master's) read
    // that one.
    rt.block_on(async {
        let owner = "quorum-owner";
        let outer = a
            .lock("reentered")
            .owner(owner)
            .try_acquire()
            .await
            .expect("the masters answer")
            .expect("free");
        let inner = b
            .lock("reentered")
            .owner(owner)
            .try_acquire()
            .await
            .expect("the masters answer")
            .expect("the owner re-enters");
        let info = a
            .lock("reentered")
            .info()
            .await
            .expect("the masters answer")
            .expect("held");
        assert_eq!(
            (inner.fence(), info.fence, info.holds),
            (outer.fence(), outer.fence(), 2)
        );
        assert!(inner.release().await.expect("the masters answer"));
        assert!(outer.release().await.expect("the masters answer"));
    });
    let first = rt.block_on(async {
        let first = a
            .lock("ledger")
            .try_acquire()
            .await
            .expect("the masters answer")
            .expect("free");
        assert!(
            b.lock("ledger")
                .try_acquire()
                .await
                .expect("the masters answer")
                .is_none(),
            "two holders of a quorum lock"
        );
        let fence = first.fence();
        assert!(first.release().await.expect("the masters answer"));
        fence
    });
    // One master down: a majority still grants it, with a higher fence.
    servers[0].kill9();
    rt.block_on(async {
        let guard = b
            .lock("ledger")
            .try_acquire()
            .await
            .expect("two of three masters answer")
            .expect("free");
        assert!(guard.fence() > first, "{} after {first}", guard.fence());
        assert!(guard.release().await.expect("two of three masters answer"));
    });
    // Two down: refused, saying why.
    servers[1].kill9();
    rt.block_on(async {
        let error = match a.lock("ledger").try_acquire().await {
            Err(e) => e.to_string(),
            Ok(guard) => panic!(
                "granted by one master of three: {:?}",
                guard.map(|g| g.fence())
            ),
        };
        assert!(
            error.contains("quorum not reached for lock")
                && error.contains("a majority of 2 needed"),
            "{error}"
        );
    });
}

#[test]
fn a_reentrant_lock_is_free_after_as_many_releases_as_acquisitions() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let (a, b) = (cluster(&redis).await, cluster(&redis).await);
        let owner = "settlement-2026-11-24";
        let outer = a
            .lock("ledger")
            .owner(owner)
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("free");
        // The same owner, from another connection (another instance).
        let inner = b
            .lock("ledger")
            .owner(owner)
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the owner re-enters");
        assert_eq!(inner.fence(), outer.fence());
        let other = || async {
            b.lock("ledger")
                .owner("someone-else")
                .try_acquire()
                .await
                .expect("Redis answers")
        };
        assert!(other().await.is_none(), "another owner took a held lock");
        assert!(inner.release().await.expect("Redis answers"));
        assert!(
            other().await.is_none(),
            "free after one release of two holds"
        );
        let fence = outer.fence();
        assert!(outer.release().await.expect("Redis answers"));
        let next = other().await.expect("free after the last release");
        assert!(next.fence() > fence);
        next.release().await.expect("Redis answers");
    });
}

#[test]
fn who_holds_a_lock_is_shown_by_the_library_and_by_status() {
    let redis = RedisServer::start();
    let status = |name: &str| {
        let run = crate::support::cronlease([
            "status",
            "--json",
            "--redis-url",
            &redis.url(),
            "--prefix",
            PREFIX,
            "--lock",
            name,
        ]);
        assert_eq!(run.code(), Some(0), "{}", run.describe());
        let report: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
        report["locks"][0].clone()
    };
    let rt = runtime();
    let a = rt.block_on(cluster(&redis));
    let guard = rt.block_on(async {
        let guard = a
            .lock("backup")
            .holder("night-shift")
            .lease(Duration::from_secs(20))
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("free");
        let info = a
            .lock("backup")
            .info()
            .await
            .expect("Redis answers")
            .expect("held");
        assert_eq!(
            (info.holder.as_str(), info.fence, info.holds),
            ("night-shift", guard.fence(), 1)
        );
        assert!(
            (Duration::from_millis(1)..=Duration::from_secs(20)).contains(&info.time_left),
            "{info:?}"
        );
        guard
    });
    let shown = status("backup");
    assert_eq!(shown["holder"], "night-shift", "{shown}");
    assert_eq!(shown["fence"].as_u64(), Some(guard.fence()), "{shown}");
    rt.block_on(async {
        guard.release().await.expect("Redis answers");
        assert!(
            a.lock("backup")
                .info()
                .await
                .expect("Redis answers")
                .is_none()
        );
    });
    assert!(status("backup")["holder"].is_null());
}

#[test]
fn lost_fires_when_redis_is_paused_past_the_lease() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let a = cluster(&redis).await;
        let guard = a
            .lock("paused")
            .lease(Duration::from_secs(2))
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        let paused_at = std::time::Instant::now();
        let _: () = redis::cmd("CLIENT")
            .arg(&["PAUSE", "5000", "ALL"])
            .query(&mut redis.client())
            .expect("CLIENT PAUSE");
        // The renewals cannot get through: at the local deadline (the last
        // renewal sent + lease - lease/5) the lease is no longer provable,
        // before Redis comes back.
        tokio::time::timeout(Duration::from_secs(4), guard.lost())
            .await
            .expect("lost() fired while Redis was paused");
        assert!(paused_at.elapsed() < Duration::from_secs(5));
    });
}

#[test]
fn a_bad_name_or_lease_is_refused_before_redis_hears_of_it() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let cluster = cluster(&redis).await;
        let before = commands(&redis);
        let error = cluster
            .lock("report{x}")
            .try_acquire()
            .await
            .expect_err("a brace would break the keys' hash tag");
        assert!(
            matches!(&error, LockError::Name(name) if name == "report{x}"),
            "{error:?}"
        );
        // The test cluster's command timeout is 300 ms: a lease must be
        // at least 1 s.
        for lease in [
            Duration::ZERO,
            Duration::from_millis(900),
            Duration::from_secs(7200),
        ] {
            let error = cluster
                .lock("report")
                .lease(lease)
                .try_acquire()
                .await
                .expect_err("an unusable lease");
            let LockError::Lease {
                minimum, maximum, ..
            } = error
            else {
                panic!("{error:?}");
            };
            assert_eq!(
                (minimum, maximum),
                (Duration::from_secs(1), Duration::from_secs(3600))
            );
            assert!(error.to_string().contains("expected 1s to 1h"), "{error}");
        }
        // INFO itself is the only command Redis saw.
        assert_eq!(
            commands(&redis) - before,
            1,
            "nothing sent for a refused lock"
        );
        let guard = cluster
            .lock("report")
            .lease(Duration::from_secs(1))
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        guard.release().await.expect("Redis answers");
    });
}

#[test]
fn existing_locks_are_listed_from_the_registry_without_a_keyspace_scan() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let cluster = cluster(&redis).await;
        let store = crate::support::connect_store(&redis, PREFIX, "1s").await;
        let migration = cluster
            .lock("migration")
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        let backup = cluster
            .lock("backup")
            .try_acquire()
            .await
            .expect("Redis answers")
            .expect("the lock is free");
        assert_eq!(
            store.lock_names().await.expect("Redis answers"),
            ["backup", "migration"]
        );
        assert!(backup.release().await.expect("Redis answers"));
        assert_eq!(
            store.lock_names().await.expect("Redis answers"),
            ["migration"],
            "a released lock is not listed"
        );
        drop(migration);
    });
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.client())
        .expect("INFO");
    assert!(!stats.contains("cmdstat_scan"), "{stats}");
}
