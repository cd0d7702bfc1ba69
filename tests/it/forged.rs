//! Redis data is evidence, never authority: what any Redis client can
//! write — an announcement on the claims channel, a job's state, a trigger
//! request — neither silences a job nor becomes a path or a terminal
//! control sequence. Real replicas against a private Redis.

use std::time::Duration;

use crate::support::{Cluster, RedisServer, cronlease, probe_job, starts, wait_until};

/// A tick in the year 2100: no claim sets it before then.
const YEAR_2100_MS: &str = "4102444800000";

/// Writes `value` into `field` of job `job`'s state hash, as any Redis
/// client with the replicas' user could.
fn forge(server: &RedisServer, job: &str, field: &str, value: &str) {
    let _: () = redis::cmd("HSET")
        .arg(format!("cl:{{{job}}}:state"))
        .arg(field)
        .arg(value)
        .query(&mut server.client())
        .expect("HSET");
}

/// Waits until the probe file has `more` starts beyond `before`, each of
/// a distinct tick one second after the other: the job ran every tick.
fn wait_for_every_tick(file: &std::path::Path, before: usize, more: usize) {
    let ticks = wait_until(Duration::from_secs(30), "consecutive ticks", || {
        let all = starts(file);
        (all.len() >= before + more).then(|| all[before..].iter().map(|s| s.0).collect::<Vec<_>>())
    });
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "a tick was skipped: {ticks:?}");
    }
}

#[test]
fn a_forged_announcement_leaves_the_job_running_every_tick_and_is_never_kept() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("tick", "* * * * * *", &file, "true", "");
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    wait_for_every_tick(&file, 0, 2);
    let before = starts(&file).len();
    for line in [
        format!("tick {YEAR_2100_MS} 1"),
        "tick 1 99999999999999999".to_string(),
        "no-such-job 1 1".to_string(),
        "garbage".to_string(),
    ] {
        let _: i64 = redis::cmd("PUBLISH")
            .arg("cl:claimed")
            .arg(&line)
            .query(&mut cluster.redis.client())
            .expect("PUBLISH");
    }
    wait_for_every_tick(&file, before, 6);
    cluster.stop_all();
    let log = cluster.logs();
    assert!(
        log.contains("ignoring claim announcements no replica sent"),
        "{log}"
    );
    for name in ["a", "b"] {
        let marks = std::fs::read_to_string(cluster.path(name).join("state").join("marks.json"))
            .expect("marks were saved");
        assert!(
            !marks.contains(YEAR_2100_MS) && !marks.contains("no-such-job"),
            "{marks}"
        );
    }
}

#[test]
fn a_forged_high_water_mark_is_replaced_shown_as_needing_repair_and_repaired_for_good() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    cluster.start_with(
        "a",
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\n",
        &probe_job(
            "tick",
            "* * * * * *",
            &file,
            "printf '\\033[31mred\\033]0;title\\007\\n'",
            "",
        ),
        None,
    );
    cluster.wait_ready();
    wait_for_every_tick(&file, 0, 2);
    let before = starts(&file).len();
    forge(&cluster.redis, "tick", "last_tick", YEAR_2100_MS);
    wait_for_every_tick(&file, before, 5);
    let config = cluster.config_path("a");
    let config = config.to_str().expect("a UTF-8 path");
    let status = cronlease(["status", "-c", config]).expect_code(0);
    assert!(
        status.stdout().contains("NEEDS REPAIR (last_tick)"),
        "{}",
        status.describe()
    );
    assert!(
        status
            .stdout()
            .contains(&format!("last_tick = \"{YEAR_2100_MS}\""))
            && status.stdout().contains("cronlease repair tick"),
        "{}",
        status.describe()
    );
    let dashboard =
        cluster.replicas[0].logged_address("dashboard on http://", Duration::from_secs(10));
    let page = crate::support::http::get(&dashboard, &dashboard, "/jobs/tick", "");
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.body.contains("needs repair (last_tick)"),
        "{}",
        page.body
    );
    let json = cronlease(["status", "-c", config, "--json"]).expect_code(0);
    assert!(
        json.stdout()
            .contains("\"needs_repair\":{\"field\":\"last_tick\""),
        "{}",
        json.describe()
    );
    let repaired = cronlease(["repair", "-c", config, "tick"]).expect_code(0);
    assert!(
        repaired.stdout().contains("cleared finding"),
        "{}",
        repaired.describe()
    );
    // No replica undoes the repair, and the job goes on.
    let before = starts(&file).len();
    wait_for_every_tick(&file, before, 3);
    let status = cronlease(["status", "-c", config]).expect_code(0);
    assert!(
        !status.stdout().contains("NEEDS REPAIR"),
        "{}",
        status.describe()
    );
    let again = cronlease(["repair", "-c", config, "tick"]).expect_code(0);
    assert!(
        again.stdout().contains("nothing to repair"),
        "{}",
        again.describe()
    );
    let actions: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("cl:{tick}:actions")
        .arg("-")
        .arg("+")
        .query(&mut cluster.redis.client())
        .expect("XRANGE");
    assert!(
        actions
            .iter()
            .any(|(_, fields)| fields.contains(&("action".into(), "repair".into()))),
        "{actions:?}"
    );
    // The job's output reaches the terminal inert, unless asked raw.
    let history =
        cronlease(["history", "-c", config, "tick", "-n", "1", "--output"]).expect_code(0);
    let shown = history.stdout();
    assert!(
        shown.contains("\\u{1b}[31mred\\u{1b}]0;title\\u{7}"),
        "{shown:?}"
    );
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
    let raw = cronlease([
        "history", "-c", config, "tick", "-n", "1", "--output", "--raw",
    ])
    .expect_code(0);
    assert!(raw.stdout().contains("\u{1b}[31mred"), "{:?}", raw.stdout());
    cluster.stop_all();
    let log = cluster.logs();
    assert!(
        log.contains("held a last_tick no claim could have written")
            && log.contains("cl:{tick}:state"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "a control sequence reached the log"
    );
}

