//! The quorum protocol itself, driven through the library's `Store` against
//! three real `redis-server`s: which answers make a claim hold, that a
//! claim without a majority is undone where it landed, that the fence is
//! the highest of the masters', that renewals count with a majority and
//! finishes reach every master, and that replicas racing on their own
//! connections never both hold a tick. (The daemon-level quorum tests, with
//! masters killed under running replicas, are in `topology.rs`.)

use std::path::Path;
use std::time::Duration;

use cronlease::config::{Config, Overlap};
use cronlease::outcome::Outcome;
use cronlease::store::{
    Attempt, ClaimReply, ClaimRequest, Recorded, Renewal, Renewed, Store, StoreError,
};

use crate::support::{
    RedisServer, claim_request, now_ms, ok_outcome, read_outcomes, runtime, test_claimant,
    wait_until,
};

const PREFIX: &str = "q";
const JOB: &str = "draw";
const LEASE: Duration = Duration::from_secs(10);

/// The config of a replica whose `[redis]` section is `redis` (with its
/// timeouts).
fn config(redis: &str) -> Config {
    let text = format!(
        "[redis]\n{redis}\nkey_prefix = \"{PREFIX}\"\nconnect_timeout = \"1s\"\n\
         [jobs.{JOB}]\nschedule = \"@daily\"\ncommand = [\"true\"]\n"
    );
    Config::parse(&text, Path::new("quorum-test.toml"))
        .unwrap_or_else(|e| panic!("the test config is valid: {e}\n{text}"))
}

/// A store over all of `servers` as a quorum.
async fn quorum(servers: &[RedisServer]) -> Store {
    quorum_with(servers, Duration::from_secs(1)).await
}

async fn quorum_with(servers: &[RedisServer], command_timeout: Duration) -> Store {
    let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url())).collect();
    let config = config(&format!(
        "quorum = [{}]\ncommand_timeout = \"{}ms\"",
        urls.join(", "),
        command_timeout.as_millis()
    ));
    Store::connect(&config.redis)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the quorum: {e}"))
}

/// A store over `server` alone: another replica's claim that reached only
/// that master.
async fn single(server: &RedisServer) -> Store {
    let config = config(&format!(
        "url = \"{}\"\ncommand_timeout = \"1s\"",
        server.url()
    ));
    Store::connect(&config.redis)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()))
}

fn request(run_id: &str, tick_ms: i64) -> ClaimRequest<'_> {
    claim_request(
        JOB,
        run_id,
        tick_ms,
        test_claimant(LEASE, Overlap::Allow, 100),
    )
}

fn state_key() -> String {
    format!("{PREFIX}:{{{JOB}}}:state")
}

fn running_key() -> String {
    format!("{PREFIX}:{{{JOB}}}:running")
}

/// `(last_tick, run ids in flight)` on one master.
fn state_on(server: &RedisServer) -> (Option<i64>, Vec<String>) {
    let mut redis = server.client();
    let last_tick: Option<i64> = redis::cmd("HGET")
        .arg(state_key())
        .arg("last_tick")
        .query(&mut redis)
        .expect("HGET last_tick");
    let running: Vec<String> = redis::cmd("HKEYS")
        .arg(running_key())
        .query(&mut redis)
        .expect("HKEYS running");
    (last_tick, running)
}

fn outcome(run_id: &str, tick_ms: i64, fence: u64, lease_key: String) -> Outcome {
    ok_outcome(JOB, run_id, tick_ms, fence, lease_key)
}

