//! What a cronlease lock costs, against the hand-rolled lock it replaces,
//! measured in the same run on the same private `redis-server`.
//!
//! - **raw**: `SET key token NX PX 30000`, then a Lua compare-and-delete
//!   (the usual `SET NX` lock), on a `ConnectionManager` — the connection
//!   type cronlease uses for one server — as it is usually written: a
//!   `Uuid::new_v4()` token per pair (a `getrandom` system call) and the
//!   script through redis-rs's `Script`;
//! - **lean**: the same lock written as lean as cronlease's side: the
//!   token a UUID from random bits drawn once plus a counter (no system
//!   call, as cronlease's run ids), both commands built directly with the
//!   script's SHA1 known. The stricter baseline: what is left between it
//!   and cronlease is the protocol;
//! - **cronlease**: `cluster.lock(name).try_acquire()` then
//!   `guard.release()`: a fenced acquisition with the holder's record, the
//!   lease under the cluster's keeper, a token-compared release that wakes
//!   waiters if there are any.
//!
//! Each is run by 1 task and by 16 concurrent tasks (each on its own lock
//! name: no contention) for `--seconds`, in turns of `--slice-ms` (raw,
//! lean, cronlease, raw, …), so that a change in the load of the machine
//! weighs on all alike. Printed: the acquire+release pairs per second,
//! their latency (p50, p99), the Redis commands per pair and the µs Redis
//! spent in each (`INFO commandstats`; a script's µs include the commands
//! it calls), the CPU per pair of this process and of redis-server
//! (`/proc/PID/stat`), and cronlease's ratios to raw and to lean of pairs/s
//! and of CPU per pair (theirs over cronlease's).
//!
//! `cargo run --release --example lock_cost [-- --seconds S --slice-ms M]`

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "common/measure.rs"]
mod measure;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use common::RedisProcess;
use cronlease::{Cluster, RedisSettings};
use redis::aio::ConnectionManager;

#[derive(Parser)]
struct Args {
    /// How long each kind of lock is measured, per number of tasks.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// The length of one slice: raw and cronlease take turns.
    #[arg(long, default_value_t = 500)]
    slice_ms: u64,
}

const COMPARE_AND_DELETE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// One kind of lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Raw,
    Lean,
    Cronlease,
}

const KINDS: [Kind; 3] = [Kind::Raw, Kind::Lean, Kind::Cronlease];

/// What the measurements of one kind gave, summed over its slices.
#[derive(Default)]
struct Figures {
    pairs: u64,
    seconds: f64,
    latencies_us: Vec<u64>,
    /// Calls and µs per Redis command (`INFO commandstats`).
    commands: BTreeMap<String, (u64, u64)>,
    /// CPU of this process and of redis-server, µs.
    cpu_us: (u64, u64),
}

impl Figures {
    fn per_second(&self) -> f64 {
        self.pairs as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }

    fn percentile(&self, p: f64) -> u64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        sorted
            .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    }

    fn per_pair(&self, amount: u64) -> f64 {
        amount as f64 / self.pairs.max(1) as f64
    }

    fn commands_per_pair(&self) -> f64 {
        self.per_pair(self.commands.values().map(|(calls, _)| calls).sum())
    }

    /// Client and Redis CPU per pair, µs.
    fn cpu_per_pair(&self) -> (f64, f64) {
        (self.per_pair(self.cpu_us.0), self.per_pair(self.cpu_us.1))
    }

    fn cpu_total_per_pair(&self) -> f64 {
        let (client, redis) = self.cpu_per_pair();
        client + redis
    }

    /// `command: µs per pair` for each command Redis ran at least once a
    /// pair, the costliest first.
    fn breakdown(&self) -> String {
        let mut rows: Vec<(&String, f64, f64)> = self
            .commands
            .iter()
            .map(|(name, (calls, usec))| (name, self.per_pair(*calls), self.per_pair(*usec)))
            .filter(|(_, calls, _)| *calls >= 0.5)
            .collect();
        rows.sort_by(|a, b| b.2.total_cmp(&a.2));
        rows.iter()
            .map(|(name, calls, usec)| format!("{name} {calls:.0}× {usec:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// CPU (user + system) of this process and of `redis` so far, µs. In
/// clock ticks of 10 ms, which the sum of many slices makes fine enough.
fn cpu_pair(redis: &RedisProcess) -> Result<(u64, u64)> {
    let clk_tck = measure::clk_tck();
    let cpu_us = |pid: u32| {
        measure::proc_cpu_s(pid, clk_tck)
            .map(|s| (s * 1e6) as u64)
            .with_context(|| format!("cannot read /proc/{pid}/stat"))
    };
    Ok((cpu_us(std::process::id())?, cpu_us(redis.pid())?))
}

/// Calls and µs of each command so far (`INFO commandstats`), without
/// the `INFO` calls of the benchmark itself.
fn command_stats(conn: &mut redis::Connection) -> Result<BTreeMap<String, (u64, u64)>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .context("INFO commandstats")?;
    Ok(info
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_string(), (field("calls")?, field("usec")?)))
        })
        .filter(|(name, _)| name != "info")
        .collect())
}

