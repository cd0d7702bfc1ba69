//! The chaos suite, in the spirit of Jepsen: several `cronlease run`
//! replicas share one private Redis, each through its own fault-injecting
//! TCP proxy, and run probe jobs every second while the suite kills, stops,
//! partitions, slows, skews, restarts and reloads them, and restarts, pauses
//! and wipes Redis. Afterwards a checker reads what the jobs did (one
//! append-only file of `start`/`end` lines, outside Redis), what the replicas
//! recorded (the outcome streams) and what was injected (the fault log), and
//! reports every breach of the promise in DESIGN.md.
//!
//! ```sh
//! scripts/chaos                                   # builds, then 90 s with a random seed
//! scripts/chaos --duration 3m --seed 42 --replicas 5 --out /tmp/chaos-42
//! scripts/chaos --faults kill9,sigstop            # only these kinds of fault
//! cargo run --release --example chaos -- --recheck /tmp/chaos-42   # the checker again, offline
//! ```
//!
//! The seed is printed first; `--seed N` replays the same sequence of fault
//! kinds, parameters and gaps (which replica holds a run at a given instant
//! is still up to the race, so a replay is close, not identical).
//!
//! Everything lives in the output directory (a fresh temporary directory
//! unless `--out` is given), which is kept and printed: `effects.log` (the
//! jobs' side effects), `faults.jsonl` (one JSON object per fault, with
//! start/end wall ms), `rN.log` and `rN/jobs.toml` per replica, `redis/`
//! (data and log), `records.jsonl` (every outcome record the checker read),
//! `meta.json` (seed, timings), `checker.txt` (the full report) and
//! `summary.json`. `--recheck DIR` runs the checker again on those files.
//!
//! What the checker reports (see `check` for the exact rules):
//!
//! - **D** ticks started more than once (reruns of abandoned ticks excepted);
//! - **M** ticks with no trace at all (no start, no outcome, not recorded
//!   `missed`/`skipped_overlap`), in total and outside Redis outages;
//! - **F** fence regressions among current outcomes, by tick (a fence handed
//!   out before Redis lost its data still counts after the window);
//! - **S** a run or a tick with two current outcomes;
//! - **O** the most runs of a non-`allow` job at once (outside state-loss
//!   windows: a Redis that forgot a lease lets a second run start);
//! - **L** runs that started but left no outcome record;
//! - **E** replicas that died by themselves or did not exit 0 on SIGTERM;
//! - takeover time after a holder is killed, and abort latency after a
//!   frozen holder's lease lapses.
//!
//! Redis restarted without its data is a declared state-loss window: ticks
//! within lease + 2 s of it are not held to D, F, S, O and L (the streams are
//! snapshotted just before the wipe so the history before it survives).
//!
//! Processes are killed on every way out: normal end, error, panic (Drop),
//! Ctrl-C (the run stops early, replicas are stopped in order and checked),
//! and the suite itself being killed (`PR_SET_PDEATHSIG`; a replica under
//! `faketime` is started through this executable's `--exec-tied` trampoline
//! so that it has the same tie to its parent).
//!
//! An example cannot import `tests/it/support`, so the helpers it needs are
//! here (they follow `examples/demo.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsString, c_int};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, SecondsFormat, Utc};
use clap::Parser;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// Key prefix of the suite's cluster in its private Redis.
const KEY_PREFIX: &str = "chaos";

/// The probe jobs: name, extra TOML lines, shell body between the lines.
const JOBS: [(&str, &str, &str); 4] = [
    ("quick", "", "true"),
    ("slow", "", "sleep 1.5"),
    ("allowed", "overlap = \"allow\"\n", "sleep 1.5"),
    ("rerun", "on_holder_lost = \"rerun\"\n", "sleep 0.5"),
];

/// The job whose runs may overlap by design.
const ALLOW_JOB: &str = "allowed";

/// The daemon's lease (`[daemon] lease`), ms.
const LEASE_MS: i64 = 2_000;

/// Ticks within this much of a Redis restart without data are a declared
/// state-loss window: lease + 2 s.
const STATE_LOSS_MARGIN_MS: i64 = LEASE_MS + 2_000;

/// Ticks this long before a Redis outage and up to this long after it may
/// be missed legitimately: the claim gives up on a tick 1 s after it, and a
/// replica needs a reconnect and a catch-up after Redis is back.
const OUTAGE_BEFORE_MS: i64 = 1_000;
const OUTAGE_AFTER_MS: i64 = 5_000;

/// The checked ticks start this long after every replica is ready and end
/// this long before the shutdown.
const CHECK_MARGIN_MS: i64 = 3_000;

/// After start-up, the cluster runs this long before the first fault; no
/// fault starts later than this before the end.
const WARM_UP: Duration = Duration::from_secs(4);
const COOL_DOWN: Duration = Duration::from_secs(12);

/// How long a replica may take to log `ready`, and to exit after SIGTERM
/// (`shutdown_grace` 3 s + `kill_grace` 1 s + slack).
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const STOP_TIMEOUT: Duration = Duration::from_secs(8);

/// The clock skews a replica's host can get (`faketime -f`); "0" is the
/// true clock.
const SKEWS: [&str; 6] = ["+0.5s", "-0.5s", "+5s", "-5s", "+60s", "-60s"];

/// Every kind of fault, with its weight in the random choice.
const FAULT_KINDS: [(&str, u64); 12] = [
    ("kill9", 30),
    ("sigstop", 30),
    ("proxy_delay", 15),
    ("proxy_blackhole", 15),
    ("proxy_drop", 10),
    ("proxy_reset", 10),
    ("client_pause", 15),
    ("redis_restart", 10),
    ("redis_wipe", 7),
    ("clock_skew", 20),
    ("sigterm", 15),
    ("reload", 15),
];

/// The hidden first argument that makes this executable a trampoline:
/// `chaos --exec-tied PROGRAM ARGS…` sets `PR_SET_PDEATHSIG` and execs.
const EXEC_TIED: &str = "--exec-tied";

/// Set by SIGINT/SIGTERM: stop injecting, stop the replicas in order, check.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The output directory, for the message on an error.
static OUT_DIR: OnceLock<PathBuf> = OnceLock::new();

/// A Jepsen-style chaos run of cronlease replicas against a private Redis.
#[derive(Debug, Parser)]
#[command(name = "chaos")]
struct Args {
    /// How long the replicas run under faults (then a clean shutdown and the check).
    #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Seed of the fault schedule (random when not given; printed first).
    #[arg(long)]
    seed: Option<u64>,
    /// How many replicas.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=9))]
    replicas: u32,
    /// Output directory (created; must be empty). Default: a new temporary directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only these kinds of fault, comma-separated (default: all): kill9, sigstop,
    /// proxy_delay, proxy_blackhole, proxy_drop, proxy_reset, client_pause,
    /// redis_restart, redis_wipe, clock_skew, sigterm, reload.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Run only the checker again, on the output directory of an earlier run
    /// (its effects.log, faults.jsonl, records.jsonl, meta.json and logs).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["seed", "out", "faults"])]
    recheck: Option<PathBuf>,
}

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    if argv.nth(1).as_deref() == Some(EXEC_TIED.as_ref()) {
        return exec_tied(argv.collect());
    }
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("chaos: error: {e:#}");
            if let Some(out) = OUT_DIR.get() {
                eprintln!("chaos: logs are in {}", out.display());
            }
            ExitCode::FAILURE
        }
    }
}

/// The trampoline: dies with its parent (`faketime`, which dies with the
/// suite), then becomes PROGRAM.
fn exec_tied(rest: Vec<OsString>) -> ExitCode {
    let Some((program, args)) = rest.split_first() else {
        eprintln!("chaos {EXEC_TIED}: no program given");
        return ExitCode::FAILURE;
    };
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        eprintln!("chaos {EXEC_TIED}: cannot set PR_SET_PDEATHSIG: {e}");
        return ExitCode::FAILURE;
    }
    if std::os::unix::process::parent_id() == 1 {
        // The parent died before the tie was made.
        return ExitCode::FAILURE;
    }
    let e = Command::new(program).args(args).exec();
    eprintln!("chaos {EXEC_TIED}: cannot execute {program:?}: {e}");
    ExitCode::FAILURE
}

/// The whole run; `Ok(false)` when the checker found violations.
fn run(args: &Args) -> Result<bool> {
    if let Some(dir) = &args.recheck {
        let evidence = Evidence::load(dir)?;
        return evidence.report(&evidence.check(), false);
    }
    let kinds = enabled_kinds(&args.faults)?;
    let binary = cronlease_binary()?;
    let mut tools = vec!["redis-server"];
    if kinds.iter().any(|(k, _)| *k == "clock_skew") {
        tools.push("faketime");
    }
    for tool in tools {
        if !on_path(tool) {
            bail!("{tool} is not on PATH: run scripts/install-deps (scripts/chaos does)");
        }
    }
    let seed = args.seed.unwrap_or_else(random_seed);
    println!("seed: {seed}   (replay with --seed {seed})");
    install_interrupt_handler()?;
    let out = prepare_out(args.out.as_deref())?;
    let _ = OUT_DIR.set(out.clone());
    println!("output directory: {}", out.display());

    let mut harness = Harness::start(args, &out, &binary, seed, kinds)?;
    harness.inject_faults(args.duration)?;
    harness.shutdown();
    let evidence = harness.collect(seed, args)?;
    drop(harness);
    let passed = evidence.report(&evidence.check(), true)?;
    println!("\nlogs: {}", out.display());
    Ok(passed)
}

fn enabled_kinds(filter: &[String]) -> Result<Vec<(&'static str, u64)>> {
    if filter.is_empty() {
        return Ok(FAULT_KINDS.to_vec());
    }
    let mut kinds = Vec::new();
    for name in filter {
        match FAULT_KINDS.iter().find(|(k, _)| k == name) {
            Some(kind) => kinds.push(*kind),
            None => bail!(
                "unknown fault kind {name:?}; the kinds are {}",
                FAULT_KINDS.map(|(k, _)| k).join(", ")
            ),
        }
    }
    Ok(kinds)
}

fn random_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = Rng(nanos ^ (u64::from(std::process::id()) << 32));
    rng.next() % 1_000_000_000
}

fn prepare_out(out: Option<&Path>) -> Result<PathBuf> {
    let Some(out) = out else {
        let dir = tempfile::Builder::new()
            .prefix("cronlease-chaos-")
            .tempdir()
            .context("cannot create a temporary directory")?
            // Kept on purpose: the logs are the suite's second output.
            .keep();
        return Ok(dir);
    };
    if out.exists() {
        let mut entries = std::fs::read_dir(out)
            .with_context(|| format!("cannot read the directory {}", out.display()))?;
        if entries.next().is_some() {
            bail!(
                "the output directory {} is not empty: give a new one",
                out.display()
            );
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    out.canonicalize()
        .with_context(|| format!("cannot resolve {}", out.display()))
}

/// The `cronlease` binary built next to this example (`target/<profile>/`).
fn cronlease_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the suite's own executable")?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .with_context(|| format!("unexpected location of the suite: {}", exe.display()))?;
    let binary = profile_dir.join("cronlease");
    if !binary.is_file() {
        bail!(
            "{} does not exist: build it first with `cargo build --release --bins --examples` \
             (scripts/chaos does)",
            binary.display()
        );
    }
    Ok(binary.canonicalize().unwrap_or(binary))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Wall clock, ms since the epoch (the suite itself is never skewed).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

/// `HH:MM:SS.mmm` of a wall ms, for evidence lines.
fn clock(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.format("%H:%M:%S%.3f").to_string())
}

/// splitmix64: small, seedable, good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn weighted<'a>(&mut self, items: &[(&'a str, u64)]) -> &'a str {
        let total: u64 = items.iter().map(|(_, w)| w).sum();
        let mut pick = self.next() % total.max(1);
        for (item, weight) in items {
            if pick < *weight {
                return item;
            }
            pick -= weight;
        }
        items[0].0
    }
}