#[test]
fn a_trigger_whose_run_id_is_a_path_is_refused_by_name() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    cluster.start("a", &probe_job("work", "@yearly", &file, "true", ""));
    cluster.wait_ready();
    let _: String = redis::cmd("XADD")
        .arg("cl:triggers")
        .arg("*")
        .arg(&[
            "job",
            "work",
            "run_id",
            "../../x",
            "requested_by",
            "mallory",
        ])
        .query(&mut cluster.redis.client())
        .expect("XADD");
    cluster.replicas[0].wait_for_log(
        "refusing a trigger request whose run id cronlease did not make",
        Duration::from_secs(20),
    );
    cluster.stop_all();
    assert!(starts(&file).is_empty(), "the forged trigger ran");
    assert!(
        cluster.logs().contains("run_id=../../x"),
        "{}",
        cluster.logs()
    );
}

/// Driven through the library's `Store`: a fence past 2^53 - 1 is never
/// handed out nor believed; the claim goes on from the claimant's own
/// mark, records the finding, and `repair` clears it.
#[test]
fn a_forged_fence_is_replaced_by_the_claim_and_repaired() {
    use cronlease::config::Overlap;
    use cronlease::store::{ClaimReply, StateCheck, StateField};

    use crate::support::{claim_request, connect_store, hget, now_ms, runtime, test_claimant};

    let server = RedisServer::start();
    forge(&server, "draw", "fence", "1152921504606846976");
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "1s").await;
        let claimant = cronlease::store::Claimant {
            min_fence: 41,
            ..test_claimant(Duration::from_secs(10), Overlap::Skip, 100)
        };
        let reply = store
            .claim(&claim_request("draw", "run", now_ms() - 1000, claimant))
            .await
            .expect("claim");
        let ClaimReply::Claimed { fence, state, .. } = reply else {
            panic!("expected claimed, got {reply:?}");
        };
        assert_eq!(fence, 42, "the claimant's own mark, not the forged fence");
        assert_eq!(state, StateCheck::Implausible(StateField::Fence));
        assert_eq!(
            hget(&server, "cl:{draw}:state", "repair_field").as_deref(),
            Some("fence")
        );
        assert_eq!(store.repair("draw").await.expect("repair"), ["finding"]);
        assert_eq!(
            store.repair("draw").await.expect("repair"),
            Vec::<String>::new()
        );
    });
    assert_eq!(
        hget(&server, "cl:{draw}:state", "fence").as_deref(),
        Some("42")
    );
}