#[test]
fn a_majority_claim_has_the_highest_fence_renews_with_a_majority_and_finishes_everywhere() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // One master handed out many fences before (say it served alone for a
    // while): the quorum's fence must still be above all of them.
    let _: () = redis::cmd("HSET")
        .arg(state_key())
        .arg("fence")
        .arg(1000)
        .query(&mut servers[2].client())
        .expect("HSET fence");
    runtime().block_on(async {
        let store = quorum(&servers).await;
        let tick = now_ms() - 5;
        let reply = store.claim(&request("r1", tick)).await.expect("claim");
        let ClaimReply::Claimed {
            fence, lease_key, ..
        } = reply
        else {
            panic!("three masters up, no rival: expected claimed, got {reply:?}");
        };
        assert!(fence > 1000, "fence {fence} is not above master 2's 1000");
        // The claim returned once two masters granted it; the third has it
        // a moment later (its request was sent with the others).
        for (i, server) in servers.iter().enumerate() {
            wait_until(
                Duration::from_secs(5),
                &format!("the claim of r1 on master {i}"),
                || (state_on(server) == (Some(tick), vec!["r1".to_string()])).then_some(()),
            );
        }

        let renewal = [Renewal {
            job: JOB.into(),
            run_id: "r1".into(),
            lease_key: lease_key.clone(),
        }];
        assert_eq!(
            store.renew(&renewal, LEASE).await.expect("renew"),
            [Renewed::Held]
        );
        // The lease vanishes from one master: two of three still hold it.
        let drop_lease = |server: &RedisServer| {
            let _: () = redis::cmd("DEL")
                .arg(&lease_key)
                .query(&mut server.client())
                .expect("DEL lease");
        };
        drop_lease(&servers[0]);
        assert_eq!(
            store.renew(&renewal, LEASE).await.expect("renew"),
            [Renewed::Held],
            "two of three masters hold the lease: the run goes on"
        );
        drop_lease(&servers[1]);
        assert_eq!(
            store.renew(&renewal, LEASE).await.expect("renew"),
            [Renewed::Lost],
            "one of three masters holds the lease: the run must stop"
        );

        let finished = store
            .finish(
                &outcome("r1", tick, fence, lease_key),
                100,
                None,
                Attempt::First,
                (
                    &cronlease::store::NO_NOTICES,
                    cronlease::store::GroupSlot::None,
                ),
            )
            .await
            .expect("finish");
        assert_eq!(finished.recorded, Recorded::Current);
    });
    for (i, server) in servers.iter().enumerate() {
        let outcomes = read_outcomes(&mut server.client(), PREFIX, JOB);
        assert_eq!(outcomes.len(), 1, "master {i}: {outcomes:#?}");
        assert_eq!(outcomes[0].run_id(), "r1");
        assert!(outcomes[0].fence() > 1000, "master {i}: {outcomes:#?}");
        assert_eq!(
            state_on(server).1,
            Vec::<String>::new(),
            "master {i} still lists the run"
        );
    }
}

#[test]
fn a_claim_short_of_a_majority_is_undone_where_it_landed() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    runtime().block_on(async {
        let store = quorum(&servers).await;

        // Rivals won tick 1 on masters 1 and 2: ours lands on master 0 only.
        let tick = now_ms() - 50;
        for (i, rival) in [(1, "rival-1"), (2, "rival-2")] {
            let reply = single(&servers[i]).await.claim(&request(rival, tick)).await;
            assert!(matches!(reply, Ok(ClaimReply::Claimed { .. })), "{reply:?}");
        }
        let reply = store.claim(&request("mine", tick)).await.expect("claim");
        assert!(
            matches!(reply, ClaimReply::Taken { last_tick, .. } if last_tick == tick),
            "two masters say taken: expected taken, got {reply:?}"
        );
        assert_eq!(
            state_on(&servers[0]),
            (None, Vec::new()),
            "master 0 still holds the claim that lost"
        );

        // Tick 2: master 2 is dead and a rival holds master 1, so ours wins
        // master 0 alone; no majority either way.
        servers[2].kill9();
        let tick2 = now_ms() - 20;
        let reply = single(&servers[1])
            .await
            .claim(&request("rival-3", tick2))
            .await;
        assert!(matches!(reply, Ok(ClaimReply::Claimed { .. })), "{reply:?}");
        match store.claim(&request("mine-2", tick2)).await {
            Err(e @ StoreError::NoQuorum { .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains("quorum not reached for claim: 1 of 3 Redis masters claimed the tick, 2 needed"),
                    "{message}"
                );
            }
            other => panic!("expected no quorum, got {other:?}"),
        }
        assert_eq!(state_on(&servers[0]), (None, Vec::new()));
        // The tick is still claimable on master 0.
        let reply = single(&servers[0])
            .await
            .claim(&request("later", tick2))
            .await;
        assert!(matches!(reply, Ok(ClaimReply::Claimed { .. })), "{reply:?}");
    });
}

