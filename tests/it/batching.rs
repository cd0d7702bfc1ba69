//! Claims and finishes made at the same moment share one script call
//! (`store/batch.rs`), and each still gets its own answer: driven through
//! the library's `Store` against a real `redis-server`, with Redis's own
//! command counts as the evidence.

use std::time::Duration;

use cronlease::config::Overlap;
use cronlease::store::{Attempt, ClaimReply, ClaimRequest, Recorded, Store};
use futures_util::future::join_all;

use crate::support::{
    RedisServer, claim_request, connect_store, now_ms, ok_outcome, read_outcomes, runtime,
    test_claimant,
};

const PREFIX: &str = "b";
const JOBS: usize = 300;

async fn store(server: &RedisServer) -> Store {
    connect_store(server, PREFIX, "5s").await
}

fn request<'a>(job: &'a str, run_id: &'a str, tick_ms: i64) -> ClaimRequest<'a> {
    claim_request(
        job,
        run_id,
        tick_ms,
        test_claimant(Duration::from_secs(30), Overlap::Skip, 100),
    )
}

/// Claims `tick` of each job at once, one run id each; the replies in order.
async fn claim_all(
    store: &Store,
    jobs: &[String],
    run_ids: &[String],
    tick: i64,
) -> Vec<Result<ClaimReply, cronlease::store::StoreError>> {
    let requests: Vec<ClaimRequest> = jobs
        .iter()
        .zip(run_ids)
        .map(|(job, run_id)| request(job, run_id, tick))
        .collect();
    join_all(requests.iter().map(|r| store.claim(r))).await
}

/// How many times Redis ran `EVALSHA` so far.
fn evalsha_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.client())
        .expect("INFO commandstats");
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

#[test]
fn claims_and_finishes_of_one_moment_share_calls_and_each_gets_its_own_answer() {
    let server = RedisServer::start();
    let jobs: Vec<String> = (0..JOBS).map(|i| format!("job-{i}")).collect();
    let run_ids: Vec<String> = (0..JOBS).map(|i| format!("run-{i}")).collect();
    let tick = now_ms() - 10;
    let before = evalsha_calls(&server);
    let claimed = runtime().block_on(async {
        let store = store(&server).await;
        let replies = claim_all(&store, &jobs, &run_ids, tick).await;
        let mut claimed = Vec::new();
        for ((job, run_id), reply) in jobs.iter().zip(&run_ids).zip(replies) {
            match reply {
                Ok(ClaimReply::Claimed {
                    fence, lease_key, ..
                }) => {
                    assert_eq!(fence, 1, "{job}: the first claim of a job has fence 1");
                    claimed.push(ok_outcome(job, run_id, tick, fence, lease_key));
                }
                other => panic!("{job}: expected claimed, got {other:?}"),
            }
        }
        // A second claim of the same ticks, again all at once: each job's
        // own answer is `taken`.
        let again: Vec<String> = (0..JOBS).map(|i| format!("again-{i}")).collect();
        let replies = claim_all(&store, &jobs, &again, tick).await;
        for (job, reply) in jobs.iter().zip(replies) {
            assert!(
                matches!(reply, Ok(ClaimReply::Taken { last_tick, fence: 1, .. }) if last_tick == tick),
                "{job}: expected taken at fence 1, got {reply:?}"
            );
        }
        let finishes = claimed.iter().map(|outcome| store.finish(outcome, 100, None, Attempt::First, (&cronlease::store::NO_NOTICES, cronlease::store::GroupSlot::None)));
        for (outcome, reply) in claimed.iter().zip(join_all(finishes).await) {
            let reply = reply.unwrap_or_else(|e| panic!("{}: finish failed: {e}", outcome.job));
            assert_eq!(reply.recorded, Recorded::Current, "{}", outcome.job);
        }
        claimed
    });
    let calls = evalsha_calls(&server) - before;
    let scripts_run = 3 * JOBS as u64;
    assert!(
        calls < scripts_run / 2,
        "{scripts_run} claims and finishes took {calls} EVALSHA calls: they were not batched"
    );
    let mut redis = server.client();
    for outcome in &claimed {
        let recorded = read_outcomes(&mut redis, PREFIX, &outcome.job);
        assert_eq!(recorded.len(), 1, "{}: {recorded:?}", outcome.job);
        assert_eq!(recorded[0].run_id(), outcome.run_id, "{}", outcome.job);
    }
}

