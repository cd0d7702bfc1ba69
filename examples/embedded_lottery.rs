//! The noon lottery draw inside a Rust service: several instances of this
//! program share one Redis, and the draw runs once per tick across all of
//! them through the `cronlease` library API. Each draw records its winners
//! exactly as the reference job `examples/lottery-draw.sh` does (the same
//! keys, the same fenced write), and `GET /` on any instance shows the
//! latest winners.
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
//! `pause` and `resume` work on the embedded job as on any other. The demo
//! runs three of them as `scripts/demo --kind embedded`, and checks what they
//! recorded as it checks `cronlease run` replicas.
//!
//! The handler does what every embedded handler should: it carries the
//! run's fence into the write it makes, and it stops when told to (here the
//! draw is one script call, so there is nothing to abandon half-way).
//! SIGTERM or Ctrl-C stops the instance in order: no new claims, runs in
//! flight finish, their outcomes are recorded, exit status 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use clap::Parser;
use cronlease::{Cluster, JobBuilder, RedisSettings, Run};
use redis::aio::ConnectionManager;
use tokio::signal::unix::{SignalKind, signal};

/// Settings left out take the library's defaults (as a job table's
/// `[daemon]` and `[redis]` sections do).
#[derive(Parser)]
struct Args {
    /// The Redis every instance shares.
    #[arg(long)]
    redis: String,
    /// This instance's name (its replica id).
    #[arg(long)]
    instance: String,
    /// The first part of cronlease's keys (`[redis] key_prefix`), as
    /// `cronlease status --prefix` names it. The draws' own keys are
    /// `lottery:*` whatever it is, as `lottery-draw.sh` writes them.
    #[arg(long, default_value = "lottery")]
    prefix: String,
    /// When the draw runs (cron, 5 to 7 fields), in `--timezone`.
    #[arg(long, default_value = "0 12 * * *")]
    schedule: String,
    #[arg(long, default_value = "Asia/Shanghai")]
    timezone: String,
    /// How many entrants each draw picks.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10))]
    winners: u32,
    /// How long a draw may take (the job's `timeout`).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Where to serve `GET /` (the latest winners).
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Outcomes Redis could not take wait here (one per instance).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// A run's lease (`[daemon] lease`), e.g. `3s`.
    #[arg(long, value_parser = humantime::parse_duration)]
    lease: Option<Duration>,
    /// How often this instance announces itself (`[daemon] heartbeat`).
    #[arg(long, value_parser = humantime::parse_duration)]
    heartbeat: Option<Duration>,
    /// How long a stop lets a draw in flight finish (`[daemon] shutdown_grace`).
    #[arg(long, value_parser = humantime::parse_duration)]
    shutdown_grace: Option<Duration>,
    /// How long a draw told to stop may go on (`[daemon] kill_grace`).
    #[arg(long, value_parser = humantime::parse_duration)]
    kill_grace: Option<Duration>,
    /// How long one Redis command of cronlease may take (`[redis] command_timeout`).
    #[arg(long, value_parser = humantime::parse_duration)]
    command_timeout: Option<Duration>,
}

/// The keys `lottery-draw.sh` writes, and this program with them.
const ENTRANTS: &str = "lottery:entrants";
const FENCE: &str = "lottery:fence";
const DRAW_PREFIX: &str = "lottery:draw:";

/// One draw, as `lottery-draw.sh` makes it, in one script so that no other
/// run slips between the checks and the writes:
///
/// - `lottery:entrants` is seeded with ten names when empty;
/// - the highest fence ever used is kept in `lottery:fence`: a lower one
///   was claimed before some later run and has lost its lease meanwhile, it
///   is refused (`stale <highest>`);
/// - each tick's draw is written once, `lottery:draw:<tick_ms>` =
///   `"<fence> <replica> <winner>…"` (`SET NX`): a second run for the same
///   tick is refused (`drawn <the value>`).
///
/// KEYS: entrants, fence, the tick's draw. ARGV: fence, replica, how many
/// winners. Returns `ok <winner>…`, `stale …` or `drawn …`.
const DRAW: &str = r#"
if redis.call("SCARD", KEYS[1]) == 0 then
  redis.call("SADD", KEYS[1], "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")
end
local fence = tonumber(ARGV[1])
local highest = tonumber(redis.call("GET", KEYS[2]) or "0")
if fence < highest then
  return "stale " .. highest
end
if fence > highest then
  redis.call("SET", KEYS[2], ARGV[1])
end
local winners = table.concat(redis.call("SRANDMEMBER", KEYS[1], tonumber(ARGV[3])), " ")
if not redis.call("SET", KEYS[3], ARGV[1] .. " " .. ARGV[2] .. " " .. winners, "NX") then
  return "drawn " .. redis.call("GET", KEYS[3])