#[test]
fn replicas_racing_on_their_own_connections_never_both_hold_a_tick() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .enable_all()
        .build()
        .expect("a multi-thread runtime builds");
    runtime.block_on(async {
        let mut replicas = Vec::new();
        for _ in 0..3 {
            replicas.push(quorum(&servers).await);
        }
        let start = now_ms() - 10_000;
        let mut won = 0;
        let mut last_fence = 0;
        for n in 0..200 {
            let tick = start + n;
            // Each replica on a task of its own, on its own connections,
            // starting a few hundred microseconds apart in varying order.
            let tasks: Vec<_> = replicas
                .iter()
                .enumerate()
                .map(|(r, store)| {
                    let store = store.clone();
                    let delay = Duration::from_micros(((n * 7 + r as i64 * 13) % 400) as u64);
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        store.claim(&request(&format!("{n}-{r}"), tick)).await
                    })
                })
                .collect();
            let mut replies = Vec::new();
            for task in tasks {
                replies.push(task.await.expect("a claim task does not panic"));
            }
            let winners: Vec<(usize, u64)> = replies
                .iter()
                .enumerate()
                .filter_map(|(r, reply)| match reply {
                    Ok(ClaimReply::Claimed { fence, .. }) => Some((r, *fence)),
                    _ => None,
                })
                .collect();
            assert!(winners.len() <= 1, "tick {n} held by {winners:?}: {replies:#?}");
            if let Some(&(_, fence)) = winners.first() {
                assert!(fence > last_fence, "fence {fence} after {last_fence}");
                last_fence = fence;
                won += 1;
            }
        }
        eprintln!(
            "200 ticks raced by 3 replicas over 3 masters: {won} held by one, {} by none (split answers, undone)",
            200 - won
        );
        assert!(won > 0, "no tick was ever held");
    });
}

#[test]
fn a_hung_master_does_not_hold_up_a_claim_the_others_granted() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    runtime().block_on(async {
        // Replies may take up to 5 s; master 2 answers nothing for 4 s.
        let store = quorum_with(&servers, Duration::from_secs(5)).await;
        servers[2].pause_clients(4_000);
        let sent = std::time::Instant::now();
        let reply = store
            .claim(&request("r1", now_ms() - 5))
            .await
            .expect("claim");
        let took = sent.elapsed();
        assert!(
            matches!(reply, ClaimReply::Claimed { .. }),
            "two masters answer: expected claimed, got {reply:?}"
        );
        assert!(
            took < Duration::from_millis(3_500),
            "the claim waited {took:?}, for the hung master (paused 4 s)"
        );
    });
}

#[test]
fn a_quorum_starts_with_a_master_down_and_takes_it_in_when_it_is_back() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    servers[2].kill9();
    runtime().block_on(async {
        let store = quorum(&servers).await;
        let reply = store.claim(&request("r1", now_ms() - 100)).await;
        assert!(
            matches!(reply, Ok(ClaimReply::Claimed { .. })),
            "two of three masters up: expected claimed, got {reply:?}"
        );
        servers[2].restart();
        // The store connects to it on a later request (at most once a
        // second while it was away): claims land there again.
        let mut n = 0;
        loop {
            n += 1;
            let tick = now_ms() - 50;
            let reply = store.claim(&request(&format!("r{n}"), tick)).await;
            assert!(matches!(reply, Ok(ClaimReply::Claimed { .. })), "{reply:?}");
            if state_on(&servers[2]).0 == Some(tick) {
                break;
            }
            assert!(
                n < 50,
                "master 2 got no claim within 50 tries after its restart"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}
