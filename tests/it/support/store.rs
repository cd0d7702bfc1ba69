//! The library's `Store` driven directly, for the tests that check what the
//! scripts do answer by answer: a store on a private server, a claim
//! request, and a field read back.

use std::path::Path;
use std::time::Duration;

use cronlease::config::{Config, Overlap};
use cronlease::outcome::Trigger;
use cronlease::store::{Attempt, ClaimRequest, Claimant, Store, WhenBusy};

use super::RedisServer;

/// A `Store` on `server` under `prefix`, made from a config as a replica's
/// would be (its one job is never claimed through it).
pub async fn connect_store(server: &RedisServer, prefix: &str, command_timeout: &str) -> Store {
    let text = format!(
        "[redis]\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\ncommand_timeout = \"{command_timeout}\"\n\
         [jobs.unused]\nschedule = \"@yearly\"\ncommand = [\"true\"]\n",
        server.url()
    );
    let config = Config::parse(&text, Path::new("store-test.toml"))
        .unwrap_or_else(|e| panic!("the test config is valid: {e}\n{text}"));
    Store::connect(&config.redis)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()))
}

/// The claimant "test" on "localhost".
pub fn test_claimant(lease: Duration, overlap: Overlap, history: u32) -> Claimant<'static> {
    Claimant {
        replica: "test",
        host: "localhost",
        lease,
        overlap,
        history,
        min_fence: 0,
        notices: &cronlease::store::NO_NOTICES,
        max_runs: None,
        group: None,
    }
}

/// A scheduled claim of `tick_ms` of `job` for `run_id` by `claimant`: no
/// high-water mark remembered, no deadline, not ahead of the tick.
pub fn claim_request<'a>(
    job: &'a str,
    run_id: &'a str,
    tick_ms: i64,
    claimant: Claimant<'a>,
) -> ClaimRequest<'a> {
    ClaimRequest {
        job,
        tick_ms,
        run_id,
        claimant,
        min_tick: -1,
        trigger: Trigger::Schedule,
        when_busy: WhenBusy::Skip,
        deadline_ms: -1,
        lead_ms: 0,
        attempt: Attempt::First,
        cluster_pause: cronlease::store::ClusterHold::None,
        exclusion: None,
        group: None,
    }
}

/// One field of a hash, if it is there.
pub fn hget(server: &RedisServer, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query(&mut server.client())
        .expect("HGET")
}

/// Sends `request`, which must be won, and returns the outcome of its run
/// as `super::ok_outcome` makes it, started when the claim said (as a
/// replica's run is: never before its claim).
pub async fn claimed_outcome(
    store: &Store,
    request: &ClaimRequest<'_>,
) -> cronlease::outcome::Outcome {
    let reply = store.claim(request).await.expect("claim");
    let cronlease::store::ClaimReply::Claimed {
        fence,
        lease_key,
        started_ms,
        ..
    } = reply
    else {
        panic!("{}: expected claimed, got {reply:?}", request.run_id);
    };
    cronlease::outcome::Outcome {
        started_ms,
        finished_ms: started_ms + 1,
        ..super::ok_outcome(
            request.job,
            request.run_id,
            request.tick_ms,
            fence,
            lease_key,
        )
    }
}