end
return "ok " .. winners
"#;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,cronlease=info".into()),
        )
        .init();
    // Before anything else: a SIGTERM from now on stops in order.
    let stop = stop_signal()?;
    let redis = redis::Client::open(args.redis.as_str())?
        .get_connection_manager()
        .await
        .context("cannot connect to Redis")?;
    let mut settings = RedisSettings::url(&args.redis).key_prefix(&args.prefix);
    if let Some(timeout) = args.command_timeout {
        settings = settings.command_timeout(timeout);
    }
    let cluster = Cluster::connect(settings).await?;
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("lottery-{}", args.instance)));
    let draw = {
        let redis = redis.clone();
        let winners = args.winners;
        JobBuilder::new("lottery-draw", &args.schedule)
            .timezone(&args.timezone)
            .timeout(args.timeout)
            .run(move |run: Run| draw(redis.clone(), run, winners))
    };
    let mut builder = cluster
        .scheduler()
        .replica_id(&args.instance)
        .state_dir(&state_dir)
        .job(draw);
    if let Some(lease) = args.lease {
        builder = builder.lease(lease);
    }
    if let Some(period) = args.heartbeat {
        builder = builder.heartbeat(period);
    }
    if let Some(grace) = args.shutdown_grace {
        builder = builder.shutdown_grace(grace);
    }
    if let Some(grace) = args.kill_grace {
        builder = builder.kill_grace(grace);
    }
    let scheduler = builder.start()?;
    println!("{} is drawing on {:?}", args.instance, args.schedule);
    match args.http {
        Some(addr) => {
            let app = Router::new()
                .route("/", get(latest))
                .with_state(redis.clone());
            let listener = tokio::net::TcpListener::bind(addr).await?;
            println!("{} serves the winners on http://{addr}/", args.instance);
            axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await?;
        }
        None => stop.await,
    }
    println!("{} is stopping", args.instance);
    scheduler.shutdown().await?;
    Ok(())
}

/// Resolves at the first SIGTERM (systemd, the demo) or SIGINT (Ctrl-C).
/// The handlers are installed when it is called, not when it is awaited.
fn stop_signal() -> Result<impl Future<Output = ()>> {
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

/// One draw of `winners` entrants, written with the run's fence.
async fn draw(mut redis: ConnectionManager, run: Run, winners: u32) -> Result<(), String> {
    let reply: String = redis::Script::new(DRAW)
        .key(ENTRANTS)
        .key(FENCE)
        .key(format!("{DRAW_PREFIX}{}", run.tick().as_millisecond()))
        .arg(run.fence())
        .arg(run.replica())
        .arg(winners)
        .invoke_async(&mut redis)
        .await
        .map_err(|e| format!("cannot record the draw: {e}"))?;
    let (word, rest) = reply.split_once(' ').unwrap_or((reply.as_str(), ""));
    let which = format!(
        "run {} on {}, tick {}",
        run.run_id(),
        run.replica(),
        run.tick()
    );
    match word {
        "ok" => {
            println!("tick {} fence {} winners: {rest}", run.tick(), run.fence());
            Ok(())
        }
        // A newer run already drew: this run's lease was lost.
        "stale" => Err(format!(
            "stale fence {} < {rest} ({which}): refusing to draw",
            run.fence()
        )),
        "drawn" => Err(format!(
            "tick already drawn: \"{rest}\" ({which}, fence {})",
            run.fence()
        )),
        _ => Err(format!("unexpected reply from the draw script: {reply}")),
    }
}

/// `GET /`: the latest draw, whichever instance made it. The draws are
/// keyed by tick, as `lottery-draw.sh` keys them, so the latest is found by
/// a `SCAN`: fine for one draw a day, an index for more.
async fn latest(State(mut redis): State<ConnectionManager>) -> String {
    match latest_draw(&mut redis).await {
        Ok(Some((tick_ms, value))) => {
            let tick = chrono::DateTime::from_timestamp_millis(tick_ms)
                .map_or_else(|| tick_ms.to_string(), |t| t.to_rfc3339());
            let mut words = value.splitn(3, ' ');
            let fence = words.next().unwrap_or("");
            let instance = words.next().unwrap_or("");
            let winners = words.next().unwrap_or("");
            format!("tick: {tick}\nfence: {fence}\ninstance: {instance}\nwinners: {winners}\n")
        }
        Ok(None) => "no draw yet\n".to_string(),
        Err(e) => format!("cannot read the draws: {e}\n"),
    }
}

/// The draw with the highest tick: `(tick_ms, "<fence> <replica> <winner>…")`.
async fn latest_draw(redis: &mut ConnectionManager) -> redis::RedisResult<Option<(i64, String)>> {
    let mut newest: Option<i64> = None;
    {
        let mut keys =
            redis::AsyncCommands::scan_match::<_, String>(&mut *redis, format!("{DRAW_PREFIX}*"))
                .await?;
        while let Some(key) = keys.next_item().await {
            let tick = key?
                .strip_prefix(DRAW_PREFIX)
                .and_then(|t| t.parse::<i64>().ok());
            newest = newest.max(tick);
        }
    }
    let Some(tick_ms) = newest else {
        return Ok(None);
    };
    let value: Option<String> = redis::cmd("GET")
        .arg(format!("{DRAW_PREFIX}{tick_ms}"))
        .query_async(redis)
        .await?;
    Ok(value.map(|v| (tick_ms, v)))
}
