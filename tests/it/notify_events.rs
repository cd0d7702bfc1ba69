//! Notification events as the scripts write them, read through the store
//! as the replicas' notifiers read them: which outcomes cause which events,
//! how a failing streak collapses, the dead man's switch, a replica's
//! death told once, and the consumer group's hand-over of an entry whose
//! reader died. Real Redis, no replica: each script's effect is checked
//! answer by answer.

use std::time::Duration;

use cronlease::config::Overlap;
use cronlease::outcome::Status;
use cronlease::store::{Attempt, EventRecord, NoticeRules, Notices, Store, SweepRequest};

use crate::support::{RedisServer, now_ms, runtime};
use crate::support::{claim_request, claimed_outcome, connect_store, test_claimant};

const EVERY_EVENT: &[&str] = &[
    "failed",
    "timeout",
    "recovered",
    "missed",
    "lost_lease",
    "abandoned",
    "late",
    "overdue",
];

fn notices(store: &Store, job: &str, repeat_every: Duration) -> Notices {
    let channels = ["ops".to_string(), "mail".to_string()];
    Notices::new(
        store.keys(),
        &NoticeRules {
            job,
            events: EVERY_EVENT,
            channels: &channels,
            repeat_every,
            late_after: Some(Duration::from_secs(60)),
        },
    )
}

/// Every entry of `job`'s events stream, oldest first, read as consumer
/// `reader` (so they become pending for it).
async fn read_all(store: &Store, stream: &str, reader: &str) -> Vec<EventRecord> {
    store
        .read_events(stream, reader, 100_000)
        .await
        .expect("read events")
}

/// Claims tick `i` of `job` and records `status` for it with `notices`.
async fn run_once(store: &Store, job: &str, tick_ms: i64, status: Status, notices: &Notices) {
    let claimant = test_claimant(Duration::from_secs(30), Overlap::Skip, 100);
    let run_id = uuid::Uuid::new_v4().to_string();
    let request = claim_request(job, &run_id, tick_ms, claimant);
    let outcome = cronlease::outcome::Outcome {
        status,
        ..claimed_outcome(store, &request).await
    };
    store
        .finish(
            &outcome,
            100,
            None,
            Attempt::First,
            (notices, cronlease::store::GroupSlot::None),
        )
        .await
        .expect("finish");
}

#[test]
fn a_thousand_failures_are_told_once_then_recovered_once_per_channel() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "2s").await;
        let rules = notices(&store, "draw", Duration::from_secs(3600));
        let start = now_ms() - 10_000_000;
        for i in 0..1000 {
            run_once(&store, "draw", start + i * 1000, Status::Failed, &rules).await;
        }
        let stream = store.keys().events("draw");
        let told = read_all(&store, &stream, "r1").await;
        let kinds: Vec<(&str, &str)> = told
            .iter()
            .map(|e| (e.event.as_str(), e.channel.as_str()))
            .collect();
        assert_eq!(kinds, [("failed", "ops"), ("failed", "mail")], "{told:#?}");
        assert_eq!(told[0].count, Some(1));
        assert_eq!(told[0].job.as_deref(), Some("draw"));
        assert_eq!(told[0].tick_ms, Some(start));
        assert!(told[0].fence.is_some() && told[0].run_id.is_some());

        run_once(&store, "draw", start + 1_000_000, Status::Ok, &rules).await;
        let told = read_all(&store, &stream, "r1").await;
        let kinds: Vec<&str> = told.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(kinds, ["recovered", "recovered"]);
        assert_eq!(
            told[0].count,
            Some(1000),
            "the streak's failures are counted"
        );
        assert_eq!(told[0].failing_since_ms.map(|ms| ms > 0), Some(true));

        // A second ok is no news.
        run_once(&store, "draw", start + 1_001_000, Status::Ok, &rules).await;
        assert!(read_all(&store, &stream, "r1").await.is_empty());
    });
}

#[test]
fn a_failing_streak_reminds_once_per_repeat_period_and_each_kind_is_its_own_event() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "2s").await;
        let rules = notices(&store, "draw", Duration::ZERO);
        let start = now_ms() - 10_000_000;
        let statuses = [
            Status::Failed,
            Status::Timeout,
            Status::LostLease,
            Status::Failed,
        ];
        for (i, status) in statuses.into_iter().enumerate() {
            run_once(&store, "draw", start + i as i64 * 1000, status, &rules).await;
        }
        let told = read_all(&store, &store.keys().events("draw"), "r1").await;
        let ops: Vec<(&str, Option<u64>)> = told
            .iter()
            .filter(|e| e.channel == "ops")
            .map(|e| (e.event.as_str(), e.count))
            .collect();
        assert_eq!(
            ops,
            [
                ("failed", Some(1)),
                ("timeout", Some(2)),
                ("lost_lease", Some(3)),
                ("failed", Some(4)),
            ]
        );
    });
}

