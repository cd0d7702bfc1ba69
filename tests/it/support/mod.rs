//! Shared helpers: running the `cronlease` binary and reporting everything
//! about a run that did not go as expected, and the pieces of a cluster in a
//! test — a private Redis ([`RedisServer`]), daemon processes ([`Replica`]),
//! their config ([`write_config`]), what they wrote ([`read_outcomes`]), and
//! all of these together ([`Cluster`]); copies of this test binary running
//! library code in processes of their own ([`TestChild`]); and Redis
//! deployed other ways — TLS, Sentinel, Redis Cluster, a quorum of servers
//! ([`Topology`]); the library's `Store` on a private server
//! ([`connect_store`], [`claim_request`]); and a headless Chromium to look at the dashboard with
//! ([`Browser`]).
//!
//! Every helper fails loudly: a missing `redis-server` or a daemon that does
//! not come up is a panic that says what to do and shows the log, never a
//! skipped test.

// Each test module uses a subset of these helpers, so a helper unused by
// today's tests is not dead code that clippy should reject.
#![allow(dead_code)]

mod browser;
mod child;
mod cluster;
#[path = "../../../examples/common/faketime.rs"]
mod faketime;
pub mod http;
mod oidc_provider;
mod outcome;
mod process;
mod receiver;
mod redis_server;
mod replica;
mod smtp_server;
mod store;
mod topology;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub use browser::Browser;
pub use child::TestChild;

/// The peak resident set (`VmHWM`) of process `pid`, kB; 0 when it cannot
/// be read.
pub fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Makes the process `command` starts die (SIGKILL) when the thread that
/// starts it does (`PR_SET_PDEATHSIG`): a test runner killed mid-test
/// leaves no `redis-server`, daemon or child behind. Drop handlers cover
/// every other way out.
pub fn die_with_this_thread(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls are
    // allowed; prctl(2) is one, and nothing here allocates.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}
/// The environment of a process on a host whose wall clock is `offset`
/// (`"+1.5s"`) off ([`faketime::skewed_clock`]).
///
/// # Panics
///
/// When libfaketime is not installed, saying how to install it.
pub fn skewed_clock(offset: &str) -> Vec<(String, String)> {
    let libfaketime = faketime::libfaketime().unwrap_or_else(|| {
        panic!("libfaketime.so.1 is not installed under /usr/lib: run scripts/install-deps")
    });
    faketime::skewed_clock(&libfaketime, offset)
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

pub use cluster::{Cluster, current_by_tick, probe_job, start_times, starts};
pub use oidc_provider::OidcProvider;
#[allow(unused_imports)] // the type of `read_outcomes`' items, named by some tests
pub use outcome::{Outcome, read_outcomes};
pub use receiver::{Receiver, Request, python_hmac};
pub use redis_server::RedisServer;
pub use replica::Replica;
pub use smtp_server::SmtpServer;
pub use store::{claim_request, claimed_outcome, connect_store, hget, test_claimant};
pub use topology::{ClientCert, RedisClusterSetup, SentinelSetup, TlsFiles, Topology};

/// What one run of the binary did.
pub struct Run {
    pub command: String,
    pub output: Output,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "command: {}\nstatus: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.command,
            self.output.status,
            self.stdout(),
            self.stderr()
        )
    }

    /// Asserts the exit code and returns self for further checks.
    #[track_caller]
    pub fn expect_code(self, code: i32) -> Self {
        assert_eq!(
            self.code(),
            Some(code),
            "unexpected exit status\n{}",
            self.describe()
        );
        self
    }
}

/// The `cronlease` binary, built by cargo with these tests (they are a
/// test target of its package, cli/).
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cronlease"))
}

/// The files under `dir` (at any depth) whose extension is `extension`,
/// sorted.
pub fn files_under(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The repository's root (these tests' package is cli/, beside it).
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ is in the repository")
        .to_path_buf()
}

/// Runs `cronlease ARGS…` to completion with no standard input.
pub fn cronlease<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    cronlease_with_env(args, &[])
}

/// [`cronlease`] with extra environment variables (e.g. the one a
/// config's `password_env` names).
pub fn cronlease_with_env<I, S>(args: I, env: &[(&str, &str)]) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(binary());
    command.args(args).stdin(std::process::Stdio::null());
    command.env_remove("CRONLEASE_CONFIG");
    command.envs(env.iter().copied());
    let shown = format!("{command:?}");
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    Run {
        command: shown,
        output,
    }
}

/// A temporary directory holding one config file.
pub struct ConfigFile {
    /// Held so the directory lives as long as the file.
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl ConfigFile {
    pub fn new(text: &str) -> ConfigFile {
        let dir = tempfile::tempdir().expect("cannot create a temporary directory");
        let path = dir.path().join("jobs.toml");
        std::fs::write(&path, text).expect("cannot write the config file");
        ConfigFile { _dir: dir, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The wall clock in ms since the epoch (tests that pick ticks near now).
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_millis()).expect("milliseconds fit in i64")
}

/// The outcome of a run of `job` that succeeded a millisecond after its
/// tick, as the library's `Store::finish` takes it (tests that drive the
/// store directly).
pub fn ok_outcome(
    job: &str,
    run_id: &str,
    tick_ms: i64,
    fence: u64,
    lease_key: String,
) -> cronlease::outcome::Outcome {
    use cronlease::outcome::{Outcome, Status, Trigger};
    Outcome {
        job: job.into(),
        tick_ms,
        fence,
        run_id: run_id.into(),
        replica: "test".into(),
        host: "localhost".into(),
        started_ms: tick_ms,
        finished_ms: tick_ms + 1,
        status: Status::Ok,
        exit_code: Some(0),
        signal: None,
        attempts: 1,
        output: "winners: 4 8 15 16 23 42\n".into(),
        trigger: Trigger::Schedule,
        lease_key,
        cpu_ms: None,
        peak_memory_kb: None,
        oom_kills: None,
        upstream: None,
        params: Default::default(),
    }
}

/// A current-thread tokio runtime, for tests that drive the library.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds")
}

/// A two-worker tokio runtime, for tests that run replicas in process.
pub fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime builds")
}

