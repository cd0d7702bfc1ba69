//! What quorum mode costs, against one Redis measured in the same run.
//!
//! Starts three private `redis-server`s on free loopback ports and drives
//! the library's `Store` through whole tick cycles (claim, then finish, as a
//! replica does for every tick), first against server 0 alone (the
//! baseline), then against all three as a quorum:
//!
//! - latency of one cycle, one at a time (p50, p99);
//! - cycles per second with 32 concurrent claimers, each on its own job;
//! - Redis commands per cycle, summed over the servers (`INFO stats`);
//! - Redis time in the scripts per cycle, summed over the servers (the
//!   `EVALSHA` line of `INFO commandstats`: what the claim and finish
//!   scripts cost Redis, without the network).
//!
//! Prints the absolute figures and the quorum/baseline ratios.
//!
//! `cargo run --release --example quorum_cost [-- --cycles N --seconds S]`

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "common/measure.rs"]
mod measure;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow};
use common::RedisProcess;
use cronlease::config::{Config, Overlap};
use cronlease::outcome::{Outcome, Status, Trigger};
use cronlease::store::{Attempt, ClaimReply, ClaimRequest, Claimant, Store, WhenBusy};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn store(redis: &str, prefix: &str) -> Result<Store> {
    let text = format!(
        "[redis]\n{redis}\nkey_prefix = \"{prefix}\"\n[jobs.j]\nschedule = \"@daily\"\ncommand = [\"true\"]\n"
    );
    let config = Config::parse(&text, Path::new("quorum_cost.toml"))?;
    Ok(Store::connect(&config.redis).await?)
}

/// One tick's claim and finish for `job`; the tick is `tick_ms`.
async fn cycle(store: &Store, job: &str, tick_ms: i64) -> Result<()> {
    let run_id = uuid::Uuid::new_v4().to_string();
    let request = ClaimRequest {
        job,
        tick_ms,
        run_id: &run_id,
        claimant: Claimant {
            replica: "bench",
            host: "localhost",
            lease: Duration::from_secs(30),
            overlap: Overlap::Skip,
            history: 100,
            min_fence: 0,
            notices: &cronlease::store::NO_NOTICES,
            max_runs: None,
            group: None,
        },
        min_tick: -1,
        trigger: Trigger::Schedule,
        when_busy: WhenBusy::Skip,
        deadline_ms: -1,
        lead_ms: 0,
        attempt: Attempt::First,
        cluster_pause: cronlease::store::ClusterHold::None,
        exclusion: None,
        group: None,
    };
    let ClaimReply::Claimed {
        fence,
        started_ms,
        lease_key,
        ..
    } = store.claim(&request).await?
    else {
        return Err(anyhow!("tick {tick_ms} of {job} not claimed"));
    };
    let outcome = Outcome {
        job: job.to_string(),
        tick_ms,
        fence,
        run_id,
        replica: "bench".into(),
        host: "localhost".into(),
        started_ms,
        finished_ms: started_ms,
        status: Status::Ok,
        exit_code: Some(0),
        signal: None,
        attempts: 1,
        output: String::new(),
        trigger: Trigger::Schedule,
        lease_key,
        cpu_ms: None,
        peak_memory_kb: None,
        oom_kills: None,
        upstream: None,
        params: Default::default(),
    };
    store
        .finish(
            &outcome,
            100,
            None,
            Attempt::First,
            (
                &cronlease::store::NO_NOTICES,
                cronlease::store::GroupSlot::None,
            ),
        )
        .await?;
    Ok(())
}

struct Figures {
    p50_us: u128,
    p99_us: u128,
    per_second: f64,
    commands_per_cycle: f64,
    script_us_per_cycle: f64,
}

async fn measure(
    store: &Store,
    servers: &[&RedisProcess],
    cycles: usize,
    seconds: u64,
) -> Result<Figures> {
    // Ticks in the past, one per cycle, increasing: every claim wins.
    let base = now_ms() - 86_400_000;
    let before: u64 = servers
        .iter()
        .map(|s| measure::commands_processed(s))
        .sum::<Result<u64>>()?;
    let script_before: u64 = servers
        .iter()
        .map(|s| measure::script_usec(s))
        .sum::<Result<u64>>()?;
    let mut took = Vec::with_capacity(cycles);
    for i in 0..cycles {
        let sent = Instant::now();
        cycle(store, "seq", base + i as i64).await?;
        took.push(sent.elapsed().as_micros());
    }
    let after: u64 = servers
        .iter()
        .map(|s| measure::commands_processed(s))
        .sum::<Result<u64>>()?;
    let script_after: u64 = servers
        .iter()
        .map(|s| measure::script_usec(s))
        .sum::<Result<u64>>()?;
    took.sort_unstable();
    let p50_us = took[took.len() / 2];
    let p99_us = took[took.len() * 99 / 100];

    let done = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for worker in 0..32 {
        let store = store.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let job = format!("par-{worker}");
            let mut tick = base;
            while Instant::now() < stop {
                tick += 1;
                cycle(&store, &job, tick).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let started = Instant::now();
    for task in tasks {
        task.await??;
    }
    let per_second = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    Ok(Figures {
        p50_us,
        p99_us,
        per_second,
        commands_per_cycle: (after - before) as f64 / cycles as f64,
        script_us_per_cycle: (script_after - script_before) as f64 / cycles as f64,
    })
}

fn arg(args: &[String], name: &str, default: u64) -> Result<u64> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => Ok(args
            .get(i + 1)
            .with_context(|| format!("{name} needs a value"))?
            .parse()?),
    }
}

async fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cycles = usize::try_from(arg(&args, "--cycles", 2000)?)?;
    let seconds = arg(&args, "--seconds", 5)?;
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let servers = dirs
        .iter()
        .map(|dir| RedisProcess::start(dir.path()))
        .collect::<Result<Vec<_>>>()?;
    let single = store(&format!("url = \"{}\"", servers[0].url()), "single").await?;
    let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url())).collect();
    let quorum = store(&format!("quorum = [{}]", urls.join(", ")), "quorum").await?;

    println!(
        "tick cycles (claim + finish): {cycles} one at a time, then 32 claimers for {seconds} s"
    );
    let base = measure(&single, &[&servers[0]], cycles, seconds).await?;
    let all: Vec<&RedisProcess> = servers.iter().collect();
    let q = measure(&quorum, &all, cycles, seconds).await?;
    println!(
        "{:<34}{:>14}{:>14}{:>10}",
        "", "one server", "quorum of 3", "ratio"
    );
    let row = |name: &str, b: f64, q: f64, unit: &str| {
        println!(
            "{name:<34}{:>14}{:>14}{:>9.2}x",
            format!("{b:.1}{unit}"),
            format!("{q:.1}{unit}"),
            q / b
        );
    };
    row(
        "cycle latency p50",
        base.p50_us as f64,
        q.p50_us as f64,
        " µs",
    );
    row(
        "cycle latency p99",
        base.p99_us as f64,
        q.p99_us as f64,
        " µs",
    );
    row("cycles/s, 32 concurrent", base.per_second, q.per_second, "");
    row(
        "Redis commands per cycle (all)",
        base.commands_per_cycle,
        q.commands_per_cycle,
        "",
    );
    row(
        "Redis µs in scripts per cycle (all)",
        base.script_us_per_cycle,
        q.script_us_per_cycle,
        "",
    );
    println!(
        "(all servers and this process on one machine: {} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(())
}

fn main() -> ExitCode {
    measure::run_main(run())
}