#[test]
fn no_rules_no_events_and_a_stale_outcome_tells_nothing() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "2s").await;
        let none = Notices::none();
        run_once(&store, "quiet", now_ms() - 5000, Status::Failed, &none).await;
        let mut conn = server.client();
        let exists: i64 = redis::cmd("EXISTS")
            .arg(store.keys().events("quiet"))
            .query(&mut conn)
            .expect("EXISTS");
        assert_eq!(exists, 0, "a job without rules has no events stream");

        // The same outcome delivered again (a spooled copy): a duplicate,
        // no second event.
        let rules = notices(&store, "draw", Duration::from_secs(3600));
        let claimant = test_claimant(Duration::from_secs(30), Overlap::Skip, 100);
        let request = claim_request("draw", "run-1", now_ms() - 5000, claimant);
        let outcome = cronlease::outcome::Outcome {
            status: Status::Failed,
            ..claimed_outcome(&store, &request).await
        };
        for attempt in [Attempt::First, Attempt::Again] {
            store
                .finish(
                    &outcome,
                    100,
                    None,
                    attempt,
                    (&rules, cronlease::store::GroupSlot::None),
                )
                .await
                .expect("finish");
        }
        let told = read_all(&store, &store.keys().events("draw"), "r1").await;
        assert_eq!(told.len(), 2, "one event, once per channel: {told:#?}");
    });
}

#[test]
fn missed_abandoned_and_late_are_told_by_the_script_that_records_them() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "2s").await;
        let rules = notices(&store, "draw", Duration::from_secs(3600));
        let stream = store.keys().events("draw");
        let mut claimant = test_claimant(Duration::from_millis(200), Overlap::Skip, 100);
        claimant.notices = &rules;

        let ticks: Vec<(i64, Option<cronlease::calendar::Exclusion>)> = (1..=3)
            .map(|i| (1_700_000_000_000 + i * 60_000, None))
            .collect();
        let recorded = store
            .record_missed("draw", &ticks, &claimant)
            .await
            .expect("missed");
        assert_eq!(recorded, 3);
        // A retry of the same call records nothing and tells nothing.
        store
            .record_missed("draw", &ticks, &claimant)
            .await
            .expect("missed again");
        let told = read_all(&store, &stream, "r1").await;
        assert_eq!(told.len(), 2, "one missed event per channel: {told:#?}");
        assert_eq!(told[0].event, "missed");
        assert_eq!(told[0].count, Some(3));
        assert_eq!(told[0].tick_ms, Some(ticks[0].0));
        assert_eq!(told[0].last_tick_ms, Some(ticks[2].0));

        // Claimed two minutes after its tick (late_after is one minute).
        let late_tick = now_ms() - 120_000;
        let request = claim_request("draw", "late-run", late_tick, claimant);
        claimed_outcome(&store, &request).await;
        let told = read_all(&store, &stream, "r1").await;
        assert_eq!(told.len(), 2, "{told:#?}");
        assert_eq!(told[0].event, "late");
        assert!(told[0].late_ms.is_some_and(|ms| ms >= 120_000));

        // Its lease lapses: the sweep records it abandoned, and tells.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let swept = store
            .sweep(&SweepRequest {
                job: "draw",
                claimant,
                rerun: None,
            })
            .await
            .expect("sweep");
        assert_eq!(swept.abandoned, 1);
        let told = read_all(&store, &stream, "r1").await;
        let kinds: Vec<&str> = told.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(kinds, ["abandoned", "abandoned"]);
        assert_eq!(told[0].run_id.as_deref(), Some("late-run"));
    });
}

#[test]
fn overdue_is_told_once_per_silence_whoever_asks() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "2s").await;
        let rules = notices(&store, "draw", Duration::from_secs(3600));
        let within = Duration::from_millis(300);
        assert!(
            !store
                .check_overdue("draw", within, &rules)
                .await
                .expect("check"),
            "the first look starts the watch"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        // Two replicas asking at once, and again: one event.
        let (a, b) = tokio::join!(
            store.check_overdue("draw", within, &rules),
            store.check_overdue("draw", within, &rules)
        );
        assert_eq!(u8::from(a.expect("a")) + u8::from(b.expect("b")), 1);
        assert!(
            !store
                .check_overdue("draw", within, &rules)
                .await
                .expect("again")
        );

        // An ok ends the silence; the next one is told again.
        run_once(&store, "draw", now_ms() - 1000, Status::Ok, &rules).await;
        assert!(
            !store
                .check_overdue("draw", within, &rules)
                .await
                .expect("after ok")
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            store
                .check_overdue("draw", within, &rules)
                .await
                .expect("later")
        );

        let told = read_all(&store, &store.keys().events("draw"), "r1").await;
        let kinds: Vec<&str> = told.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(kinds, ["overdue", "overdue", "overdue", "overdue"]);
        assert_eq!(told[0].within_ms, Some(300));
    });
}