extern "C" fn on_interrupt(_signal: c_int) {
    // Only an atomic store: anything else is not async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// First Ctrl-C (or SIGTERM) ends the run early and still checks; the
/// handler resets itself, so a second one kills the suite (and, through
/// `PR_SET_PDEATHSIG`, its children).
fn install_interrupt_handler() -> Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(on_interrupt),
        SaFlags::SA_RESETHAND,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(signal, &action) }
            .with_context(|| format!("cannot install a {signal} handler"))?;
    }
    Ok(())
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Every child gets its own process group (Ctrl-C reaches only the suite,
/// which stops them in order) and SIGKILL when the suite dies. Children are
/// spawned from the main thread only: the "parent" of `PR_SET_PDEATHSIG` is
/// the spawning thread.
fn detach_and_tie_to_parent(command: &mut Command) {
    command.process_group(0);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

// ---------------------------------------------------------------------------
// Redis

/// The private `redis-server`, with AOF fsync'd at every write; dropping it
/// kills it.
struct RedisProcess {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisProcess {
    /// Starts on a free loopback port (a few tries: a port found free can be
    /// taken before Redis binds it).
    fn start(dir: &Path) -> Result<RedisProcess> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut last_error = None;
        for _ in 0..5 {
            let port = free_port()?;
            let mut redis = RedisProcess {
                port,
                dir: dir.to_path_buf(),
                child: None,
            };
            match redis.launch() {
                Ok(()) => return Ok(redis),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.expect("five attempts were made"))
    }

    fn launch(&mut self) -> Result<()> {
        let console = File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("console.log"))
            .context("cannot open redis console.log")?;
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--daemonize", "no"])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .args(["--enable-debug-command", "local"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(console.try_clone()?)
            .stderr(console);
        detach_and_tie_to_parent(&mut command);
        let mut child = command.spawn().context("cannot start redis-server")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "redis-server exited with {status} at start; its log:\n{}",
                    tail(&self.dir.join("redis.log"), 20)
                );
            }
            if self.ping() {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "redis-server did not answer PING within 10 s; its log:\n{}",
                    tail(&self.dir.join("redis.log"), 20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn ping(&self) -> bool {
        let Ok(mut connection) = self.connect(Duration::from_millis(200)) else {
            return false;
        };
        matches!(
            redis::cmd("PING")
                .query::<String>(&mut connection)
                .as_deref(),
            Ok("PONG")
        )
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A direct connection (not through a proxy), with read/write timeouts.
    fn connect(&self, timeout: Duration) -> Result<redis::Connection> {
        let url = format!("redis://127.0.0.1:{}/0", self.port);
        let connection = redis::Client::open(url.as_str())
            .and_then(|client| client.get_connection_with_timeout(timeout))
            .with_context(|| format!("cannot connect to {url}"))?;
        let io_timeout = Some(Duration::from_secs(5).max(timeout));
        connection.set_read_timeout(io_timeout)?;
        connection.set_write_timeout(io_timeout)?;
        Ok(connection)
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash would. With `appendfsync always`, every write
    /// Redis acknowledged is in the AOF.
    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Deletes the persisted data: the next start is a Redis that lost
    /// everything.
    fn wipe(&self) -> Result<()> {
        let aof = self.dir.join("appendonlydir");
        if aof.exists() {
            std::fs::remove_dir_all(&aof)
                .with_context(|| format!("cannot delete {}", aof.display()))?;
        }
        for name in ["dump.rdb", "appendonly.aof"] {
            let path = self.dir.join(name);
            if path.exists() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("cannot delete {}", path.display()))?;
            }
        }
        Ok(())
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn free_port() -> Result<u16> {
    Ok(StdTcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .context("cannot find a free loopback port")?
        .port())
}

// ---------------------------------------------------------------------------
// The fault proxy

/// What a proxy does with the bytes between one replica and Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Pass,
    /// Closes existing connections and every new one at once.
    Drop,
    /// Delays every chunk, both directions, by this many ms.
    Delay(u64),
    /// Accepts but forwards nothing: connections hang until the mode
    /// changes (then what was held flows on, as after a healed partition).
    Blackhole,
}

#[derive(Clone, Copy, Debug)]
struct Control {
    mode: Mode,
    /// Bumped to reset (RST) every connection opened before.
    resets: u64,
}

/// One replica's proxy to Redis: a listener on `127.0.0.1:port` and a task
/// per connection, all on the suite's tokio runtime.
struct Proxy {
    port: u16,
    control: watch::Sender<Control>,
}

impl Proxy {
    fn start(runtime: &tokio::runtime::Runtime, upstream: SocketAddr) -> Result<Proxy> {
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .context("cannot bind a proxy port")?;
        let port = listener.local_addr()?.port();
        let (control, watcher) = watch::channel(Control {
            mode: Mode::Pass,
            resets: 0,
        });
        runtime.spawn(accept_loop(listener, upstream, watcher));
        Ok(Proxy { port, control })
    }

    fn set(&self, mode: Mode) {
        self.control.send_modify(|c| c.mode = mode);
    }

    /// RST every existing connection, then pass.
    fn reset(&self) {
        self.control.send_modify(|c| {
            c.resets += 1;
            c.mode = Mode::Pass;
        });
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    control: watch::Receiver<Control>,
) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                if control.borrow().mode == Mode::Drop {
                    drop(client);
                    continue;
                }
                tokio::spawn(serve(client, upstream, control.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    Closed,
    Dropped,
    Reset,
}

async fn serve(client: TcpStream, upstream: SocketAddr, mut control: watch::Receiver<Control>) {
    let born = control.borrow().resets;
    // A connection accepted while blackholed is held, not forwarded.
    loop {
        let now = *control.borrow_and_update();
        if now.resets != born {
            let _ = client.set_zero_linger();
            return;
        }
        match now.mode {
            Mode::Drop => return,
            Mode::Blackhole => {
                if control.changed().await.is_err() {
                    return;
                }
            }
            Mode::Pass | Mode::Delay(_) => break,
        }
    }
    // Redis down: the client sees its connection closed.
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let mut client = client;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let ending = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        tokio::select! {
            () = pump(client_read, server_write, control.clone()) => Ending::Closed,
            () = pump(server_read, client_write, control.clone()) => Ending::Closed,
            ending = cut(control.clone(), born) => ending,
        }
    };
    if ending == Ending::Reset {
        // Closing with a zero linger sends RST instead of FIN.
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
}

/// Ends when the connection must be dropped or reset.
async fn cut(mut control: watch::Receiver<Control>, born: u64) -> Ending {
    loop {
        let now = *control.borrow_and_update();
        if now.resets != born {
            return Ending::Reset;
        }
        if now.mode == Mode::Drop {
            return Ending::Dropped;
        }
        if control.changed().await.is_err() {
            return Ending::Dropped;
        }
    }
}

/// Waits while blackholed; false when the connection must end.
async fn wait_open(control: &mut watch::Receiver<Control>) -> bool {
    loop {
        match control.borrow_and_update().mode {
            Mode::Pass | Mode::Delay(_) => return true,
            Mode::Drop => return false,
            Mode::Blackhole => {}
        }
        if control.changed().await.is_err() {
            return false;
        }
    }
}

/// Copies one direction: each chunk is stamped when read and written at
/// its stamp plus the delay then in force, in order.
async fn pump<R, W>(mut from: R, mut to: W, control: watch::Receiver<Control>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let mut read_control = control.clone();
    let reading = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if !wait_open(&mut read_control).await {
                break;
            }
            let delay = match read_control.borrow().mode {
                Mode::Delay(ms) => Duration::from_millis(ms),
                _ => Duration::ZERO,
            };
            let due = tokio::time::Instant::now() + delay;
            if tx.send((due, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let mut write_control = control;
    let writing = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if !wait_open(&mut write_control).await {
                break;
            }
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}

// ---------------------------------------------------------------------------
// Replicas

/// A replica "host": its config, log, clock skew, and the daemon process
/// while it runs. Dropping it kills the process.
struct Replica {
    name: String,
    dir: PathBuf,
    config: PathBuf,
    log: PathBuf,
    proxy_port: u16,
    /// `faketime -f` offset of this host's clock; kept across restarts.
    skew: Option<&'static str>,
    /// The harmless change a reload toggles: `timeout = "30s"` on `quick`.
    quick_timeout: bool,
    process: Option<Daemon>,
}

/// One running `cronlease run`.
struct Daemon {
    /// The spawned process: the daemon, or `faketime` running it.
    child: Child,
    /// The daemon's own pid, which receives the signals.
    pid: i32,
    /// Where this process's part of the log starts.
    log_offset: u64,
    exit: Option<ExitStatus>,
}

impl Replica {
    fn skew_ms(&self) -> i64 {
        self.skew.map_or(0, skew_ms)
    }

    fn write_config(&self, effects: &Path) -> Result<()> {
        let state_dir = self.dir.join("state");
        std::fs::create_dir_all(&state_dir)?;
        let mut text = format!(
            "# Written by the cronlease chaos suite (examples/chaos.rs).\n\
             [redis]\n\
             url = \"redis://127.0.0.1:{port}/0\"\n\
             key_prefix = \"{KEY_PREFIX}\"\n\
             command_timeout = \"300ms\"\n\
             \n\
             [daemon]\n\
             replica_id = \"{name}\"\n\
             lease = \"2s\"\n\
             heartbeat = \"1s\"\n\
             shutdown_grace = \"3s\"\n\
             kill_grace = \"1s\"\n\
             state_dir = {state_dir}\n\
             metrics_listen = \"\"\n\
             # Keep every outcome of a long run for the checker.\n\
             history = 1000000\n",
            port = self.proxy_port,
            name = self.name,
            state_dir = toml_string(&state_dir.to_string_lossy()),
        );
        let file = shell_quote(&effects.to_string_lossy());
        for (job, extra, body) in JOBS {
            let line = |what: &str| {
                format!(
                    "echo \"{what} {job} $CRONLEASE_TICK_MS $CRONLEASE_FENCE $CRONLEASE_REPLICA \
                     $CRONLEASE_RUN_ID $(LD_PRELOAD= date +%s%3N)\" >> {file}"
                )
            };
            let script = format!("{}; {body}; {}", line("start"), line("end"));
            text.push_str(&format!(
                "\n[jobs.{job}]\nschedule = \"* * * * * *\"\nmisfire_grace = \"10s\"\n{extra}shell = {}\n",
                toml_string(&script)
            ));
            if job == "quick" && self.quick_timeout {
                text.push_str("timeout = \"30s\"\n");
            }
        }
        // Written whole, then renamed: a reload never reads half a file.
        let partial = self.config.with_extension("toml.new");
        std::fs::write(&partial, text)
            .with_context(|| format!("cannot write {}", partial.display()))?;
        std::fs::rename(&partial, &self.config)
            .with_context(|| format!("cannot write {}", self.config.display()))?;
        Ok(())
    }

    fn running(&self) -> bool {
        self.process.as_ref().is_some_and(|d| d.exit.is_none())
    }

    fn pid(&self) -> Option<i32> {
        self.process
            .as_ref()
            .filter(|d| d.exit.is_none())
            .map(|d| d.pid)
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// Whether the process has exited; reaps it.
    fn poll(&mut self) -> Option<ExitStatus> {
        let daemon = self.process.as_mut()?;
        if daemon.exit.is_none() {
            daemon.exit = daemon.child.try_wait().ok().flatten();
        }
        daemon.exit
    }

    fn kill9(&mut self) {
        let Some(daemon) = self.process.as_mut() else {
            return;
        };
        if daemon.exit.is_none() {
            let _ = kill(Pid::from_raw(daemon.pid), Signal::SIGKILL);
            let _ = daemon.child.kill();
            daemon.exit = daemon.child.wait().ok();
        }
    }

    /// The log written by the current process so far.
    fn current_log(&self) -> String {
        let offset = self.process.as_ref().map_or(0, |d| d.log_offset);
        read_from(&self.log, offset)
    }

    fn appears_in_log(&self, needle: &str) -> bool {
        self.current_log().contains(needle)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process.
        self.kill9();
    }
}

fn skew_ms(skew: &str) -> i64 {
    let number = skew.trim_end_matches('s');
    (number.parse::<f64>().unwrap_or(0.0) * 1000.0).round() as i64
}

/// The file's content from byte `offset` on (lossy UTF-8).
fn read_from(path: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut file) = File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = file.read_to_end(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// `text` as a TOML basic string, quotes included.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// `text` as one shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// `root` and every process below it.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let parent = stat
                .rfind(')')
                .and_then(|at| stat[at + 1..].split_whitespace().nth(1))
                .and_then(|p| p.parse().ok());
            if let Some(parent) = parent {
                parents.push((pid, parent));
            }
        }
    }
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|&&(_, p)| p == parent)
                .map(|&(c, _)| c),
        );
        next += 1;
    }
    found
}

// ---------------------------------------------------------------------------
// The fault log

/// One injected fault (or an event the suite did not cause, such as a
/// replica that died by itself), with wall-clock start and end.
#[derive(Clone, Debug)]
struct Fault {
    kind: String,
    target: Option<String>,
    start_ms: i64,
    end_ms: i64,
    detail: Value,
}

impl Fault {
    /// Redis was away or lost its state: ticks around it may be missed.
    fn is_outage(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "client_pause" | "redis_restart" | "redis_wipe"
        )
    }

    fn is_state_loss(&self) -> bool {
        self.kind == "redis_wipe"
    }

    fn to_json(&self, n: usize) -> Value {
        json!({
            "n": n,
            "kind": self.kind,
            "target": self.target,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "start": rfc3339(self.start_ms),
            "end": rfc3339(self.end_ms),
            "outage": self.is_outage(),
            "state_loss": self.is_state_loss(),
            "detail": self.detail,
        })
    }

    fn describe(&self) -> String {
        format!(
            "{}–{} {} {} {}",
            clock(self.start_ms),
            clock(self.end_ms),
            self.kind,
            self.target.as_deref().unwrap_or("-"),
            self.detail
        )
    }
}

// ---------------------------------------------------------------------------
// The harness

/// A run in flight, as the job's `running` hash in Redis shows it.
#[derive(Clone, Debug)]
struct Held {
    job: String,
    run_id: String,
    replica: String,
    tick: i64,
}

struct Harness {
    out: PathBuf,
    binary: PathBuf,
    self_exe: PathBuf,
    effects: PathBuf,
    replicas: Vec<Replica>,
    redis: RedisProcess,
    proxies: Vec<Proxy>,
    /// Last, so that it stops after the processes are gone.
    runtime: tokio::runtime::Runtime,
    rng: Rng,
    kinds: Vec<(&'static str, u64)>,
    faults: Vec<Fault>,
    fault_log: File,
    /// Outcome records read just before Redis was wiped.
    snapshots: Vec<Record>,
    /// When every replica was first ready, and when the shutdown began.
    ready_ms: i64,
    shutdown_ms: i64,
    /// Replicas that died by themselves, or did not exit 0 on SIGTERM.
    exit_problems: Vec<String>,
    started: Instant,
}

impl Harness {
    fn start(
        args: &Args,
        out: &Path,
        binary: &Path,
        seed: u64,
        kinds: Vec<(&'static str, u64)>,
    ) -> Result<Harness> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the proxies' runtime")?;
        let redis = RedisProcess::start(&out.join("redis"))?;
        println!(
            "redis-server: 127.0.0.1:{} (pid {}), AOF fsync always, data in {}",
            redis.port,
            redis.pid().unwrap_or(0),
            redis.dir.display()
        );
        let effects = out.join("effects.log");
        File::create(&effects).context("cannot create effects.log")?;
        let fault_log =
            File::create(out.join("faults.jsonl")).context("cannot create faults.jsonl")?;
        let mut harness = Harness {
            out: out.to_path_buf(),
            binary: binary.to_path_buf(),
            self_exe: std::env::current_exe().context("cannot find the suite's executable")?,
            effects,
            replicas: Vec::new(),
            redis,
            proxies: Vec::new(),
            runtime,
            rng: Rng(seed),
            kinds,
            faults: Vec::new(),
            fault_log,
            snapshots: Vec::new(),
            ready_ms: 0,
            shutdown_ms: 0,
            exit_problems: Vec::new(),
            started: Instant::now(),
        };
        for n in 1..=args.replicas {
            let proxy = Proxy::start(&harness.runtime, harness.redis.addr())?;
            let name = format!("r{n}");
            let dir = out.join(&name);
            std::fs::create_dir_all(&dir)?;
            let replica = Replica {
                config: dir.join("jobs.toml"),
                log: out.join(format!("{name}.log")),
                dir,
                name,
                proxy_port: proxy.port,
                skew: None,
                quick_timeout: false,
                process: None,
            };
            replica.write_config(&harness.effects)?;
            harness.proxies.push(proxy);
            harness.replicas.push(replica);
        }
        harness.check_config()?;
        for i in 0..harness.replicas.len() {
            harness.spawn(i)?;
        }
        for i in 0..harness.replicas.len() {
            harness.wait_ready(i)?;
            let r = &harness.replicas[i];
            println!(
                "{} ready (pid {}), via proxy 127.0.0.1:{}, config {}, log {}",
                r.name,
                r.pid().unwrap_or(0),
                r.proxy_port,
                r.config.display(),
                r.log.display()
            );
        }
        harness.ready_ms = now_ms();
        harness.started = Instant::now();
        Ok(harness)
    }

    /// `cronlease check` on the first config, so a bad one is reported
    /// before any daemon starts.
    fn check_config(&self) -> Result<()> {
        let config = &self.replicas[0].config;
        let output = Command::new(&self.binary)
            .arg("check")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .output()
            .context("cannot run cronlease check")?;
        if !output.status.success() {
            bail!(
                "cronlease check rejected {}:\n{}{}",
                config.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Starts replica `i`'s daemon (under `faketime` when its host is skewed).
    fn spawn(&mut self, i: usize) -> Result<()> {
        let replica = &mut self.replicas[i];
        let mut log = File::options()
            .create(true)
            .append(true)
            .open(&replica.log)
            .with_context(|| format!("cannot open {}", replica.log.display()))?;
        writeln!(
            log,
            "===== chaos: starting {} at {} (clock skew {})",
            replica.name,
            rfc3339(now_ms()),
            replica.skew.unwrap_or("none")
        )?;
        let log_offset = log.metadata()?.len();
        let mut command = match replica.skew {
            Some(skew) => {
                let mut command = Command::new("faketime");
                command
                    .args(["-f", skew])
                    .arg(&self.self_exe)
                    .arg(EXEC_TIED)
                    .arg(&self.binary)
                    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                command
            }
            None => {
                let mut command = Command::new(&self.binary);
                command.env_remove("LD_PRELOAD").env_remove("FAKETIME");
                command
            }
        };
        command
            .arg("run")
            .arg("--config")
            .arg(&replica.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .env("RUST_LOG", "cronlease=debug,info")
            .env("NO_COLOR", "1")
            .env_remove("CRONLEASE_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .env_remove("JOURNAL_STREAM");
        detach_and_tie_to_parent(&mut command);
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start replica {}", replica.name))?;
        let mut pid = child.id() as i32;
        if replica.skew.is_some() {
            // faketime forks: the daemon is the descendant running the binary.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let found = descendants(child.id()).into_iter().find(|&p| {
                    std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|exe| exe == self.binary)
                });
                if let Some(found) = found {
                    pid = found as i32;
                    break;
                }
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "faketime for {} exited with {status} before starting the daemon:\n{}",
                        replica.name,
                        tail(&replica.log, 20)
                    );
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!(
                        "faketime for {} did not start the daemon within 10 s",
                        replica.name
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        replica.process = Some(Daemon {
            child,
            pid,
            log_offset,
            exit: None,
        });
        Ok(())
    }

    /// Waits until replica `i` logs `ready` (its signal handlers are
    /// installed and Redis answered).
    fn wait_ready(&mut self, i: usize) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let replica = &mut self.replicas[i];
            if replica.appears_in_log("cronlease::daemon: ready") {
                return Ok(());
            }
            if let Some(status) = replica.poll() {
                bail!(
                    "replica {} exited with {status} before it was ready:\n{}",
                    replica.name,
                    replica.current_log()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "replica {} was not ready within {READY_TIMEOUT:?}:\n{}",
                    replica.name,
                    tail(&replica.log, 30)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Restarts replica `i` after it exited, and waits until it is ready.
    fn respawn(&mut self, i: usize) -> Result<()> {
        self.spawn(i)?;
        self.wait_ready(i)
    }

    /// Sleeps `duration` in small steps, watching for replicas that die by
    /// themselves (recorded, then restarted). False when interrupted.
    fn nap(&mut self, duration: Duration) -> bool {
        let until = Instant::now() + duration;
        loop {
            if interrupted() {
                return false;
            }
            self.watch_replicas();
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(50)));
        }
    }

    fn watch_replicas(&mut self) {
        for i in 0..self.replicas.len() {
            let was_running = self.replicas[i].running();
            if !was_running {
                continue;
            }
            if let Some(status) = self.replicas[i].poll() {
                let name = self.replicas[i].name.clone();
                let at = now_ms();
                let message = format!("{name} exited by itself with {status} at {}", rfc3339(at));
                println!("  !! {message}; restarting it");
                self.exit_problems.push(message);
                self.log_fault(Fault {
                    kind: "unexpected_exit".into(),
                    target: Some(name.clone()),
                    start_ms: at,
                    end_ms: at,
                    detail: json!({"status": status.to_string()}),
                });
                if let Err(e) = self.respawn(i) {
                    println!("  !! cannot restart {name}: {e:#}");
                }
            }
        }
    }

    fn log_fault(&mut self, fault: Fault) {
        let line = fault.to_json(self.faults.len() + 1);
        let _ = writeln!(self.fault_log, "{line}");
        let _ = self.fault_log.flush();
        self.faults.push(fault);
    }

    /// The runs in flight in Redis now (read directly, not through a proxy).
    fn held(&self) -> Vec<Held> {
        let Ok(mut connection) = self.redis.connect(Duration::from_millis(500)) else {
            return Vec::new();
        };
        let mut held = Vec::new();
        for (job, _, _) in JOBS {
            let key = format!("{KEY_PREFIX}:{{{job}}}:running");
            let entries: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(&key)
                .query(&mut connection)
                .unwrap_or_default();
            for (run_id, entry) in entries {
                let entry: Value = serde_json::from_str(&entry).unwrap_or(Value::Null);
                held.push(Held {
                    job: job.to_string(),
                    run_id,
                    replica: entry["replica"].as_str().unwrap_or("").to_string(),
                    tick: entry["tick"].as_i64().unwrap_or(0),
                });
            }
        }
        held
    }

    /// A target replica: with `prefer_holder`, most often one that holds a
    /// run of a non-`allow` job (waiting up to 2 s for one). The random draws
    /// do not depend on the state, so a seed replays the same sequence.
    fn pick_target(&mut self, prefer_holder: bool) -> usize {
        let n = self.replicas.len();
        let index = self.rng.next() as usize;
        let prefer = self.rng.chance(70) && prefer_holder;
        let deadline = Instant::now() + Duration::from_secs(2);
        while prefer && Instant::now() < deadline {
            let holders: BTreeSet<String> = self
                .held()
                .into_iter()
                .filter(|h| h.job != ALLOW_JOB)
                .map(|h| h.replica)
                .collect();
            let candidates: Vec<usize> = (0..n)
                .filter(|&i| holders.contains(&self.replicas[i].name))
                .collect();
            if !candidates.is_empty() {
                return candidates[index % candidates.len()];
            }
            if !self.nap(Duration::from_millis(50)) {
                break;
            }
        }
        index % n
    }

    /// The fault loop: one fault at a time, a quiet gap between, until
    /// `COOL_DOWN` before the end; then quiet until `duration`.
    fn inject_faults(&mut self, duration: Duration) -> Result<()> {
        let wipes_allowed = 1 + duration.as_secs() / 120;
        let mut wipes = 0;
        println!(
            "\nrunning for {:?} under faults (kinds: {}); Ctrl-C stops early…",
            duration,
            self.kinds
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !self.nap(WARM_UP) {
            return Ok(());
        }
        let last_start = duration.saturating_sub(COOL_DOWN);
        while self.started.elapsed() < last_start && !interrupted() {
            let mut kinds = self.kinds.clone();
            if wipes >= wipes_allowed {
                kinds.retain(|(k, _)| *k != "redis_wipe");
            }
            if kinds.is_empty() {
                break;
            }
            let kind = self.rng.weighted(&kinds);
            if kind == "redis_wipe" {
                wipes += 1;
            }
            let fault = self.inject(kind)?;
            println!("  [{:6.1}s] {}", self.elapsed(), fault.describe());
            self.log_fault(fault);
            let gap = Duration::from_millis(self.rng.range(1_000, 3_000));
            if !self.nap(gap) {
                break;
            }
        }
        while self.started.elapsed() < duration && self.nap(Duration::from_millis(200)) {}
        if interrupted() {
            println!("interrupted after {:.1} s", self.elapsed());
        }
        Ok(())
    }

    fn inject(&mut self, kind: &str) -> Result<Fault> {
        // Every fault draws the same numbers whatever it is, so that the
        // sequence of kinds is the same for a seed.
        let a = self.rng.next();
        let b = self.rng.next();
        let mut fault = Fault {
            kind: kind.to_string(),
            target: None,
            start_ms: now_ms(),
            end_ms: now_ms(),
            detail: json!({}),
        };
        match kind {
            "kill9" => {
                let i = self.pick_target(true);
                let down = Duration::from_millis(1_000 + a % 2_001);
                let held = self.held_by(i);
                fault.target = Some(self.replicas[i].name.clone());
                fault.start_ms = now_ms();
                self.replicas[i].kill9();
                self.nap(down);
                self.respawn(i)?;
                fault.end_ms = now_ms();
                fault.detail = json!({"down_ms": down.as_millis() as u64, "held": held_json(&held),
                                      "skew": self.replicas[i].skew});
            }
            "sigstop" => {
                let i = self.pick_target(true);
                let stop = Duration::from_millis(2_500 + a % 2_501);
                let held = self.held_by(i);
                fault.target = Some(self.replicas[i].name.clone());
                fault.start_ms = now_ms();
                self.replicas[i].signal(Signal::SIGSTOP);
                // An interrupted nap still resumes the process below.
                self.nap_stopped(stop);
                self.replicas[i].signal(Signal::SIGCONT);
                fault.end_ms = now_ms();
                fault.detail = json!({"stop_ms": stop.as_millis() as u64, "held": held_json(&held),
                                      "skew_ms": self.replicas[i].skew_ms()});
            }
            "proxy_delay" | "proxy_blackhole" | "proxy_drop" => {
                let i = self.pick_target(false);
                let length = Duration::from_millis(1_000 + a % 3_001);
                let mode = match kind {
                    "proxy_delay" => Mode::Delay(50 + b % 351),
                    "proxy_blackhole" => Mode::Blackhole,
                    _ => Mode::Drop,
                };
                fault.target = Some(self.replicas[i].name.clone());
                fault.start_ms = now_ms();
                self.proxies[i].set(mode);
                self.nap(length);
                self.proxies[i].set(Mode::Pass);
                fault.end_ms = now_ms();
                fault.detail =
                    json!({"mode": format!("{mode:?}"), "length_ms": length.as_millis() as u64});
            }
            "proxy_reset" => {
                let i = self.pick_target(false);
                fault.target = Some(self.replicas[i].name.clone());
                fault.start_ms = now_ms();
                self.proxies[i].reset();
                fault.end_ms = now_ms();
            }
            "client_pause" => {
                fault.start_ms = now_ms();
                let paused = self
                    .redis
                    .connect(Duration::from_secs(1))
                    .and_then(|mut c| {
                        Ok(redis::cmd("CLIENT")
                            .arg("PAUSE")
                            .arg(1500)
                            .arg("ALL")
                            .query::<()>(&mut c)?)
                    });
                if let Err(e) = &paused {
                    fault.detail = json!({"error": format!("{e:#}")});
                }
                self.nap(Duration::from_millis(1_500));
                fault.end_ms = now_ms();
            }
            "redis_restart" => {
                fault.start_ms = now_ms();
                self.redis.kill9();
                self.redis.launch()?;
                fault.end_ms = now_ms();
                fault.detail = json!({"persistence": "AOF, appendfsync always"});
            }
            "redis_wipe" => {
                let before = self.read_streams("snapshot")?;
                fault.start_ms = now_ms();
                self.redis.kill9();
                self.redis.wipe()?;
                self.redis.launch()?;
                fault.end_ms = now_ms();
                fault.detail = json!({"snapshot_records": before.len(),
                    "note": "restarted without its data: a declared state-loss window"});
                self.snapshots.extend(before);
            }
            "clock_skew" => {
                let i = self.pick_target(false);
                let current = self.replicas[i].skew;
                let choices: Vec<Option<&'static str>> = SKEWS
                    .iter()
                    .map(|s| Some(*s))
                    .chain(current.is_some().then_some(None))
                    .filter(|s| *s != current)
                    .collect();
                let skew = choices[(a % choices.len() as u64) as usize];
                fault.target = Some(self.replicas[i].name.clone());
                fault.start_ms = now_ms();
                self.stop_replica(i);
                self.replicas[i].skew = skew;
                self.respawn(i)?;
                fault.end_ms = now_ms();
                fault.detail = json!({"from": current.unwrap_or("0"), "to": skew.unwrap_or("0"),
                    "note": "the host's clock keeps this skew across later restarts"});
            }
            "sigterm" => {
                let i = self.pick_target(true);
                let down = Duration::from_millis(300 + a % 1_701);
                let held = self.held_by(i);
                fault.target = Some(self.replicas[i].name.clone());
                fault.start_ms = now_ms();
                let status = self.stop_replica(i);
                self.nap(down);
                self.respawn(i)?;
                fault.end_ms = now_ms();
                fault.detail = json!({"held": held_json(&held), "exit": status, "down_ms": down.as_millis() as u64});
            }
            "reload" => {
                let i = self.pick_target(false);
                // Mid-tick: this many ms after a second starts.
                let into_tick = 50 + a % 900;
                let wait = (1_000 + into_tick as i64 - now_ms().rem_euclid(1_000)) % 1_000;
                self.nap(Duration::from_millis(wait as u64));
                let replica = &mut self.replicas[i];
                replica.quick_timeout = !replica.quick_timeout;
                replica.write_config(&self.effects)?;
                let mark = std::fs::metadata(&replica.log).map_or(0, |m| m.len());
                fault.target = Some(replica.name.clone());
                fault.start_ms = now_ms();
                replica.signal(Signal::SIGHUP);
                let deadline = Instant::now() + Duration::from_secs(3);
                let mut result = "no reload message within 3 s";
                while Instant::now() < deadline {
                    let log = read_from(&self.replicas[i].log, mark);
                    if log.contains("job table reloaded") {
                        result = "job table reloaded";
                        break;
                    }
                    if log.contains("reload rejected") || log.contains("reload failed") {
                        result = "reload rejected";
                        break;
                    }
                    if !self.nap(Duration::from_millis(50)) {
                        break;
                    }
                }
                if result != "job table reloaded" {
                    self.exit_problems.push(format!(
                        "{}: SIGHUP with a valid config: {result}",
                        self.replicas[i].name
                    ));
                }
                fault.end_ms = now_ms();
                fault.detail = json!({"quick_timeout": self.replicas[i].quick_timeout,
                    "ms_into_tick": into_tick, "result": result});
            }
            other => bail!("unknown fault kind {other}"),
        }
        Ok(fault)
    }

    /// Like `nap`, but never treats the stopped replica as dead, and
    /// returns at once when interrupted (the caller resumes it).
    fn nap_stopped(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        while Instant::now() < until && !interrupted() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn held_by(&self, i: usize) -> Vec<Held> {
        let name = &self.replicas[i].name;
        self.held()
            .into_iter()
            .filter(|h| &h.replica == name)
            .collect()
    }

    /// SIGTERM, then waits for the exit; anything but 0 within the timeout
    /// is recorded (and the process killed). Returns the status shown.
    fn stop_replica(&mut self, i: usize) -> String {
        let replica = &mut self.replicas[i];
        replica.signal(Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = replica.poll() {
                if !status.success() {
                    self.exit_problems.push(format!(
                        "{} exited with {status} after SIGTERM at {} (an orderly stop exits 0)",
                        replica.name,
                        rfc3339(now_ms())
                    ));
                }
                return status.to_string();
            }
            if Instant::now() >= deadline {
                replica.kill9();
                self.exit_problems.push(format!(
                    "{} did not exit within {STOP_TIMEOUT:?} of SIGTERM at {} and was killed",
                    replica.name,
                    rfc3339(now_ms())
                ));
                return "killed after the stop timeout".to_string();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The end: proxies restored, every replica stopped with SIGTERM.
    fn shutdown(&mut self) {
        for proxy in &self.proxies {
            proxy.set(Mode::Pass);
        }
        for replica in &self.replicas {
            replica.signal(Signal::SIGCONT);
        }
        self.watch_replicas();
        self.shutdown_ms = now_ms();
        println!("\nstopping the replicas (SIGTERM)…");
        for replica in &self.replicas {
            replica.signal(Signal::SIGTERM);
        }
        for i in 0..self.replicas.len() {
            if self.replicas[i].running() {
                // SIGTERM was sent above; a second one is harmless.
                let status = self.stop_replica(i);
                println!("  {} exited: {status}", self.replicas[i].name);
            }
        }
    }

    /// Every outcome record in the job streams.
    fn read_streams(&self, source: &'static str) -> Result<Vec<Record>> {
        let mut connection = self.redis.connect(Duration::from_secs(2))?;
        let mut records = Vec::new();
        for (job, _, _) in JOBS {
            let key = format!("{KEY_PREFIX}:{{{job}}}:runs");
            let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg("+")
                .query(&mut connection)
                .with_context(|| format!("cannot read {key}"))?;
            for (id, flat) in entries {
                records.push(Record {
                    job: job.to_string(),
                    id,
                    source,
                    fields: flat
                        .chunks_exact(2)
                        .map(|pair| (pair[0].clone(), pair[1].clone()))
                        .collect(),
                });
            }
        }
        Ok(records)
    }

    /// Reads the outcome streams (merged with the snapshots taken before
    /// wipes) and writes `records.jsonl` and `meta.json`, so that the check
    /// can be repeated from the output directory alone (`--recheck DIR`).
    fn collect(&self, seed: u64, args: &Args) -> Result<Evidence> {
        let mut records = self.snapshots.clone();
        let mut seen: BTreeSet<(String, BTreeMap<String, String>)> = records
            .iter()
            .map(|r| (r.job.clone(), r.fields.clone()))
            .collect();
        for record in self.read_streams("final")? {
            if seen.insert((record.job.clone(), record.fields.clone())) {
                records.push(record);
            }
        }
        let mut file =
            File::create(self.out.join("records.jsonl")).context("cannot create records.jsonl")?;
        for record in &records {
            writeln!(
                file,
                "{}",
                json!({"job": record.job, "id": record.id, "source": record.source,
                       "fields": record.fields})
            )?;
        }
        let meta = Meta {
            seed,
            duration: args.duration,
            replicas: self.replicas.len(),
            ready_ms: self.ready_ms,
            shutdown_ms: self.shutdown_ms,
            exit_problems: self.exit_problems.clone(),
        };
        std::fs::write(
            self.out.join("meta.json"),
            serde_json::to_string_pretty(&meta.to_json())? + "\n",
        )
        .context("cannot write meta.json")?;
        let mut evidence = Evidence::load_files(&self.out, meta)?;
        evidence.records = records;
        evidence.faults = self.faults.clone();
        Ok(evidence)
    }
}

/// What a run left behind for the checker.
struct Meta {
    seed: u64,
    duration: Duration,
    replicas: usize,
    /// When every replica was first ready, and when the shutdown began.
    ready_ms: i64,
    shutdown_ms: i64,
    /// Replicas that died by themselves, did not exit 0 on SIGTERM, or
    /// did not take a reload.
    exit_problems: Vec<String>,
}

impl Meta {
    fn to_json(&self) -> Value {
        json!({
            "seed": self.seed,
            "duration_ms": self.duration.as_millis() as u64,
            "replicas": self.replicas,
            "ready_ms": self.ready_ms,
            "shutdown_ms": self.shutdown_ms,
            "exit_problems": self.exit_problems,
        })
    }

    fn from_json(value: &Value) -> Result<Meta> {
        let number = |name: &str| {
            value[name]
                .as_i64()
                .with_context(|| format!("meta.json has no number {name:?}"))
        };
        Ok(Meta {
            seed: number("seed")? as u64,
            duration: Duration::from_millis(number("duration_ms")? as u64),
            replicas: number("replicas")? as usize,
            ready_ms: number("ready_ms")?,
            shutdown_ms: number("shutdown_ms")?,
            exit_problems: value["exit_problems"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect(),
        })
    }
}

/// Everything the checker reads.
struct Evidence {
    out: PathBuf,
    meta: Meta,
    faults: Vec<Fault>,
    records: Vec<Record>,
    effects_text: String,
    /// (replica, its whole log).
    logs: Vec<(String, String)>,
    /// Outcomes still in a replica's spool at the end.
    spooled: Vec<String>,
}

impl Evidence {
    /// The files every run writes as it goes: effects, logs, spools.
    fn load_files(out: &Path, meta: Meta) -> Result<Evidence> {
        let effects_text =
            std::fs::read_to_string(out.join("effects.log")).context("cannot read effects.log")?;
        let names: Vec<String> = (1..=meta.replicas).map(|n| format!("r{n}")).collect();
        let logs = names
            .iter()
            .map(|name| {
                let log = std::fs::read_to_string(out.join(format!("{name}.log")));
                (name.clone(), log.unwrap_or_default())
            })
            .collect();
        let spooled = names
            .iter()
            .flat_map(|name| {
                std::fs::read_dir(out.join(name).join("state").join("spool"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path().display().to_string())
            })
            .collect();
        Ok(Evidence {
            out: out.to_path_buf(),
            meta,
            faults: Vec::new(),
            records: Vec::new(),
            effects_text,
            logs,
            spooled,
        })
    }

    /// Everything from an output directory, for `--recheck`.
    fn load(out: &Path) -> Result<Evidence> {
        let meta_text = std::fs::read_to_string(out.join("meta.json"))
            .with_context(|| format!("cannot read {}/meta.json", out.display()))?;
        let meta = Meta::from_json(&serde_json::from_str(&meta_text)?)?;
        let mut evidence = Evidence::load_files(out, meta)?;
        let faults_text = std::fs::read_to_string(out.join("faults.jsonl"))
            .context("cannot read faults.jsonl")?;
        for line in faults_text.lines().filter(|l| !l.trim().is_empty()) {
            let value: Value = serde_json::from_str(line)
                .with_context(|| format!("bad line in faults.jsonl: {line}"))?;
            evidence.faults.push(Fault {
                kind: value["kind"].as_str().unwrap_or("").to_string(),
                target: value["target"].as_str().map(str::to_string),
                start_ms: value["start_ms"].as_i64().unwrap_or(0),
                end_ms: value["end_ms"].as_i64().unwrap_or(0),
                detail: value["detail"].clone(),
            });
        }
        let records_text = std::fs::read_to_string(out.join("records.jsonl"))
            .context("cannot read records.jsonl")?;
        for line in records_text.lines().filter(|l| !l.trim().is_empty()) {
            let value: Value = serde_json::from_str(line)
                .with_context(|| format!("bad line in records.jsonl: {line}"))?;
            evidence.records.push(Record {
                job: value["job"].as_str().unwrap_or("").to_string(),
                id: value["id"].as_str().unwrap_or("").to_string(),
                source: if value["source"] == "snapshot" {
                    "snapshot"
                } else {
                    "final"
                },
                fields: serde_json::from_value(value["fields"].clone())
                    .context("bad fields in records.jsonl")?,
            });
        }
        Ok(evidence)
    }

    fn check(&self) -> Report {
        let input = CheckInput {
            effects_text: &self.effects_text,
            records: &self.records,
            faults: &self.faults,
            logs: &self.logs,
            from_ms: ceil_second(self.meta.ready_ms + CHECK_MARGIN_MS),
            to_ms: floor_second(self.meta.shutdown_ms - CHECK_MARGIN_MS),
            replicas: self.meta.replicas,
            spooled: &self.spooled,
        };
        check(&input)
    }

    /// Prints the summary table and the violations, writes `summary.json`
    /// and `checker.txt`; true when everything passed.
    fn report(&self, report: &Report, write: bool) -> Result<bool> {
        let seed = self.meta.seed;
        let duration = self.meta.duration;
        let replicas = self.meta.replicas;
        let exit_problems = &self.meta.exit_problems;
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for fault in &self.faults {
            *by_kind.entry(fault.kind.as_str()).or_default() += 1;
        }
        let m_outside = report.m.iter().filter(|v| !v.excused).count();
        let o_max = report.o_max.values().copied().max().unwrap_or(0);
        let failures: Vec<&str> = [
            ("D", outside(&report.d) > 0),
            ("M outside windows", m_outside > 0),
            ("F", outside(&report.f) > 0),
            ("S", outside(&report.s) > 0),
            ("O", report.o_outside > 1),
            ("L", outside(&report.l) > 0),
            ("E", !exit_problems.is_empty()),
        ]
        .into_iter()
        .filter_map(|(name, failed)| failed.then_some(name))
        .collect();
        let passed = failures.is_empty();

        let mut text = String::new();
        let faults_line = by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rows: Vec<(&str, String)> = vec![
            ("seed", seed.to_string()),
            ("duration", format!("{:?}, {} replicas", duration, replicas)),
            (
                "faults injected",
                format!("{} ({faults_line})", self.faults.len()),
            ),
            (
                "ticks checked",
                format!(
                    "{} ({} jobs × {} s, {} – {})",
                    report.ticks_checked,
                    JOBS.len(),
                    report.ticks_checked / JOBS.len().max(1),
                    clock(report.from_ms),
                    clock(report.to_ms)
                ),
            ),
            ("runs started", report.runs_started.to_string()),
            ("outcome records", report.records.to_string()),
            ("D  started twice", counted(&report.d)),
            (
                "M  missed",
                format!(
                    "{} ({} outside declared windows)",
                    report.m.len(),
                    m_outside
                ),
            ),
            ("F  fence regressions", counted(&report.f)),
            ("S  two current outcomes", counted(&report.s)),
            (
                "O  max concurrent runs",
                format!(
                    "{} outside state-loss windows; {o_max} overall ({})",
                    report.o_outside,
                    report
                        .o_max
                        .iter()
                        .map(|(job, n)| format!("{job} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            ("L  outcomes lost", counted(&report.l)),
            ("E  replica exits", exit_problems.len().to_string()),
            (
                "claimed, never started",
                format!(
                    "{} (an outcome such as abandoned, but no start line: not M)",
                    report.claimed_not_started.len()
                ),
            ),
            (
                "phantom claims",
                format!(
                    "{} (landed after their replica gave up; {} ticks skipped_overlap behind \
                     them: information)",
                    report.phantoms.len(),
                    report.phantom_skips
                ),
            ),
            (
                "excluded (state loss)",
                format!("{} ticks", report.state_loss_ticks),
            ),
            ("takeover after kill -9", stats(&report.takeover)),
            ("  …by any replica", stats(&report.takeover_any)),
            ("abort after lease lapse", stats(&report.abort_latency)),
            ("abort after SIGCONT", stats(&report.abort_after_cont)),
            (
                "state loss detected",
                format!(
                    "{} log lines `REDIS STATE LOSS DETECTED`",
                    report.state_loss_lines
                ),
            ),
        ];
        let width = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        text.push_str("\nsummary\n");
        for (key, value) in &rows {
            text.push_str(&format!("  {key:<width$}  {value}\n"));
        }
        text.push_str(&format!(
            "\n  takeover: from the kill -9 of a replica holding a run of a non-allow job to the \
             next `start` of that job on another replica ({} measured; \"by any replica\" also counts \
             the killed replica, restarted as a new process after 1–3 s).\n  abort: runs the frozen \
             replica held at SIGSTOP; from SIGSTOP + lease (when the lease had lapsed at the \
             latest; it may have lapsed up to lease/3 earlier) and from SIGCONT, to the replica's \
             log line `lease could not be renewed before its deadline` or `lease is no longer \
             ours` for that run (log time corrected by the host's known skew); {} of {} held \
             runs had already ended on their own while the daemon was frozen.\n",
            report.takeover.len(),
            report.ended_while_frozen,
            report.held_at_stop
        ));
        let groups: [(&str, &Vec<Violation>); 5] = [
            ("D", &report.d),
            ("F", &report.f),
            ("S", &report.s),
            ("L", &report.l),
            ("O", &report.o),
        ];
        for (name, list) in groups {
            for violation in list {
                let label = if violation.excused {
                    format!("{name} (inside the declared state-loss window)")
                } else {
                    name.to_string()
                };
                text.push_str(&format!("\n{label}: {}\n", violation.render()));
            }
        }
        for violation in &report.m {
            let label = if violation.excused {
                "M (inside a declared window)"
            } else {
                "M"
            };
            text.push_str(&format!("\n{label}: {}\n", violation.render()));
        }
        for problem in exit_problems {
            text.push_str(&format!("\nE: {problem}\n"));
        }
        for phantom in &report.phantoms {
            text.push_str(&format!(
                "\nphantom claim (information): {}\n",
                phantom.render()
            ));
        }
        if !report.claimed_not_started.is_empty() {
            text.push_str("\nclaimed, never started (information):\n");
            for line in &report.claimed_not_started {
                text.push_str(&format!("  {line}\n"));
            }
        }
        if !report.warnings.is_empty() {
            text.push_str("\nwarnings:\n");
            for line in &report.warnings {
                text.push_str(&format!("  {line}\n"));
            }
        }
        if passed {
            text.push_str(&format!("\nPASSED (seed {seed})\n"));
        } else {
            text.push_str(&format!(
                "\nFAILED: {} (seed {seed}; replay with --seed {seed} --duration {:?} --replicas {})\n",
                failures.join(", "),
                duration,
                replicas
            ));
        }
        print!("{text}");
        if !write {
            return Ok(passed);
        }
        std::fs::write(self.out.join("checker.txt"), &text).context("cannot write checker.txt")?;

        let mut violations: Vec<Value> = Vec::new();
        for (name, list) in [
            ("D", &report.d),
            ("M", &report.m),
            ("F", &report.f),
            ("S", &report.s),
            ("O", &report.o),
            ("L", &report.l),
        ] {
            violations.extend(list.iter().filter(|v| !v.excused).map(|v| v.to_json(name)));
        }
        violations.extend(
            exit_problems
                .iter()
                .map(|p| json!({"kind": "E", "message": p})),
        );
        let mut summary = json!({
            "seed": seed,
            "duration_s": duration.as_secs_f64(),
            "replicas": replicas,
            "out": self.out.display().to_string(),
            "passed": passed,
            "failures": failures,
            "faults": by_kind,
            "faults_total": self.faults.len(),
            "ticks_checked": report.ticks_checked,
            "check_from_ms": report.from_ms,
            "check_to_ms": report.to_ms,
            "runs_started": report.runs_started,
            "outcome_records": report.records,
            "D": outside(&report.d),
            "D_in_state_loss_window": inside(&report.d),
            "M": report.m.len(),
            "M_outside_windows": m_outside,
            "F": outside(&report.f),
            "F_in_state_loss_window": inside(&report.f),
            "S": outside(&report.s),
            "S_in_state_loss_window": inside(&report.s),
            "O": report.o_outside,
            "O_overall": o_max,
            "O_by_job": report.o_max,
            "L": outside(&report.l),
            "L_in_state_loss_window": inside(&report.l),
            "E": exit_problems.len(),
        });
        let more = json!({
            "claimed_not_started": report.claimed_not_started.len(),
            "phantom_claims": report.phantoms.len(),
            "skipped_behind_phantoms": report.phantom_skips,
            "state_loss_excluded_ticks": report.state_loss_ticks,
            "takeover_ms": stats_json(&report.takeover),
            "takeover_any_replica_ms": stats_json(&report.takeover_any),
            "abort_latency_ms": stats_json(&report.abort_latency),
            "abort_after_sigcont_ms": stats_json(&report.abort_after_cont),
            "held_at_sigstop": report.held_at_stop,
            "ended_while_frozen": report.ended_while_frozen,
            "state_loss_log_lines": report.state_loss_lines,
            "violations": violations,
        });
        if let (Some(summary), Value::Object(more)) = (summary.as_object_mut(), more) {
            summary.extend(more);
        }
        std::fs::write(
            self.out.join("summary.json"),
            serde_json::to_string_pretty(&summary)? + "\n",
        )
        .context("cannot write summary.json")?;
        println!(
            "\nsummary: {}/summary.json, report: {}/checker.txt, faults: {}/faults.jsonl",
            self.out.display(),
            self.out.display(),
            self.out.display()
        );
        Ok(passed)
    }
}

/// Violations outside the declared windows: the ones that count.
fn outside(list: &[Violation]) -> usize {
    list.iter().filter(|v| !v.excused).count()
}

fn inside(list: &[Violation]) -> usize {
    list.iter().filter(|v| v.excused).count()
}

fn counted(list: &[Violation]) -> String {
    match inside(list) {
        0 => outside(list).to_string(),
        n => format!(
            "{} (+{n} inside the state-loss window, not counted)",
            outside(list)
        ),
    }
}

fn held_json(held: &[Held]) -> Value {
    Value::Array(
        held.iter()
            .map(|h| json!({"job": h.job, "run_id": h.run_id, "tick_ms": h.tick}))
            .collect(),
    )
}

fn ceil_second(ms: i64) -> i64 {
    (ms + 999).div_euclid(1_000) * 1_000
}

fn floor_second(ms: i64) -> i64 {
    ms.div_euclid(1_000) * 1_000
}

/// The last `lines` lines of a file.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats(values: &[i64]) -> String {
    if values.is_empty() {
        return "n/a (nothing to measure)".to_string();
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    format!(
        "p50 {} ms, max {} ms (n = {})",
        percentile(&sorted, 0.5),
        sorted[sorted.len() - 1],
        sorted.len()
    )
}

fn stats_json(values: &[i64]) -> Value {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    json!({
        "n": sorted.len(),
        "p50": (!sorted.is_empty()).then(|| percentile(&sorted, 0.5)),
        "max": sorted.last(),
        "values": sorted,
    })
}

// ---------------------------------------------------------------------------
// The checker

/// One outcome record from a job's stream.
#[derive(Clone, Debug)]
struct Record {
    job: String,
    id: String,
    /// `final` (read at the end) or `snapshot` (read before a wipe).
    source: &'static str,
    fields: BTreeMap<String, String>,
}

impl Record {
    fn get(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }

    fn number(&self, name: &str) -> i64 {
        self.get(name).parse().unwrap_or(0)
    }

    fn tick(&self) -> i64 {
        self.number("tick")
    }

    fn fence(&self) -> i64 {
        self.number("fence")
    }

    fn status(&self) -> &str {
        self.get("status")
    }

    fn run_id(&self) -> &str {
        self.get("run_id")
    }

    fn stale(&self) -> bool {
        self.get("stale") == "1"
    }

    fn rerun(&self) -> bool {
        self.get("trigger") == "rerun"
    }

    fn describe(&self) -> String {
        let mut extra = String::new();
        if let Some(by) = self.fields.get("recorded_by") {
            extra.push_str(&format!(" recorded_by={by}"));
        }
        if self.source != "final" {
            extra.push_str(&format!(" (from the {} before a wipe)", self.source));
        }
        format!(
            "record {} {} tick={} fence={} run_id={} replica={} status={} stale={} trigger={} \
             started={} finished={}{extra}",
            self.id,
            self.job,
            clock(self.tick()),
            self.get("fence"),
            self.run_id(),
            self.get("replica"),
            self.status(),
            self.get("stale"),
            self.get("trigger"),
            clock(self.number("started_ms")),
            clock(self.number("finished_ms")),
        )
    }
}

/// One `start`/`end` line of effects.log.
#[derive(Clone, Debug)]
struct Effect {
    start: bool,
    job: String,
    tick: i64,
    replica: String,
    run_id: String,
    wall: i64,
    line: String,
}

fn parse_effects(text: &str, warnings: &mut Vec<String>) -> Vec<Effect> {
    let mut effects = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let parsed = (parts.len() == 7 && (parts[0] == "start" || parts[0] == "end"))
            .then(|| {
                Some(Effect {
                    start: parts[0] == "start",
                    job: parts[1].to_string(),
                    tick: parts[2].parse().ok()?,
                    replica: parts[4].to_string(),
                    run_id: parts[5].to_string(),
                    wall: parts[6].parse().ok()?,
                    line: line.to_string(),
                })
            })
            .flatten();
        match parsed {
            Some(effect) => effects.push(effect),
            None => warnings.push(format!("malformed line in effects.log: {line:?}")),
        }
    }
    effects
}

/// One finding, with what shows it.
struct Violation {
    job: String,
    tick: Option<i64>,
    message: String,
    evidence: Vec<String>,
    /// For M: inside a declared window (a Redis outage).
    excused: bool,
}

impl Violation {
    fn render(&self) -> String {
        let mut text = format!(
            "{} tick {}: {}",
            self.job,
            self.tick.map_or_else(|| "-".to_string(), rfc3339),
            self.message
        );
        for line in &self.evidence {
            text.push_str(&format!("\n    {line}"));
        }
        text
    }

    fn to_json(&self, kind: &str) -> Value {
        json!({"kind": kind, "job": self.job, "tick_ms": self.tick,
               "message": self.message, "evidence": self.evidence})
    }
}

struct CheckInput<'a> {
    effects_text: &'a str,
    records: &'a [Record],
    faults: &'a [Fault],
    logs: &'a [(String, String)],
    from_ms: i64,
    to_ms: i64,
    replicas: usize,
    spooled: &'a [String],
}

#[derive(Default)]
struct Report {
    from_ms: i64,
    to_ms: i64,
    ticks_checked: usize,
    runs_started: usize,
    records: usize,
    d: Vec<Violation>,
    m: Vec<Violation>,
    f: Vec<Violation>,
    s: Vec<Violation>,
    o: Vec<Violation>,
    o_max: BTreeMap<String, usize>,
    /// The most runs at once outside state-loss windows.
    o_outside: usize,
    l: Vec<Violation>,
    claimed_not_started: Vec<String>,
    /// Claims that landed in Redis after their replica had given up on them
    /// (information), and how many ticks were skipped behind them.
    phantoms: Vec<Violation>,
    phantom_skips: usize,
    state_loss_ticks: usize,
    takeover: Vec<i64>,
    takeover_any: Vec<i64>,
    abort_latency: Vec<i64>,
    abort_after_cont: Vec<i64>,
    held_at_stop: usize,
    ended_while_frozen: usize,
    state_loss_lines: usize,
    warnings: Vec<String>,
}

/// What the checker knows, indexed.
struct Facts<'a> {
    input: &'a CheckInput<'a>,
    all: &'a [Effect],
    /// (job, tick) → start lines.
    starts: BTreeMap<(String, i64), Vec<&'a Effect>>,
    /// run id → its start and end lines.
    start_of: HashMap<String, &'a Effect>,
    end_of: HashMap<String, &'a Effect>,
    /// (job, tick) → records.
    by_tick: BTreeMap<(String, i64), Vec<&'a Record>>,
    /// run id → records.
    by_run: HashMap<String, Vec<&'a Record>>,
}

fn check(input: &CheckInput) -> Report {
    let mut report = Report {
        from_ms: input.from_ms,
        to_ms: input.to_ms,
        records: input.records.len(),
        ..Report::default()
    };
    let effects = parse_effects(input.effects_text, &mut report.warnings);
    let facts = Facts::new(input, &effects);
    report.runs_started = facts.start_of.len();
    report.state_loss_lines = input
        .logs
        .iter()
        .map(|(_, log)| log.matches("REDIS STATE LOSS DETECTED").count())
        .sum();

    check_d(&facts, &mut report);
    check_m(&facts, &mut report);
    check_f(&facts, &mut report);
    check_s(&facts, &mut report);
    check_o(&facts, &mut report);
    check_l(&facts, &mut report);
    measure_takeover(&facts, &mut report);
    measure_abort(&facts, &mut report);
    find_phantoms(&facts, &mut report);
    report
}

impl<'a> Facts<'a> {
    fn new(input: &'a CheckInput<'a>, all: &'a [Effect]) -> Facts<'a> {
        let mut facts = Facts {
            input,
            all,
            starts: BTreeMap::new(),
            start_of: HashMap::new(),
            end_of: HashMap::new(),
            by_tick: BTreeMap::new(),
            by_run: HashMap::new(),
        };
        for effect in all {
            if effect.start {
                facts
                    .starts
                    .entry((effect.job.clone(), effect.tick))
                    .or_default()
                    .push(effect);
                facts
                    .start_of
                    .entry(effect.run_id.clone())
                    .or_insert(effect);
            } else {
                facts.end_of.entry(effect.run_id.clone()).or_insert(effect);
            }
        }
        for record in input.records {
            facts
                .by_tick
                .entry((record.job.clone(), record.tick()))
                .or_default()
                .push(record);
            if !record.run_id().is_empty() {
                facts
                    .by_run
                    .entry(record.run_id().to_string())
                    .or_default()
                    .push(record);
            }
        }
        facts
    }

    fn in_state_loss(&self, ms: i64) -> bool {
        self.input.faults.iter().any(|f| {
            f.is_state_loss()
                && ms >= f.start_ms - STATE_LOSS_MARGIN_MS
                && ms <= f.end_ms + STATE_LOSS_MARGIN_MS
        })
    }

    /// A declared window in which a tick may be missed: a Redis outage (and
    /// the seconds after it), or any replica fault when there is only one
    /// replica.
    fn in_outage(&self, ms: i64) -> bool {
        self.input.faults.iter().any(|f| {
            (f.is_outage() || (self.input.replicas == 1 && f.target.is_some()))
                && ms >= f.start_ms - OUTAGE_BEFORE_MS
                && ms <= f.end_ms + OUTAGE_AFTER_MS
        })
    }

    fn records_of_run(&self, run_id: &str) -> &[&Record] {
        self.by_run.get(run_id).map_or(&[], Vec::as_slice)
    }

    fn is_rerun_run(&self, run_id: &str) -> bool {
        self.records_of_run(run_id).iter().any(|r| r.rerun())
    }

    /// Effect lines, records, faults nearby and replica log lines about a
    /// tick and some runs.
    fn evidence(&self, job: &str, tick: Option<i64>, run_ids: &[&str]) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(tick) = tick {
            for effect in self.effects_of(job, tick) {
                lines.push(format!("effects.log: {}", effect.line));
            }
            for record in self
                .by_tick
                .get(&(job.to_string(), tick))
                .into_iter()
                .flatten()
            {
                lines.push(record.describe());
            }
        }
        for run_id in run_ids {
            if let Some(start) = self.start_of.get(*run_id) {
                lines.push(format!("effects.log: {}", start.line));
            }
            if let Some(end) = self.end_of.get(*run_id) {
                lines.push(format!("effects.log: {}", end.line));
            }
            for record in self.records_of_run(run_id) {
                lines.push(record.describe());
            }
        }
        let around = tick.or_else(|| {
            run_ids
                .iter()
                .find_map(|id| self.start_of.get(*id).map(|e| e.wall))
        });
        if let Some(at) = around {
            for fault in self.input.faults {
                if fault.end_ms >= at - 8_000 && fault.start_ms <= at + 8_000 {
                    lines.push(format!("fault: {}", fault.describe()));
                }
            }
        }
        let tick_text = tick.map(|t| format!("tick={}", rfc3339(t)));
        let job_field = format!("job={job} ");
        for (replica, log) in self.input.logs {
            let mut shown = 0;
            for line in log.lines() {
                let about_run = run_ids.iter().any(|id| !id.is_empty() && line.contains(id));
                let about_tick = tick_text
                    .as_ref()
                    .is_some_and(|t| line.contains(t.as_str()) && line.contains(&job_field));
                if (about_run || about_tick) && !line.contains("lease renewed") && shown < 25 {
                    lines.push(format!("{replica}.log: {line}"));
                    shown += 1;
                }
            }
        }
        let mut seen = BTreeSet::new();
        lines.retain(|line| seen.insert(line.clone()));
        lines
    }

    fn effects_of(&self, job: &str, tick: i64) -> impl Iterator<Item = &Effect> {
        self.all
            .iter()
            .filter(move |e| e.job == job && e.tick == tick)
    }
}

/// D: a tick started by more than one run. A rerun of an abandoned tick is
/// its own start (at-least-once by request), but a tick rerun twice is not.
fn check_d(facts: &Facts, report: &mut Report) {
    for ((job, tick), starts) in &facts.starts {
        let (reruns, claims): (Vec<&&Effect>, Vec<&&Effect>) =
            starts.iter().partition(|e| facts.is_rerun_run(&e.run_id));
        for (what, group) in [("claimed runs", &claims), ("reruns", &reruns)] {
            if group.len() > 1 {
                let ids: Vec<&str> = group.iter().map(|e| e.run_id.as_str()).collect();
                let distinct: BTreeSet<&str> = ids.iter().copied().collect();
                report.d.push(Violation {
                    job: job.clone(),
                    tick: Some(*tick),
                    message: format!(
                        "started {} times by {what} ({} distinct run ids) on {}",
                        group.len(),
                        distinct.len(),
                        group
                            .iter()
                            .map(|e| e.replica.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    evidence: facts.evidence(job, Some(*tick), &ids),
                    excused: facts.in_state_loss(*tick),
                });
            }
        }
    }
}

/// M: a tick in the checked range without any trace: no start line and no
/// outcome record (not even `missed` or `skipped_overlap`).
fn check_m(facts: &Facts, report: &mut Report) {
    let input = facts.input;
    for (job, _, _) in JOBS {
        let mut tick = input.from_ms;
        while tick <= input.to_ms {
            report.ticks_checked += 1;
            if facts.in_state_loss(tick) {
                report.state_loss_ticks += 1;
            }
            let key = (job.to_string(), tick);
            let started = facts.starts.contains_key(&key);
            let records = facts.by_tick.get(&key).map_or(&[][..], Vec::as_slice);
            if !started && records.is_empty() {
                report.m.push(Violation {
                    job: job.to_string(),
                    tick: Some(tick),
                    message: "no start line and no outcome record: the tick was silently missed"
                        .to_string(),
                    evidence: facts.evidence(job, Some(tick), &[]),
                    excused: facts.in_outage(tick) || facts.in_state_loss(tick),
                });
            } else if !started
                && records
                    .iter()
                    .any(|r| !matches!(r.status(), "missed" | "skipped_overlap"))
            {
                let shown: Vec<String> = records
                    .iter()
                    .map(|r| {
                        format!(
                            "{} by {} (stale={})",
                            r.status(),
                            r.get("replica"),
                            r.get("stale")
                        )
                    })
                    .collect();
                report.claimed_not_started.push(format!(
                    "{job} {}: {}",
                    rfc3339(tick),
                    shown.join("; ")
                ));
            }
            tick += 1_000;
        }
    }
}

/// F: among current outcomes with a fence (reruns excepted: they take a new
/// fence for an old tick by design), a fence not above every fence of an
/// earlier tick. Ticks in a state-loss window are not flagged, but the
/// fences handed out before Redis lost its data still count for later ticks.
fn check_f(facts: &Facts, report: &mut Report) {
    for (job, _, _) in JOBS {
        let mut current: Vec<&Record> = facts
            .input
            .records
            .iter()
            .filter(|r| r.job == job && !r.stale() && !r.rerun() && r.fence() > 0)
            .collect();
        current.sort_by_key(|r| (r.tick(), r.fence()));
        let mut best: Option<&Record> = None; // highest fence of earlier ticks
        let mut pending: Option<&Record> = None; // highest fence of the current tick
        let mut tick = i64::MIN;
        for record in current {
            if record.tick() != tick {
                if let Some(p) = pending.take()
                    && best.is_none_or(|b| p.fence() > b.fence())
                {
                    best = Some(p);
                }
                tick = record.tick();
            }
            // Ticks in a state-loss window are not held to it, but their
            // fences count for the ticks after it.
            if let Some(b) = best
                && record.fence() <= b.fence()
            {
                let mut evidence = vec![b.describe()];
                evidence.extend(facts.evidence(job, Some(record.tick()), &[]));
                report.f.push(Violation {
                    job: job.to_string(),
                    tick: Some(record.tick()),
                    message: format!(
                        "fence {} is not above fence {} of the earlier tick {}",
                        record.fence(),
                        b.fence(),
                        rfc3339(b.tick())
                    ),
                    evidence,
                    excused: facts.in_state_loss(record.tick()),
                });
            }
            if pending.is_none_or(|p| record.fence() > p.fence()) {
                pending = Some(record);
            }
        }
    }
}

/// S: a run with two current outcomes (e.g. `abandoned` and its own finish
/// both current), or a tick with two current outcomes, except one rerun
/// after an `abandoned`.
fn check_s(facts: &Facts, report: &mut Report) {
    for (run_id, records) in &facts.by_run {
        let current: Vec<&&Record> = records.iter().filter(|r| !r.stale()).collect();
        if current.len() > 1 {
            let first = current[0];
            report.s.push(Violation {
                job: first.job.clone(),
                tick: Some(first.tick()),
                message: format!("run {run_id} has {} current outcomes", current.len()),
                evidence: facts.evidence(&first.job, Some(first.tick()), &[run_id]),
                excused: current.iter().any(|r| facts.in_state_loss(r.tick())),
            });
        }
    }
    for ((job, tick), records) in &facts.by_tick {
        let current: Vec<&&Record> = records.iter().filter(|r| !r.stale()).collect();
        let (reruns, claims): (Vec<&&Record>, Vec<&&Record>) =
            current.iter().partition(|r| r.rerun());
        let abandoned = claims.iter().any(|r| r.status() == "abandoned");
        let problem = if claims.len() > 1 {
            Some(format!("{} current outcomes of claims", claims.len()))
        } else if reruns.len() > 1 {
            Some(format!("{} current outcomes of reruns", reruns.len()))
        } else if !reruns.is_empty() && !abandoned {
            Some("a current rerun outcome without an abandoned claim".to_string())
        } else {
            None
        };
        if let Some(problem) = problem {
            let ids: Vec<&str> = current.iter().map(|r| r.run_id()).collect();
            report.s.push(Violation {
                job: job.clone(),
                tick: Some(*tick),
                message: problem,
                evidence: facts.evidence(job, Some(*tick), &ids),
                excused: facts.in_state_loss(*tick),
            });
        }
    }
}

/// O: the most runs of one non-`allow` job at once, from start/end lines
/// (reruns excepted). A run without an `end` line ended when its own
/// outcome says, or when its replica was killed, whichever is first.
fn check_o(facts: &Facts, report: &mut Report) {
    for (job, _, _) in JOBS {
        if job == ALLOW_JOB {
            continue;
        }
        let mut intervals: Vec<(i64, i64, &Effect)> = Vec::new();
        for start in facts.start_of.values().filter(|e| e.job == job) {
            if facts.is_rerun_run(&start.run_id) {
                continue;
            }
            let Some(end) = run_end(facts, start) else {
                report.warnings.push(format!(
                    "run {} of {job} ({}) has no end line, no own outcome and no kill: \
                     left out of O",
                    start.run_id,
                    rfc3339(start.tick)
                ));
                continue;
            };
            intervals.push((start.wall, end.max(start.wall), start));
        }
        // Ends sort before starts at the same instant.
        let mut events: Vec<(i64, i32, usize)> = Vec::new();
        for (n, (from, to, _)) in intervals.iter().enumerate() {
            events.push((*from, 1, n));
            events.push((*to, -1, n));
        }
        events.sort_by_key(|&(at, delta, _)| (at, delta));
        let mut open: BTreeSet<usize> = BTreeSet::new();
        let mut max = 0;
        // Runs that overlapped since the last instant nothing ran.
        let mut episode: BTreeSet<usize> = BTreeSet::new();
        let mut episode_max = 0;
        for (_, delta, n) in events {
            if delta > 0 {
                open.insert(n);
                if open.len() > 1 {
                    episode.extend(open.iter().copied());
                    episode_max = episode_max.max(open.len());
                }
                max = max.max(open.len());
            } else {
                open.remove(&n);
                if open.is_empty() && !episode.is_empty() {
                    report
                        .o
                        .push(overlap(facts, job, &intervals, &episode, episode_max));
                    episode.clear();
                    episode_max = 0;
                }
            }
        }
        report.o_max.insert(job.to_string(), max);
        report.o_outside = report.o_outside.max(max.min(1));
    }
}

/// One episode of overlapping runs of a non-`allow` job.
fn overlap(
    facts: &Facts,
    job: &str,
    intervals: &[(i64, i64, &Effect)],
    runs: &BTreeSet<usize>,
    most: usize,
) -> Violation {
    let mut evidence: Vec<String> = runs
        .iter()
        .map(|&i| {
            let (from, to, e) = intervals[i];
            format!(
                "run {} tick {} on {}: ran {} – {}",
                e.run_id,
                clock(e.tick),
                e.replica,
                clock(from),
                clock(to)
            )
        })
        .collect();
    let ids: Vec<&str> = runs
        .iter()
        .map(|&i| intervals[i].2.run_id.as_str())
        .collect();
    evidence.extend(facts.evidence(job, None, &ids));
    let first = runs.iter().map(|&i| intervals[i].2.tick).min();
    // Redis forgot the lease: a run may start beside one it cannot see.
    let excused = runs.iter().any(|&i| {
        let (from, _, e) = intervals[i];
        facts.in_state_loss(e.tick) || facts.in_state_loss(from)
    });
    Violation {
        job: job.to_string(),
        tick: first,
        message: format!("{most} runs at once ({} runs overlap)", runs.len()),
        evidence,
        excused,
    }
}

/// When a run without an `end` line ended: its own outcome's finish, or the
/// kill -9 of its replica, whichever came first.
fn run_end(facts: &Facts, start: &Effect) -> Option<i64> {
    if let Some(end) = facts.end_of.get(&start.run_id) {
        return Some(end.wall);
    }
    let own = facts
        .records_of_run(&start.run_id)
        .iter()
        .filter(|r| r.status() != "abandoned")
        .map(|r| r.number("finished_ms"))
        .min();
    let killed = facts
        .input
        .faults
        .iter()
        .filter(|f| f.kind == "kill9" && f.target.as_deref() == Some(start.replica.as_str()))
        .map(|f| f.start_ms)
        .filter(|&at| at >= start.wall)
        .min();
    match (own, killed) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// L: a run that started but has no outcome record at all, and a tick
/// whose records are all stale (no current outcome).
fn check_l(facts: &Facts, report: &mut Report) {
    let mut lost: Vec<&Effect> = facts
        .start_of
        .values()
        .copied()
        .filter(|start| facts.records_of_run(&start.run_id).is_empty())
        .collect();
    lost.sort_by_key(|e| (e.tick, e.job.clone()));
    for start in lost {
        let mut evidence = facts.evidence(&start.job, Some(start.tick), &[&start.run_id]);
        for path in facts.input.spooled {
            evidence.push(format!("still in a spool: {path}"));
        }
        report.l.push(Violation {
            job: start.job.clone(),
            tick: Some(start.tick),
            message: format!(
                "run {} started on {} but has no outcome record",
                start.run_id, start.replica
            ),
            evidence,
            excused: facts.in_state_loss(start.wall) || facts.in_state_loss(start.tick),
        });
    }
    for ((job, tick), records) in &facts.by_tick {
        if records.iter().all(|r| r.stale()) {
            let ids: Vec<&str> = records.iter().map(|r| r.run_id()).collect();
            report.l.push(Violation {
                job: job.clone(),
                tick: Some(*tick),
                message: "only stale outcomes: the tick has no current outcome".to_string(),
                evidence: facts.evidence(job, Some(*tick), &ids),
                excused: facts.in_state_loss(*tick),
            });
        }
    }
}

/// Takeover: kill -9 of a replica holding a run of a non-`allow` job → the
/// next start of that job on another replica.
fn measure_takeover(facts: &Facts, report: &mut Report) {
    for fault in facts.input.faults.iter().filter(|f| f.kind == "kill9") {
        let target = fault.target.as_deref().unwrap_or("");
        let jobs: BTreeSet<&str> = fault.detail["held"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["job"].as_str())
            .filter(|job| *job != ALLOW_JOB)
            .collect();
        for job in jobs {
            let next = |other_only: bool| {
                facts
                    .start_of
                    .values()
                    .filter(|e| e.job == job && e.wall >= fault.start_ms)
                    .filter(|e| !other_only || e.replica != target)
                    .map(|e| e.wall - fault.start_ms)
                    .min()
            };
            report.takeover.extend(next(true));
            report.takeover_any.extend(next(false));
        }
    }
}

/// Abort latency: for each run the frozen replica held at SIGSTOP, the
/// first log line of its watchdog giving it up after SIGCONT.
fn measure_abort(facts: &Facts, report: &mut Report) {
    for fault in facts.input.faults.iter().filter(|f| f.kind == "sigstop") {
        let target = fault.target.as_deref().unwrap_or("");
        let skew = fault.detail["skew_ms"].as_i64().unwrap_or(0);
        let Some((_, log)) = facts.input.logs.iter().find(|(name, _)| name == target) else {
            continue;
        };
        for held in fault.detail["held"].as_array().into_iter().flatten() {
            let Some(run_id) = held["run_id"].as_str() else {
                continue;
            };
            report.held_at_stop += 1;
            if facts
                .end_of
                .get(run_id)
                .is_some_and(|end| end.wall < fault.end_ms)
            {
                report.ended_while_frozen += 1;
            }
            let aborted = log
                .lines()
                .filter(|line| {
                    line.contains(run_id)
                        && (line.contains("lease could not be renewed before its deadline")
                            || line.contains("lease is no longer ours"))
                })
                .filter_map(log_time)
                .map(|at| at - skew)
                .find(|&at| at >= fault.end_ms - 100);
            if let Some(at) = aborted {
                report.abort_latency.push(at - (fault.start_ms + LEASE_MS));
                report.abort_after_cont.push(at - fault.end_ms);
            }
        }
    }
}

/// Phantom claims: a replica logged `tick not claimed: Redis unreachable`
/// for a run id (its claim timed out and it gave up on the tick), yet Redis
/// holds records of that run id: the claim script ran later (e.g. when a
/// `CLIENT PAUSE` ended), took the lease, and nobody ran it: the tick ended
/// `abandoned` and its lease blocked the job's next ticks. Claims carry a
/// deadline since, and one that reaches Redis late takes no effect, so any
/// phantom is a regression of that fix; reported as information.
fn find_phantoms(facts: &Facts, report: &mut Report) {
    for (replica, log) in facts.input.logs {
        for line in log
            .lines()
            .filter(|l| l.contains("tick not claimed: Redis unreachable"))
        {
            let Some(run_id) = field(line, "run_id") else {
                continue;
            };
            let records = facts.records_of_run(run_id);
            let Some(claim) = records.iter().find(|r| r.status() != "skipped_overlap") else {
                continue;
            };
            let (from, to) = (claim.number("started_ms"), claim.number("finished_ms"));
            let skipped: Vec<&Record> = facts
                .input
                .records
                .iter()
                .filter(|r| r.job == claim.job && r.status() == "skipped_overlap")
                .filter(|r| (from..=to).contains(&r.number("started_ms")))
                .collect();
            report.phantom_skips += skipped.len();
            let mut evidence = vec![format!("{replica}.log: {line}")];
            evidence.extend(records.iter().map(|r| r.describe()));
            evidence.extend(skipped.iter().map(|r| r.describe()));
            evidence.extend(
                facts
                    .input
                    .faults
                    .iter()
                    .filter(|f| f.end_ms >= from - 5_000 && f.start_ms <= from + 1_000)
                    .map(|f| format!("fault: {}", f.describe())),
            );
            report.phantoms.push(Violation {
                job: claim.job.clone(),
                tick: Some(claim.tick()),
                message: format!(
                    "{replica} gave up on run {run_id}, but the claim took effect at {} \
                     and ended {} at {}; {} later ticks were skipped behind it",
                    clock(from),
                    claim.status(),
                    clock(to),
                    skipped.len()
                ),
                evidence,
                excused: true,
            });
        }
    }
}

/// The value of `name=value` in a text log line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=");
    let at = line.find(&key)? + key.len();
    line[at..].split_whitespace().next()
}

/// The wall ms of a text log line (`2026-11-22T06:46:55.430482Z  INFO …`).
fn log_time(line: &str) -> Option<i64> {
    let stamp = line.split_whitespace().next()?;
    DateTime::parse_from_rfc3339(stamp)
        .ok()
        .map(|t| t.timestamp_millis())
}
