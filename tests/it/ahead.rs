//! Claiming a tick ahead of its time (the preferred replica does, so that
//! its run starts at the tick rather than a round trip after it): driven
//! through the library's `Store` against a real `redis-server`. A claim
//! made ahead is only a plain claim: what a pause or a run in flight
//! decides is decided at the tick. That replicas claim ahead and still
//! start no run before its tick is in `daemon.rs`.

use std::time::Duration;

use cronlease::config::Overlap;
use cronlease::store::{ClaimReply, ClaimRequest, Store};

use crate::support::{
    RedisServer, claim_request, connect_store, hget, read_outcomes, runtime, test_claimant,
};

const PREFIX: &str = "a";
const LEAD_MS: i64 = 1_000;

async fn store(server: &RedisServer) -> Store {
    connect_store(server, PREFIX, "2s").await
}

/// A claim that may be made up to [`LEAD_MS`] ahead of its tick.
fn request<'a>(job: &'a str, run_id: &'a str, tick_ms: i64, overlap: Overlap) -> ClaimRequest<'a> {
    ClaimRequest {
        lead_ms: LEAD_MS,
        ..claim_request(
            job,
            run_id,
            tick_ms,
            test_claimant(Duration::from_secs(30), overlap, 100),
        )
    }
}

fn key(job: &str, part: &str) -> String {
    format!("{PREFIX}:{{{job}}}:{part}")
}

#[test]
fn a_plain_claim_is_made_ahead_and_says_when_its_run_starts() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = store(&server).await;
        let now = store.server_time_ms().await.expect("TIME");

        // Beyond the lead: early, nothing written.
        let far = now + 3 * LEAD_MS;
        match store.claim(&request("far", "r0", far, Overlap::Skip)).await {
            Ok(ClaimReply::Early { ms }) => assert!(ms > LEAD_MS, "early by {ms} ms"),
            other => panic!("a tick beyond the lead: expected early, got {other:?}"),
        }
        assert_eq!(hget(&server, &key("far", "state"), "last_tick"), None);

        // Within the lead: claimed, starting at the tick, and the answer
        // carries Redis time so the caller can wait for it.
        let tick = now + LEAD_MS / 2;
        match store
            .claim(&request("near", "r1", tick, Overlap::Skip))
            .await
        {
            Ok(ClaimReply::Claimed {
                fence,
                started_ms,
                redis_now_us,
                ..
            }) => {
                assert_eq!(fence, 1);
                assert_eq!(started_ms, tick, "a run claimed ahead starts at its tick");
                assert!(
                    redis_now_us < tick * 1000 && redis_now_us >= now * 1000,
                    "the answer's Redis time {redis_now_us} µs is the claim's (before the tick {tick} ms)"
                );
            }
            other => panic!("a tick within the lead: expected claimed, got {other:?}"),
        }
        let entry = hget(&server, &key("near", "running"), "r1").expect("the run is in flight");
        let entry: serde_json::Value = serde_json::from_str(&entry).expect("a JSON entry");
        assert_eq!(entry["started"].as_i64(), Some(tick), "{entry}");
        // Another replica's claim of the same tick: taken, at once.
        assert!(matches!(
            store.claim(&request("near", "r2", tick, Overlap::Skip)).await,
            Ok(ClaimReply::Taken { last_tick, fence: 1, .. }) if last_tick == tick
        ));
    });
}

#[test]
fn a_pause_or_a_run_in_flight_is_decided_at_the_tick_not_ahead() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = store(&server).await;
        let now = store.server_time_ms().await.expect("TIME");
        let tick = now + LEAD_MS / 2;

        // Paused: ahead of the tick the answer is early, and the tick is
        // not marked skipped yet (a resume before it still runs it).
        let pause = cronlease::store::PauseRequest {
            who: "test",
            until_ms: None,
            reason: "",
        };
        store.pause("paused", &pause).await.expect("pause");
        match store
            .claim(&request("paused", "p1", tick, Overlap::Skip))
            .await
        {
            Ok(ClaimReply::Early { ms }) => assert!(ms > 0 && ms <= LEAD_MS, "early by {ms} ms"),
            other => panic!("a paused job ahead of its tick: expected early, got {other:?}"),
        }
        assert_eq!(hget(&server, &key("paused", "state"), "last_tick"), None);

        // A run in flight (a claim of an earlier tick holds the lease):
        // with skip, no skipped_overlap is recorded ahead of the tick; with
        // replace, the holder's lease is left alone until the tick.
        for overlap in [Overlap::Skip, Overlap::Replace] {
            let job = format!("busy-{}", overlap.as_str());
            let earlier = now - 5_000;
            assert!(matches!(
                store
                    .claim(&request(&job, "holder", earlier, overlap))
                    .await,
                Ok(ClaimReply::Claimed { .. })
            ));
            match store.claim(&request(&job, "next", tick, overlap)).await {
                Ok(ClaimReply::Early { ms }) => {
                    assert!(ms > 0 && ms <= LEAD_MS, "{job}: early by {ms} ms")
                }
                other => panic!(
                    "{job}: a run in flight ahead of the tick: expected early, got {other:?}"
                ),
            }
            let lease: Option<String> = redis::cmd("GET")
                .arg(key(&job, "lease"))
                .query(&mut server.client())
                .expect("GET");
            assert_eq!(
                lease.as_deref(),
                Some("holder"),
                "{job}: the lease is untouched"
            );
            assert!(
                read_outcomes(&mut server.client(), PREFIX, &job).is_empty(),
                "{job}: nothing recorded ahead of the tick"
            );
            assert_eq!(
                hget(&server, &key(&job, "state"), "last_tick"),
                Some(earlier.to_string()),
                "{job}: the high-water mark has not moved"
            );
        }

        // With overlap allow, a run in flight does not matter: claimed ahead.
        let job = "busy-allow";
        for (run_id, at) in [("first", now - 5_000), ("second", tick)] {
            assert!(
                matches!(
                    store.claim(&request(job, run_id, at, Overlap::Allow)).await,
                    Ok(ClaimReply::Claimed { .. })
                ),
                "{job}: {run_id}"
            );
        }
    });
}