#[test]
fn a_dead_replica_is_told_once_and_again_only_after_it_spoke() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "2s").await;
        let channels = ["ops".to_string()];
        let rules = Notices::new(
            store.keys(),
            &NoticeRules {
                job: "",
                events: &["replica_dead"],
                channels: &channels,
                repeat_every: Duration::from_secs(3600),
                late_after: None,
            },
        );
        let mut conn = server.client();
        let beat = |last_seen: i64| {
            format!(r#"{{"host":"h1","pid":1,"version":"0","started_ms":0,"last_seen_ms":{last_seen},"heartbeat_ms":1000,"lease_ms":30000,"runs":[]}}"#)
        };
        let _: () = redis::cmd("HSET")
            .arg(store.keys().replicas())
            .arg("r9")
            .arg(beat(1000))
            .query(&mut conn)
            .expect("HSET");
        let tell = |seen: i64| store.tell_replica_dead("r9", seen, 60_000, &rules);
        assert!(!tell(999).await.expect("a stale view tells nothing"));
        assert!(tell(1000).await.expect("told"));
        assert!(!tell(1000).await.expect("once"));
        let _: () = redis::cmd("HSET")
            .arg(store.keys().replicas())
            .arg("r9")
            .arg(beat(5000))
            .query(&mut conn)
            .expect("HSET");
        assert!(tell(5000).await.expect("a new silence is told"));
        let told = read_all(&store, &store.keys().replica_events(), "r1").await;
        assert_eq!(told.len(), 2);
        assert_eq!(told[0].event, "replica_dead");
        assert_eq!(told[0].job, None);
        assert_eq!(told[0].replica.as_deref(), Some("r9"));
        assert_eq!(told[0].host.as_deref(), Some("h1"));
        assert_eq!(told[0].last_seen_ms, Some(1000));
    });
}

#[test]
fn an_entry_whose_reader_died_is_taken_over_and_survives_a_restart_from_the_aof() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "2s").await;
        let rules = notices(&store, "draw", Duration::from_secs(3600));
        run_once(&store, "draw", now_ms() - 5000, Status::Failed, &rules).await;
        let stream = store.keys().events("draw");
        let read = read_all(&store, &stream, "dead-replica").await;
        assert_eq!(read.len(), 2);
        drop(store);

        server.restart();
        let store = connect_store(&server, "cl", "2s").await;
        assert!(
            read_all(&store, &stream, "r2").await.is_empty(),
            "read entries are not new to another reader"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let pending = store
            .pending_events(&stream, Duration::from_millis(50), 10)
            .await
            .expect("pending");
        assert_eq!(pending.len(), 2, "{pending:?}");
        assert!(
            pending
                .iter()
                .all(|p| p.consumer == "dead-replica" && p.deliveries == 1)
        );
        let ids: Vec<String> = pending.iter().map(|p| p.id.clone()).collect();
        let taken = store
            .take_events(&stream, "r2", Duration::from_millis(50), &ids)
            .await
            .expect("take");
        assert_eq!(
            taken, read,
            "the same entries, with the same ids (the same keys)"
        );
        let ids: Vec<&str> = taken.iter().map(|e| e.id.as_str()).collect();
        store.events_done(&stream, &ids).await.expect("done");
        assert!(
            store
                .pending_events(&stream, Duration::ZERO, 10)
                .await
                .expect("pending")
                .is_empty()
        );
    });
}

#[test]
fn a_tick_no_replica_matches_is_recorded_and_told_once_with_its_reason() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "2s").await;
        let rules = notices(&store, "train", Duration::from_secs(3600));
        let stream = store.keys().events("train");
        let mut claimant = test_claimant(Duration::from_secs(30), Overlap::Skip, 100);
        claimant.notices = &rules;
        let run_on = ["gpu".to_string()];
        let tick = now_ms() - 1_000;
        let first = store
            .record_unplaced("train", tick, &claimant, &run_on)
            .await
            .expect("unplaced");
        assert_eq!(first, Some(-1), "recorded, past no mark");
        // Whoever asks again (another replica, a retry) records nothing.
        let again = store
            .record_unplaced("train", tick, &claimant, &run_on)
            .await
            .expect("unplaced again");
        assert_eq!(again, None);
        // Nor is a tick still ahead recorded.
        let ahead = store
            .record_unplaced("train", now_ms() + 60_000, &claimant, &run_on)
            .await
            .expect("unplaced ahead");
        assert_eq!(ahead, None);
        let told = read_all(&store, &stream, "r1").await;
        assert_eq!(told.len(), 2, "one missed event per channel: {told:#?}");
        assert_eq!(told[0].event, "missed");
        assert_eq!(told[0].tick_ms, Some(tick));
        assert_eq!(
            told[0].reason,
            Some(cronlease::store::MissedReason::NoMatchingReplica)
        );
        // The next one moves past the first: the mark it passed is the
        // first tick, whose gap the caller records.
        let next = store
            .record_unplaced("train", tick + 500, &claimant, &run_on)
            .await
            .expect("unplaced next");
        assert_eq!(next, Some(tick));
    });
}
