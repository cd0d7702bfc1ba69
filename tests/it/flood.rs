//! A job that floods its output (`yes` for seconds, then a 5 MB line with
//! no newline): the replica's memory stays bounded, its log gets a
//! "lines suppressed" count instead of every line, the outcome's tail is
//! intact, and the other jobs keep every tick.

use std::time::Duration;

use crate::support::{
    RedisServer, Replica, cronlease, peak_rss_kb, read_outcomes, wait_until, write_config,
};

#[test]
fn a_job_flooding_its_output_leaves_memory_log_and_other_jobs_alone() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let jobs = "\
[jobs.flood]\nschedule = \"0 0 1 1 *\"\n\
shell = \"timeout 8 yes; head -c 5000000 /dev/zero | tr '\\\\0' x; echo; echo THE-END\"\n\
[jobs.steady]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n";
    let config = write_config(
        dir.path(),
        &redis.url(),
        "metrics_listen = \"\"\ndashboard_listen = \"\"\nreplica_id = \"a\"",
        jobs,
    );
    let config_arg = config.to_string_lossy().to_string();
    let replica = Replica::start(&config, "a");
    replica.wait_for_log("ready", Duration::from_secs(30));
    let mut conn = redis.client();
    wait_until(Duration::from_secs(30), "steady runs", || {
        (!read_outcomes(&mut conn, "cl", "steady").is_empty()).then_some(())
    });
    let rss_before = peak_rss_kb(replica.pid());

    let started_ms = crate::support::now_ms();
    cronlease([
        "trigger",
        "flood",
        "--wait",
        "--timeout",
        "60s",
        "--config",
        &config_arg,
    ])
    .expect_code(0);
    let ended_ms = crate::support::now_ms();
    let rss_after = peak_rss_kb(replica.pid());

    let flood = read_outcomes(&mut conn, "cl", "flood");
    let output = flood
        .last()
        .and_then(|o| o.field("output"))
        .unwrap_or_default()
        .to_string();
    assert!(
        output.ends_with("THE-END\n"),
        "the tail is intact: {:?}",
        &output[output.len().saturating_sub(80)..]
    );

    let log = replica.log();
    let logged = log
        .lines()
        .filter(|l| l.contains("job=flood") && l.contains("stream=\"stdout\""))
        .count();
    assert!(
        log.contains("lines of output suppressed"),
        "no suppression line"
    );
    assert!(
        logged < 2_000,
        "{logged} lines of the flood reached the log"
    );

    // Every tick of the other job during the flood ran, once.
    let steady: Vec<i64> = read_outcomes(&mut conn, "cl", "steady")
        .iter()
        .map(|o| o.tick())
        .filter(|t| (started_ms + 1_000..ended_ms - 1_000).contains(t))
        .collect();
    let expected = ((ended_ms - 1_000) / 1_000 - (started_ms + 1_000) / 1_000) as usize;
    let lateness: Vec<i64> = read_outcomes(&mut conn, "cl", "steady")
        .iter()
        .filter(|o| (started_ms + 1_000..ended_ms - 1_000).contains(&o.tick()))
        .filter_map(|o| Some(o.field("started_ms")?.parse::<i64>().ok()? - o.tick()))
        .collect();
    eprintln!(
        "flood: peak RSS {rss_before} kB before, {rss_after} kB after; {logged} flood lines logged; steady ran {} of {expected} ticks, lateness ms {lateness:?}",
        steady.len()
    );
    assert!(
        steady.len() + 1 >= expected,
        "steady missed ticks during the flood: {steady:?}, expected {expected}"
    );
    assert!(
        rss_after < 150_000,
        "peak RSS {rss_after} kB: reading the flood is not bounded"
    );
}
