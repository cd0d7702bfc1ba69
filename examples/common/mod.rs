//! Helpers the examples share (`mod common;` in each): a private
//! redis-server and the spawn options of child processes. Examples cannot
//! use the integration tests' support module, so this is their copy.

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use std::ffi::c_int;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Spawn options every child of the example gets: its own process group, so
/// that Ctrl-C in the terminal reaches only the example, which then stops them
/// in order; and SIGKILL when the example dies, so nothing outlives it.
pub fn detach_and_tie_to_parent(command: &mut Command) {
    command.process_group(0);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

/// The private `redis-server`; dropping it kills it.
pub struct RedisProcess {
    pub port: u16,
    child: Child,
}

impl RedisProcess {
    /// Starts `redis-server` on a free loopback port with its data in
    /// `dir`, and waits until it answers PING. A port that was free a moment
    /// ago can be taken before Redis binds it, so a few ports are tried.
    pub fn start(dir: &Path) -> Result<RedisProcess> {
        let log = dir.join("redis.log");
        let mut last_error = None;
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .context("cannot find a free loopback port")?
                .port();
            let mut command = Command::new("redis-server");
            command
                .arg("--port")
                .arg(port.to_string())
                .args(["--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir)
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--logfile")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit());
            detach_and_tie_to_parent(&mut command);
            let child = command.spawn().context("cannot start redis-server")?;
            let mut redis = RedisProcess { port, child };
            match redis.wait_ready(&log) {
                Ok(()) => return Ok(redis),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.expect("five attempts were made"))
    }

    fn wait_ready(&mut self, log: &Path) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().context("cannot check redis-server")? {
                bail!(
                    "redis-server exited with {status} at start; its log:\n{}",
                    tail(log, 20)
                );
            }
            if let Ok(mut connection) = self.connect_with(Duration::from_millis(200))
                && redis::cmd("PING").query::<String>(&mut connection).is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "redis-server did not answer PING within 10 s; its log:\n{}",
                    tail(log, 20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A connection whose reads give up after `read_timeout`.
    pub fn connect(&self, read_timeout: Duration) -> Result<redis::Connection> {
        let connection = self.connect_with(Duration::from_secs(5))?;
        connection
            .set_read_timeout(Some(read_timeout))
            .context("cannot set a read timeout")?;
        Ok(connection)
    }

    fn connect_with(&self, timeout: Duration) -> Result<redis::Connection> {
        let url = self.url();
        redis::Client::open(url.as_str())
            .and_then(|client| client.get_connection_with_timeout(timeout))
            .with_context(|| format!("cannot connect to {url}"))
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `lines` lines of a file, or why it could not be read.
pub fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Set by the first SIGINT/SIGTERM: the example ends its run early but still
/// stops its children in order and reports.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The `cronlease` binary built next to this example: the example runs from
/// `target/<profile>/examples/<name>`, the binary is `target/<profile>/cronlease`.
pub fn cronlease_binary() -> Result<PathBuf> {
    let exe = own_executable()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .with_context(|| format!("unexpected location of the example: {}", exe.display()))?;
    built(profile_dir.join("cronlease"))
}

/// The example `name` built next to this one (`target/<profile>/examples/`).
pub fn example_binary(name: &str) -> Result<PathBuf> {
    built(own_executable()?.with_file_name(name))
}

fn own_executable() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find the example's own executable")
}

/// `binary` if it exists, or an error saying how to build it (naming the
/// script of the example that asks, `scripts/<its name>`).
fn built(binary: PathBuf) -> Result<PathBuf> {
    if !binary.is_file() {
        let caller = own_executable()?
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        bail!(
            "{} does not exist: build it first with `cargo build --release --bins --examples` \
             (scripts/{caller} does)",
            binary.display()
        );
    }
    Ok(binary)
}

/// Whether `program` is an executable file somewhere on `PATH`.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

extern "C" fn on_interrupt(_signal: c_int) {
    // Only an atomic store: anything else is not async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// First Ctrl-C (or SIGTERM) sets [`INTERRUPTED`]; the handler resets
/// itself, so a second one kills the example (and, through
/// `PR_SET_PDEATHSIG`, its children).
pub fn install_interrupt_handler() -> Result<()> {
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

/// A private `redis-server` that can crash and come back: its data is in
/// an AOF fsync'd at every write (`appendfsync always`: every write it
/// acknowledged survives a SIGKILL), it can be killed, its data deleted, and
/// started again on the same port; `DEBUG` is enabled for local clients.
/// Its log is `redis.log` in its directory, its console `console.log`.
/// Dropping it kills it. Used by the chaos suite.
#[allow(dead_code)]
pub struct DurableRedis {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
}

#[allow(dead_code)]
impl DurableRedis {
    /// Starts in `dir` (created) on a free loopback port (a few tries: a
    /// port found free can be taken before Redis binds it).
    pub fn start(dir: &Path) -> Result<DurableRedis> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut last_error = None;
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .context("cannot find a free loopback port")?
                .port();
            let mut redis = DurableRedis {
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

    /// Starts the server (again) on its port, and waits until it answers
    /// PING.
    pub fn launch(&mut self) -> Result<()> {
        let console = std::fs::File::options()
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

    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A connection that gives up connecting after `timeout`, and reading
    /// or writing after `timeout` or 5 s, whichever is longer.
    pub fn connect(&self, timeout: Duration) -> Result<redis::Connection> {
        let url = format!("redis://127.0.0.1:{}/0", self.port);
        let connection = redis::Client::open(url.as_str())
            .and_then(|client| client.get_connection_with_timeout(timeout))
            .with_context(|| format!("cannot connect to {url}"))?;
        let io_timeout = Some(Duration::from_secs(5).max(timeout));
        connection.set_read_timeout(io_timeout)?;
        connection.set_write_timeout(io_timeout)?;
        Ok(connection)
    }

    /// The server's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Deletes the persisted data (call it while the server is down): the
    /// next start is a Redis that lost everything.
    pub fn wipe(&self) -> Result<()> {
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

impl Drop for DurableRedis {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `text` as a TOML basic string, quotes included.
pub fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// `text` with every line indented by six spaces, under a message.
pub fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("      {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Prints rows under a header, columns padded, the first left-aligned.
pub fn print_table(header: &[String], rows: &[Vec<String>]) {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |row: &[String]| {
        let cells: Vec<String> = (0..columns)
            .map(|i| {
                let cell = row.get(i).map_or("", String::as_str);
                let pad = widths[i] - cell.chars().count();
                format!("{cell}{}", " ".repeat(pad))
            })
            .collect();
        println!("  {}", cells.join(" | ").trim_end());
    };
    line(header);
    println!(
        "  {}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-+-")
    );
    for row in rows {
        line(row);
    }
}