/// The raw lock's token: a UUID from random bits drawn once per process,
/// with a counter XORed into its low bits, written into `buffer` — as
/// cheap as cronlease's run ids (no system call, no allocation).
fn raw_token(buffer: &mut [u8; 45]) -> &str {
    static BASE: OnceLock<u128> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| uuid::Uuid::new_v4().as_u128());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed) & ((1 << 56) - 1);
    uuid::Uuid::from_u128(base ^ u128::from(count))
        .hyphenated()
        .encode_lower(buffer)
}

/// One acquire+release pair of the raw lock on `name`, as it is usually
/// written.
async fn raw_pair(name: &str, raw: &mut ConnectionManager, script: &redis::Script) -> Result<()> {
    let token = uuid::Uuid::new_v4().to_string();
    let taken: Option<String> = redis::cmd("SET")
        .arg(name)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(raw)
        .await?;
    anyhow::ensure!(taken.is_some(), "raw lock {name} was held");
    let released: i64 = script.key(name).arg(&token).invoke_async(raw).await?;
    anyhow::ensure!(released == 1, "raw lock {name} was not ours to release");
    Ok(())
}

/// One acquire+release pair of the raw lock on `name`, written lean.
async fn lean_pair(name: &str, raw: &mut ConnectionManager, sha: &str) -> Result<()> {
    let mut buffer = uuid::Uuid::encode_buffer();
    let token = raw_token(&mut buffer);
    let mut set = redis::Cmd::with_capacity(6, 64 + name.len() + token.len());
    set.arg("SET")
        .arg(name)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000);
    let taken: Option<String> = set.query_async(raw).await?;
    anyhow::ensure!(taken.is_some(), "raw lock {name} was held");
    let mut release = redis::Cmd::with_capacity(5, 64 + name.len() + token.len());
    release.arg("EVALSHA").arg(sha).arg(1).arg(name).arg(token);
    let released: i64 = release.query_async(raw).await?;
    anyhow::ensure!(released == 1, "raw lock {name} was not ours to release");
    Ok(())
}

/// One acquire+release pair of a cronlease lock on `name`.
async fn cronlease_pair(name: &str, cluster: &Cluster) -> Result<()> {
    let guard = cluster
        .lock(name)
        .try_acquire()
        .await?
        .with_context(|| format!("lock {name} was held"))?;
    anyhow::ensure!(
        guard.release().await?,
        "lock {name} was not ours to release"
    );
    Ok(())
}

/// Where the two kinds run: the private Redis (and a connection of the
/// benchmark's own, for `INFO`), the cluster, the raw lock's connection
/// and script.
struct Bench {
    redis: RedisProcess,
    info: std::sync::Mutex<redis::Connection>,
    cluster: Cluster,
    raw: ConnectionManager,
    script: redis::Script,
    sha: String,
}

