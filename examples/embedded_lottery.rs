//! The noon lottery draw inside a Rust service: several instances of this
//! program share one Redis, and the draw runs once per tick across all of
//! them through the `cronlease` library API. Each draw writes its winners with a
//! fenced write (a Lua script that refuses a fence lower than the stored
//! one), and `GET /` on any instance shows the latest winners.
//!
//! ```sh
//! redis-server --port 6399 &
//! for i in 1 2 3; do
//!   cargo run --example embedded_lottery -- --redis redis://127.0.0.1:6399/0 \
//!     --instance shop-$i --http 127.0.0.1:808$i --schedule '*/5 * * * * *' &
//! done
//! curl http://127.0.0.1:8081/      # the same winners on every instance
//! cronlease status --redis-url redis://127.0.0.1:6399/0 --prefix lottery
//! cronlease history lottery-draw --redis-url redis://127.0.0.1:6399/0 --prefix lottery
//! ```
//!
//! The three instances are replicas in `status`; `history`, `trigger`,
//! `pause` and `resume` work on the embedded job as on any other.
//!
//! The handler does what every embedded handler should: it carries the
//! run's fence into the write it makes, and it stops when told to (here the
//! draw is instant, so there is nothing to abandon half-way).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use clap::Parser;
use cronlease::{Cluster, JobBuilder, RedisSettings, Run};

#[derive(Parser)]
struct Args {
    /// The Redis every instance shares.
    #[arg(long)]
    redis: String,
    /// This instance's name (its replica id).
    #[arg(long)]
    instance: String,
    /// When the draw runs (cron, 5 to 7 fields), in `--timezone`.
    #[arg(long, default_value = "0 12 * * *")]
    schedule: String,
    #[arg(long, default_value = "Asia/Shanghai")]
    timezone: String,
    /// Where to serve `GET /` (the latest winners).
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Outcomes Redis could not take wait here (one per instance).
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

const KEY_PREFIX: &str = "lottery";
const WINNERS: &str = "lottery:winners";

/// Writes the winners unless a draw with a higher fence already wrote:
/// the store, not the scheduler, has the last word on stale writers.
const FENCED_WRITE: &str = r"
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence') or '-1')
if tonumber(ARGV[1]) <= stored then return stored end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'tick', ARGV[2], 'winners', ARGV[3], 'instance', ARGV[4])
return -1
";

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,cronlease=info".into()),
        )
        .init();
    let redis = redis::Client::open(args.redis.as_str())?
        .get_connection_manager()
        .await
        .context("cannot connect to Redis")?;
    let cluster = Cluster::connect(RedisSettings::url(&args.redis).key_prefix(KEY_PREFIX)).await?;
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("lottery-{}", args.instance)));
    let draw = {
        let redis = redis.clone();
        JobBuilder::new("lottery-draw", &args.schedule)
            .timezone(&args.timezone)
            .timeout(Duration::from_secs(60))
            .run(move |run: Run| draw(redis.clone(), run))
    };
    let scheduler = cluster
        .scheduler()
        .replica_id(&args.instance)
        .state_dir(&state_dir)
        .job(draw)
        .start()?;
    println!("{} is drawing on {:?}", args.instance, args.schedule);
    match args.http {
        Some(addr) => {
            let app = Router::new()
                .route("/", get(latest))
                .with_state(redis.clone());
            let listener = tokio::net::TcpListener::bind(addr).await?;
            println!("{} serves the winners on http://{addr}/", args.instance);
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await?;
        }
        None => tokio::signal::ctrl_c().await?,
    }
    scheduler.shutdown().await?;
    Ok(())
}

/// One draw: six numbers from 1 to 49, written with the run's fence.
async fn draw(mut redis: redis::aio::ConnectionManager, run: Run) -> Result<(), String> {
    let winners = numbers(run.tick_ms(), run.fence());
    let stored: i64 = redis::Script::new(FENCED_WRITE)
        .key(WINNERS)
        .arg(run.fence())
        .arg(run.tick().to_rfc3339())
        .arg(&winners)
        .arg(run.replica())
        .invoke_async(&mut redis)
        .await
        .map_err(|e| format!("cannot record the winners: {e}"))?;
    if stored >= 0 {
        // A newer draw already wrote: this run's lease was lost.
        return Err(format!(
            "refused: fence {} is not above the stored {stored}",
            run.fence()
        ));
    }
    println!(
        "{}: winners of {} (fence {}): {winners}",
        run.replica(),
        run.tick(),
        run.fence()
    );
    Ok(())
}

/// Six distinct numbers from 1 to 49, from the tick and the fence.
fn numbers(tick_ms: i64, fence: u64) -> String {
    let mut state = (tick_ms as u64) ^ fence.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15;
    let mut picked: Vec<u64> = Vec::new();
    while picked.len() < 6 {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let n = (z ^ (z >> 31)) % 49 + 1;
        if !picked.contains(&n) {
            picked.push(n);
        }
    }
    picked.sort_unstable();
    picked
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `GET /`: the latest winners, whichever instance drew them.
async fn latest(State(mut redis): State<redis::aio::ConnectionManager>) -> String {
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(WINNERS)
        .query_async(&mut redis)
        .await
        .unwrap_or_default();
    if fields.is_empty() {
        return "no draw yet\n".to_string();
    }
    fields.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}
