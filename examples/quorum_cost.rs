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

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cronlease::config::{Config, Overlap};
use cronlease::outcome::{Outcome, Status, Trigger};
use cronlease::store::{ClaimReply, ClaimRequest, Claimant, Store, WhenBusy};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A private redis-server, killed on drop.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Result<Server> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = tempfile::tempdir()?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start redis-server (scripts/install-deps): {e}"))?;
        let server = Server {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.commands().is_err() {
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {port} does not answer").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `total_commands_processed` so far.
    fn commands(&self) -> Result<u64> {
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_connection()?;
        let info: String = redis::cmd("INFO").arg("stats").query(&mut conn)?;
        info.lines()
            .find_map(|line| line.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| "no total_commands_processed in INFO stats".into())
    }
}

impl Server {
    /// µs spent in `EVALSHA` so far (`INFO commandstats`).
    fn script_us(&self) -> Result<u64> {
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_connection()?;
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut conn)?;
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
            .and_then(|stats| stats.split(',').find_map(|kv| kv.strip_prefix("usec=")))
            .and_then(|us| us.parse().ok())
            .unwrap_or(0))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
        },
        min_tick: -1,
        trigger: Trigger::Schedule,
        when_busy: WhenBusy::Skip,
        deadline_ms: -1,
    };
    let ClaimReply::Claimed {
        fence,
        started_ms,
        lease_key,
        ..
    } = store.claim(&request).await?
    else {
        return Err(format!("tick {tick_ms} of {job} not claimed").into());
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
    };
    store.finish(&outcome, 100, None).await?;
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
    servers: &[&Server],
    cycles: usize,
    seconds: u64,
) -> Result<Figures> {
    // Ticks in the past, one per cycle, increasing: every claim wins.
    let base = now_ms() - 86_400_000;
    let before: u64 = servers.iter().map(|s| s.commands()).sum::<Result<u64>>()?;
    let script_before: u64 = servers.iter().map(|s| s.script_us()).sum::<Result<u64>>()?;
    let mut took = Vec::with_capacity(cycles);
    for i in 0..cycles {
        let sent = Instant::now();
        cycle(store, "seq", base + i as i64).await?;
        took.push(sent.elapsed().as_micros());
    }
    let after: u64 = servers.iter().map(|s| s.commands()).sum::<Result<u64>>()?;
    let script_after: u64 = servers.iter().map(|s| s.script_us()).sum::<Result<u64>>()?;
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
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
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
            .ok_or_else(|| format!("{name} needs a value"))?
            .parse()?),
    }
}

async fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cycles = usize::try_from(arg(&args, "--cycles", 2000)?)?;
    let seconds = arg(&args, "--seconds", 5)?;
    let servers = [Server::start()?, Server::start()?, Server::start()?];
    let single = store(&format!("url = \"{}\"", servers[0].url()), "single").await?;
    let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url())).collect();
    let quorum = store(&format!("quorum = [{}]", urls.join(", ")), "quorum").await?;

    println!(
        "tick cycles (claim + finish): {cycles} one at a time, then 32 claimers for {seconds} s"
    );
    let base = measure(&single, &[&servers[0]], cycles, seconds).await?;
    let all: Vec<&Server> = servers.iter().collect();
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