/// The library's connection to `redis`, key prefix `cl` (as
/// [`write_config`] gives replicas), 300 ms command timeout.
pub async fn cluster(redis: &RedisServer) -> cronlease::Cluster {
    cronlease::Cluster::connect(
        cronlease::RedisSettings::url(&redis.url())
            .key_prefix("cl")
            .command_timeout(Duration::from_millis(300)),
    )
    .await
    .expect("the test's Redis answers")
}

/// A scheduler of `jobs` as instance `id`, with short test timings and its
/// own state directory.
pub async fn start_scheduler(
    redis: &RedisServer,
    dir: &tempfile::TempDir,
    id: &str,
    jobs: Vec<cronlease::Job>,
) -> cronlease::Scheduler {
    let builder = cluster(redis)
        .await
        .scheduler()
        .replica_id(id)
        .state_dir(&dir.path().join(id))
        .lease(Duration::from_secs(2))
        .heartbeat(Duration::from_secs(1))
        .shutdown_grace(Duration::from_secs(1))
        .kill_grace(Duration::from_millis(500));
    jobs.into_iter()
        .fold(builder, |builder, job| builder.job(job))
        .start()
        .expect("the test's jobs are valid")
}

/// The top of a valid config; tests append jobs to it.
pub const REDIS_SECTION: &str = "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n";

/// Polls `f` every 50 ms until it returns `Some`, and returns that value.
///
/// Tests wait for things that happen in other processes (a claim, an
/// outcome, a log line); polling with a deadline keeps them fast when all is
/// well and bounded when it is not.
///
/// # Panics
///
/// After `timeout`, naming `what` was awaited.
#[track_caller]
pub fn wait_until<T>(timeout: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_until_or_show(timeout, what, String::new, f)
}

/// [`wait_until`] whose panic message ends with `show()`, e.g. the log
/// tails of the servers that did not come up.
#[track_caller]
pub fn wait_until_or_show<T>(
    timeout: Duration,
    what: &str,
    show: impl Fn() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = f() {
            return value;
        }
        if Instant::now() >= deadline {
            let shown = show();
            if shown.is_empty() {
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            panic!("timed out after {timeout:?} waiting for {what}\n{shown}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes `DIR/jobs.toml` for a daemon talking to `redis_url` and returns its
/// path.
///
/// The timings are short so that tests about leases, heartbeats and shutdown
/// finish in seconds: `lease = "2s"` (renewed every 666 ms, which must exceed
/// `command_timeout = "300ms"`), `shutdown_grace = "5s"`, `kill_grace = "1s"`,
/// `heartbeat = "1s"`. No metrics or dashboard listener unless
/// `extra_daemon` sets one. `key_prefix` is `"cl"`. `state_dir` is `DIR/state`
/// (created here): replicas of one test each need their own `DIR`, as their
/// spools must not be shared.
///
/// `extra_daemon` is appended inside `[daemon]` (e.g. `replica_id = "a"`),
/// `jobs` after it verbatim (the `[jobs.…]` tables).
pub fn write_config(dir: &Path, redis_url: &str, extra_daemon: &str, jobs: &str) -> PathBuf {
    let redis = format!("url = {}\n", toml_string(redis_url));
    write_config_section(dir, &redis, extra_daemon, jobs)
}

/// [`write_config`] for any way of reaching Redis: `redis` is the body of
/// the `[redis]` section (e.g. `url = …`, `sentinels = […]` and
/// `master_name = …`, `ca_file = …`) except `key_prefix = "cl"` and
/// `command_timeout = "300ms"`, which are added here.
pub fn write_config_section(dir: &Path, redis: &str, extra_daemon: &str, jobs: &str) -> PathBuf {
    let state_dir = dir.join("state");
    std::fs::create_dir_all(&state_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", state_dir.display()));
    let mut redis = redis.to_owned();
    if !redis.is_empty() && !redis.ends_with('\n') {
        redis.push('\n');
    }
    // A test that sets its own heartbeat in `extra_daemon` gets it instead
    // of the usual second (a key may not be set twice).
    let heartbeat = if extra_daemon.contains("heartbeat =") {
        ""
    } else {
        "heartbeat = \"1s\"\n"
    };
    // Nor do replicas listen on the default ports, which another test's
    // replica (or anything on this machine) may hold: a test that wants a
    // listener asks for one, on port 0.
    let mut listeners = String::new();
    for key in ["metrics_listen", "dashboard_listen"] {
        if !extra_daemon.contains(&format!("{key} =")) {
            listeners.push_str(&format!("{key} = \"\"\n"));
        }
    }
    let mut text = format!(
        "[redis]\n\
         {redis}\
         key_prefix = \"cl\"\n\
         command_timeout = \"300ms\"\n\
         \n\
         [daemon]\n\
         lease = \"2s\"\n\
         shutdown_grace = \"5s\"\n\
         kill_grace = \"1s\"\n\
         {heartbeat}\
         {listeners}\
         state_dir = {state_dir}\n",
        state_dir = toml_string(&state_dir.to_string_lossy()),
    );
    text.push_str(extra_daemon);
    if !extra_daemon.is_empty() && !extra_daemon.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text.push_str(jobs);
    let path = dir.join("jobs.toml");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// `text` as a TOML basic string, quotes and escapes included, so that paths
/// and URLs with odd characters still make a valid file.
pub fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}