/// A manual run never hands out a forged fence either.
#[test]
fn a_manual_run_after_a_forged_fence_gets_the_claimants_next_fence() {
    use cronlease::config::Overlap;
    use cronlease::store::{ManualReply, ManualRequest, TriggerRequest};

    use crate::support::{connect_store, hget, runtime, test_claimant};

    let server = RedisServer::start();
    forge(&server, "draw", "fence", "9223372036854775807");
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "1s").await;
        let request = TriggerRequest {
            id: "1-0".into(),
            job: "draw".into(),
            run_id: "manual-run".into(),
            requested_by: "test".into(),
            params: Vec::new(),
            traceparent: None,
        };
        let claimant = cronlease::store::Claimant {
            min_fence: 6,
            ..test_claimant(Duration::from_secs(10), Overlap::Skip, 100)
        };
        let reply = store
            .manual_claim(&ManualRequest {
                request: &request,
                claimant,
                params: &Default::default(),
            })
            .await
            .expect("manual claim");
        let ManualReply::Claimed { fence, .. } = reply else {
            panic!("expected claimed, got {reply:?}");
        };
        assert_eq!(fence, 7);
    });
    assert_eq!(
        hget(&server, "cl:{draw}:state", "repair_field").as_deref(),
        Some("fence")
    );
    assert_eq!(
        hget(&server, "cl:{draw}:state", "fence").as_deref(),
        Some("7")
    );
}

/// A claim that replaces a forged high-water mark says it cannot know the
/// mark before it: no tick another replica ran is recorded missed.
#[test]
fn after_a_forged_high_water_mark_no_earlier_tick_counts_as_missed() {
    use cronlease::config::Overlap;
    use cronlease::store::{ClaimReply, ClaimRequest, StateCheck, StateField};

    use crate::support::{claim_request, connect_store, now_ms, runtime, test_claimant};

    let server = RedisServer::start();
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "1s").await;
        let claimant = test_claimant(Duration::from_secs(10), Overlap::Skip, 100);
        let tick = now_ms() - 5_000;
        let first = store
            .claim(&claim_request("draw", "first", tick, claimant))
            .await
            .expect("claim");
        assert!(matches!(first, ClaimReply::Claimed { .. }), "{first:?}");
        forge(&server, "draw", "last_tick", YEAR_2100_MS);
        // A replica whose own answers last showed an older tick claims the
        // next one while the first run is in flight.
        let request = ClaimRequest {
            min_tick: tick - 3_000,
            ..claim_request("draw", "second", tick + 1_000, claimant)
        };
        let reply = store.claim(&request).await.expect("claim");
        let ClaimReply::Busy {
            previous, state, ..
        } = reply
        else {
            panic!("expected busy, got {reply:?}");
        };
        assert_eq!(state, StateCheck::Implausible(StateField::LastTick));
        assert_eq!(previous, -2, "the mark before the forged one is unknown");
    });
}

/// A claim made ahead of its tick leaves a forged or lost high-water mark
/// as it is, so that the claim at the tick finds it and says so: no tick
/// another replica ran is recorded missed (found by the chaos suite's
/// forge fault, seed 366930023).
#[test]
fn a_claim_ahead_of_its_tick_leaves_a_forged_mark_to_the_claim_at_the_tick() {
    use cronlease::config::Overlap;
    use cronlease::store::{ClaimReply, ClaimRequest, StateCheck, StateField};

    use crate::support::{claim_request, connect_store, hget, now_ms, runtime, test_claimant};

    let server = RedisServer::start();
    forge(&server, "draw", "last_tick", YEAR_2100_MS);
    runtime().block_on(async {
        let store = connect_store(&server, "cl", "1s").await;
        let claimant = test_claimant(Duration::from_secs(10), Overlap::Skip, 100);
        let tick = now_ms() + 400;
        let ahead = ClaimRequest {
            min_tick: tick - 3_000,
            lead_ms: 500,
            ..claim_request("draw", "ahead", tick, claimant)
        };
        let reply = store.claim(&ahead).await.expect("claim");
        assert!(matches!(reply, ClaimReply::Early { .. }), "{reply:?}");
        assert_eq!(
            hget(&server, "cl:{draw}:state", "last_tick").as_deref(),
            Some(YEAR_2100_MS),
            "nothing was corrected ahead of the tick"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let at_the_tick = ClaimRequest {
            lead_ms: 0,
            ..ahead
        };
        let reply = store.claim(&at_the_tick).await.expect("claim");
        let ClaimReply::Claimed {
            state, previous, ..
        } = reply
        else {
            panic!("expected claimed, got {reply:?}");
        };
        assert_eq!(state, StateCheck::Implausible(StateField::LastTick));
        assert_eq!(previous, -2);
    });
}