impl Bench {
    /// `tasks` tasks take and release locks of `kind` until `until`, each
    /// its own lock; the latency of each pair, µs.
    async fn slice(&self, kind: Kind, tasks: usize, until: Instant) -> Result<Vec<u64>> {
        let mut set = tokio::task::JoinSet::new();
        for task in 0..tasks {
            let (cluster, mut raw) = (self.cluster.clone(), self.raw.clone());
            let (script, sha) = (self.script.clone(), self.sha.clone());
            set.spawn(async move {
                let name = format!("bench-{kind:?}-{task}");
                let mut latencies = Vec::new();
                while Instant::now() < until {
                    let began = Instant::now();
                    match kind {
                        Kind::Raw => raw_pair(&name, &mut raw, &script).await?,
                        Kind::Lean => lean_pair(&name, &mut raw, &sha).await?,
                        Kind::Cronlease => cronlease_pair(&name, &cluster).await?,
                    }
                    latencies.push(u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
                anyhow::Ok(latencies)
            });
        }
        let mut latencies = Vec::new();
        while let Some(joined) = set.join_next().await {
            latencies.extend(joined??);
        }
        Ok(latencies)
    }

    fn info(&self) -> std::sync::MutexGuard<'_, redis::Connection> {
        // Only this task uses it; a panic elsewhere leaves it usable.
        self.info
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every kind with `tasks` tasks, in turns of `slice`, `seconds` each
    /// in all.
    async fn measure(&self, tasks: usize, seconds: u64, slice: Duration) -> Result<[Figures; 3]> {
        let mut figures = [Figures::default(), Figures::default(), Figures::default()];
        let slices = (Duration::from_secs(seconds).as_millis() / slice.as_millis().max(1)).max(1);
        for _ in 0..slices {
            for (kind, figures) in KINDS.into_iter().zip(&mut figures) {
                // The CPU is read inside the INFO calls, which are not the
                // locks' work.
                let stats_before = command_stats(&mut self.info())?;
                let cpu_before = cpu_pair(&self.redis)?;
                let start = Instant::now();
                let latencies = self.slice(kind, tasks, start + slice).await?;
                figures.seconds += start.elapsed().as_secs_f64();
                let cpu_after = cpu_pair(&self.redis)?;
                let stats_after = command_stats(&mut self.info())?;
                figures.pairs += latencies.len() as u64;
                figures.latencies_us.extend(latencies);
                figures.cpu_us.0 += cpu_after.0 - cpu_before.0;
                figures.cpu_us.1 += cpu_after.1 - cpu_before.1;
                for (name, (calls, usec)) in stats_after {
                    let (calls_before, usec_before) =
                        stats_before.get(&name).copied().unwrap_or((0, 0));
                    let entry = figures.commands.entry(name).or_default();
                    entry.0 += calls - calls_before;
                    entry.1 += usec - usec_before;
                }
            }
        }
        Ok(figures)
    }
}

async fn run(args: Args) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let redis = RedisProcess::start(dir.path())?;
    let cluster = Cluster::connect(RedisSettings::url(&redis.url()).key_prefix("lockcost")).await?;
    let mut raw = redis::Client::open(redis.url())?
        .get_connection_manager()
        .await?;
    let script = redis::Script::new(COMPARE_AND_DELETE);
    let sha = script.prepare_invoke().load_async(&mut raw).await?;
    let info = std::sync::Mutex::new(redis.connect(Duration::from_secs(5))?);
    let bench = Bench {
        redis,
        info,
        cluster,
        raw,
        script,
        sha,
    };
    let slice = Duration::from_millis(args.slice_ms);
    println!(
        "lock acquire+release pairs, {} s each in slices of {} ms, one private redis-server ({})",
        args.seconds,
        slice.as_millis(),
        bench.redis.url()
    );
    println!(
        "{:>5} | {:>9} | {:>8} | {:>13} | {:>9} | {:>22} | {:>26} | Redis µs/pair by command",
        "tasks",
        "lock",
        "pairs/s",
        "p50 / p99 µs",
        "cmds/pair",
        "CPU/pair µs: us + Redis",
        "vs raw; vs lean: pairs/s, CPU"
    );
    for tasks in [1, 16] {
        let [raw, lean, ours] = bench.measure(tasks, args.seconds, slice).await?;
        let ratios = |base: &Figures| {
            format!(
                "{:.2}, {:.2}",
                ours.per_second() / base.per_second(),
                base.cpu_total_per_pair() / ours.cpu_total_per_pair()
            )
        };
        for (kind, figures) in KINDS.into_iter().zip([&raw, &lean, &ours]) {
            let (client_cpu, redis_cpu) = figures.cpu_per_pair();
            println!(
                "{tasks:>5} | {:>9} | {:>8.0} | {:>13} | {:>9.2} | {:>22} | {:>26} | {}",
                format!("{kind:?}").to_lowercase(),
                figures.per_second(),
                format!("{} / {}", figures.percentile(0.5), figures.percentile(0.99)),
                figures.commands_per_pair(),
                format!(
                    "{client_cpu:.1} + {redis_cpu:.1} = {:.1}",
                    client_cpu + redis_cpu
                ),
                match kind {
                    Kind::Raw | Kind::Lean => String::new(),
                    Kind::Cronlease => format!("{}; {}", ratios(&raw), ratios(&lean)),
                },
                figures.breakdown()
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    measure::run_main(run(Args::parse()))
}
