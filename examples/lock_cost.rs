//! What a cronlease lock costs, against the hand-rolled lock it replaces,
//! measured in the same run on the same private `redis-server`.
//!
//! - **raw**: `SET key token NX PX 30000`, then a Lua compare-and-delete
//!   (the usual `SET NX` lock), on a `ConnectionManager` — the connection
//!   type cronlease uses for one server;
//! - **cronlease**: `cluster.lock(name).try_acquire()` then
//!   `guard.release()`: a fenced acquisition (the lock script), a watchdog
//!   started and stopped, a token-compared release that publishes to
//!   waiters.
//!
//! Each is run by 1 task and by 16 concurrent tasks (each on its own lock
//! name) for `--seconds`, and the acquire+release pairs per second, their
//! latency (p50, p99), the Redis commands per pair (`INFO stats`) and the
//! CPU per pair of this process and of redis-server (`/proc/PID/stat`) are
//! printed, with cronlease/raw ratios.
//!
//! `cargo run --release --example lock_cost [-- --seconds S]`

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "common/measure.rs"]
mod measure;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use common::RedisProcess;
use cronlease::{Cluster, RedisSettings};

#[derive(Parser)]
struct Args {
    /// How long each measurement runs.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
}

const COMPARE_AND_DELETE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// One kind of lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Raw,
    Cronlease,
}

/// What one measurement gave.
struct Figures {
    pairs: u64,
    seconds: f64,
    latencies_us: Vec<u64>,
    commands: u64,
    /// CPU of this process and of redis-server over the measurement, µs.
    cpu_us: (u64, u64),
}

impl Figures {
    fn per_second(&self) -> f64 {
        self.pairs as f64 / self.seconds
    }

    fn percentile(&self, p: f64) -> u64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        sorted
            .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    }

    fn commands_per_pair(&self) -> f64 {
        self.commands as f64 / self.pairs.max(1) as f64
    }

    fn cpu_per_pair(&self) -> (f64, f64) {
        let pairs = self.pairs.max(1) as f64;
        (self.cpu_us.0 as f64 / pairs, self.cpu_us.1 as f64 / pairs)
    }
}

/// CPU (user + system) of this process and of `redis` so far, µs. In
/// clock ticks of 10 ms, which a measurement of seconds makes fine enough.
fn cpu_pair(redis: &RedisProcess) -> Result<(u64, u64)> {
    let clk_tck = measure::clk_tck();
    let cpu_us = |pid: u32| {
        measure::proc_cpu_s(pid, clk_tck)
            .map(|s| (s * 1e6) as u64)
            .with_context(|| format!("cannot read /proc/{pid}/stat"))
    };
    Ok((cpu_us(std::process::id())?, cpu_us(redis.pid())?))
}

/// One acquire+release pair of `kind` on lock `name`.
async fn pair(
    kind: Kind,
    name: &str,
    cluster: &Cluster,
    raw: &mut redis::aio::ConnectionManager,
    script: &redis::Script,
) -> Result<()> {
    match kind {
        Kind::Raw => {
            let token = uuid::Uuid::new_v4().to_string();
            let set: Option<String> = redis::cmd("SET")
                .arg(name)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async(raw)
                .await?;
            anyhow::ensure!(set.is_some(), "raw lock {name} was held");
            let _: i64 = script.key(name).arg(&token).invoke_async(raw).await?;
        }
        Kind::Cronlease => {
            let guard = cluster
                .lock(name)
                .try_acquire()
                .await?
                .with_context(|| format!("lock {name} was held"))?;
            guard.release().await?;
        }
    }
    Ok(())
}

async fn measure(
    kind: Kind,
    tasks: usize,
    redis: &RedisProcess,
    cluster: &Cluster,
    seconds: u64,
) -> Result<Figures> {
    let raw = redis::Client::open(redis.url())?
        .get_connection_manager()
        .await?;
    let script = Arc::new(redis::Script::new(COMPARE_AND_DELETE));
    let before = measure::commands_processed(redis)?;
    let cpu_before = cpu_pair(redis)?;
    let start = Instant::now();
    let until = start + Duration::from_secs(seconds);
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (cluster, mut raw, script) = (cluster.clone(), raw.clone(), script.clone());
        handles.push(tokio::spawn(async move {
            let name = format!("bench-{kind:?}-{task}");
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let began = Instant::now();
                pair(kind, &name, &cluster, &mut raw, &script).await?;
                latencies.push(u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX));
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies_us = Vec::new();
    for handle in handles {
        latencies_us.extend(handle.await??);
    }
    let seconds = start.elapsed().as_secs_f64();
    let commands = measure::commands_processed(redis)? - before - 1;
    let cpu_after = cpu_pair(redis)?;
    Ok(Figures {
        cpu_us: (cpu_after.0 - cpu_before.0, cpu_after.1 - cpu_before.1),
        pairs: latencies_us.len() as u64,
        seconds,
        latencies_us,
        commands,
    })
}

async fn run(args: Args) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let redis = RedisProcess::start(dir.path())?;
    let cluster = Cluster::connect(RedisSettings::url(&redis.url()).key_prefix("lockcost")).await?;
    println!(
        "lock acquire+release pairs, {} s each, one private redis-server ({})",
        args.seconds,
        redis.url()
    );
    println!(
        "{:>6} | {:>10} | {:>14} | {:>16} | {:>18} | {:>24} | {:>10}",
        "tasks",
        "lock",
        "pairs/s",
        "p50 / p99 µs",
        "Redis cmds/pair",
        "CPU/pair µs: us / Redis",
        "vs raw"
    );
    for tasks in [1, 16] {
        let raw = measure(Kind::Raw, tasks, &redis, &cluster, args.seconds).await?;
        let ours = measure(Kind::Cronlease, tasks, &redis, &cluster, args.seconds).await?;
        for (kind, figures) in [(Kind::Raw, &raw), (Kind::Cronlease, &ours)] {
            let (ours_cpu, redis_cpu) = figures.cpu_per_pair();
            println!(
                "{tasks:>6} | {:>10} | {:>14.0} | {:>16} | {:>18.2} | {:>24} | {:>10}",
                format!("{kind:?}").to_lowercase(),
                figures.per_second(),
                format!("{} / {}", figures.percentile(0.5), figures.percentile(0.99)),
                figures.commands_per_pair(),
                format!("{ours_cpu:.1} / {redis_cpu:.1}"),
                match kind {
                    Kind::Raw => "1.00".to_string(),
                    Kind::Cronlease => format!("{:.2}", figures.per_second() / raw.per_second()),
                }
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    measure::run_main(run(Args::parse()))
}