#[test]
fn the_claims_of_a_batch_are_announced_in_one_message_a_line_each() {
    let server = RedisServer::start();
    let mut listener = server.client();
    let mut announcements = listener.as_pubsub();
    announcements
        .subscribe(format!("{PREFIX}:claimed"))
        .expect("SUBSCRIBE");
    announcements
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a read timeout");
    let jobs: Vec<String> = (0..JOBS).map(|i| format!("job-{i}")).collect();
    let run_ids: Vec<String> = (0..JOBS).map(|i| format!("run-{i}")).collect();
    let tick = now_ms() - 10;
    runtime().block_on(async {
        let store = store(&server).await;
        for (job, reply) in jobs
            .iter()
            .zip(claim_all(&store, &jobs, &run_ids, tick).await)
        {
            assert!(
                matches!(reply, Ok(ClaimReply::Claimed { fence: 1, .. })),
                "{job}: {reply:?}"
            );
        }
    });
    let mut lines: Vec<String> = Vec::new();
    let mut messages = 0;
    while let Ok(message) = announcements.get_message() {
        let payload: String = message.get_payload().expect("a text payload");
        messages += 1;
        lines.extend(payload.lines().map(str::to_string));
    }
    lines.sort();
    let mut expected: Vec<String> = jobs.iter().map(|job| format!("{job} {tick} 1")).collect();
    expected.sort();
    assert_eq!(
        lines, expected,
        "each claim announced once, as `<job> <tick> <fence>`"
    );
    assert!(
        messages < JOBS / 2,
        "{JOBS} claims made at once were announced in {messages} messages: not one per batch"
    );
}

#[test]
fn a_call_that_fails_in_a_batch_fails_alone() {
    let server = RedisServer::start();
    // Another writer made one job's state hash a string: its claim's
    // HMGET fails with WRONGTYPE inside the batch.
    let _: () = redis::cmd("SET")
        .arg(format!("{PREFIX}:{{broken}}:state"))
        .arg("not a hash")
        .query(&mut server.client())
        .expect("SET");
    let tick = now_ms() - 10;
    runtime().block_on(async {
        let store = store(&server).await;
        let jobs: Vec<String> = (0..50)
            .map(|i| {
                if i == 25 {
                    "broken".to_string()
                } else {
                    format!("job-{i}")
                }
            })
            .collect();
        let run_ids: Vec<String> = (0..50).map(|i| format!("run-{i}")).collect();
        let replies = claim_all(&store, &jobs, &run_ids, tick).await;
        for (job, reply) in jobs.iter().zip(replies) {
            if job == "broken" {
                let error = reply.expect_err("a claim of a job whose state is not a hash fails");
                assert!(
                    error.to_string().contains("WRONGTYPE"),
                    "the error names what Redis said: {error}"
                );
                assert!(!error.is_ambiguous(), "a script error is definite: {error}");
            } else {
                assert!(
                    matches!(reply, Ok(ClaimReply::Claimed { fence: 1, .. })),
                    "{job}: expected claimed beside the broken job, got {reply:?}"
                );
            }
        }
    });
}

/// A forged high-water mark is found by a claim made in a batch as by one
/// made alone.
#[test]
fn a_claim_in_a_batch_finds_a_forged_high_water_mark() {
    use cronlease::store::{StateCheck, StateField};

    let server = RedisServer::start();
    let jobs: Vec<String> = (0..20).map(|i| format!("job-{i}")).collect();
    let run_ids: Vec<String> = (0..20).map(|i| format!("run-{i}")).collect();
    let _: () = redis::cmd("HSET")
        .arg("b:{job-3}:state")
        .arg("last_tick")
        .arg("4102444800000")
        .query(&mut server.client())
        .expect("HSET");
    let replies = runtime().block_on(async {
        let store = store(&server).await;
        claim_all(&store, &jobs, &run_ids, now_ms() - 10).await
    });
    match &replies[3] {
        Ok(ClaimReply::Claimed { state, .. }) => {
            assert_eq!(*state, StateCheck::Implausible(StateField::LastTick))
        }
        other => panic!("expected claimed, got {other:?}"),
    }
}
