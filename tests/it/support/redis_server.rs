//! A private `redis-server` per test: its own free loopback port and its own
//! data directory, so tests run in parallel and never touch a Redis they did
//! not start (port 6379 included).

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a starting server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `stop` waits for SHUTDOWN to end the process before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How many fresh ports `start_with` tries: a port found free can be taken
/// by a parallel test before this server binds it.
const PORT_ATTEMPTS: u32 = 5;

/// A `redis-server` process this test owns. Dropping it kills the process.
pub struct RedisServer {
    port: u16,
    /// Further listening ports, each given on the command line as
    /// `FLAG PORT` (e.g. `--tls-port`, `--cluster-port`) and chosen afresh
    /// with `port` on each start attempt.
    extra_ports: Vec<(String, u16)>,
    /// A config file's text, written to `DIR/redis.conf` (after a
    /// `port PORT` line) and given as the first argument, as a sentinel
    /// needs; a restart reuses the file as the server left it.
    config: Option<String>,
    /// Data directory (AOF files live here, so `restart` finds them) and
    /// the server's log and console output.
    dir: tempfile::TempDir,
    /// The caller's arguments, given again on `restart`.
    extra_args: Vec<String>,
    /// `None` once stopped or killed.
    process: Option<Child>,
}

/// Why one attempt to start the server failed.
struct LaunchFailure {
    /// Another process got the port first: worth trying another one.
    port_in_use: bool,
    message: String,
}

impl RedisServer {
    /// Starts a server with the default settings: no RDB snapshots, no AOF.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with `extra_args` after the defaults, so they win:
    /// e.g. `["--appendonly", "yes"]` to keep data across `restart`.
    ///
    /// # Panics
    ///
    /// When `redis-server` is not installed (run `scripts/install-deps`), or
    /// the server does not answer PING within 10 s (the message holds its
    /// log).
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        RedisServer::start_full(None, &[], extra_args)
    }

    /// The general form of [`RedisServer::start_with`]: `config`, when
    /// given, is written to `DIR/redis.conf` after a `port PORT` line and
    /// passed as the first argument (a sentinel's config must be a file it
    /// can rewrite); each of `port_flags` (e.g. `--tls-port`) gets a free
    /// port of its own, passed as `FLAG PORT` and read back with
    /// [`RedisServer::extra_port`].
    pub fn start_full(
        config: Option<&str>,
        port_flags: &[&str],
        extra_args: &[&str],
    ) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("cronlease-redis-")
            .tempdir()
            .expect("cannot create a temporary directory for redis-server");
        let mut server = RedisServer {
            port: 0,
            extra_ports: Vec::new(),
            config: config.map(str::to_owned),
            dir,
            extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
            process: None,
        };
        for attempt in 1..=PORT_ATTEMPTS {
            server.port = free_port();
            server.extra_ports = port_flags
                .iter()
                .map(|flag| (flag.to_string(), free_port()))
                .collect();
            if let Some(config) = &server.config {
                let path = server.config_path();
                std::fs::write(&path, format!("port {}\n{config}\n", server.port))
                    .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            }
            match server.launch() {
                Ok(()) => return server,
                Err(failure) if failure.port_in_use && attempt < PORT_ATTEMPTS => continue,
                Err(failure) => panic!("{}", failure.message),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port given with `flag` to [`RedisServer::start_full`].
    ///
    /// # Panics
    ///
    /// When the server was not started with that flag.
    #[track_caller]
    pub fn extra_port(&self, flag: &str) -> u16 {
        self.extra_ports
            .iter()
            .find(|(f, _)| f == flag)
            .map(|&(_, port)| port)
            .unwrap_or_else(|| panic!("this redis-server was not started with {flag}"))
    }

    /// The server's data directory, which also holds `redis.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    /// A new synchronous connection. Reads and writes time out after 10 s
    /// so that a test talking to a paused or stopped server fails instead of
    /// hanging.
    #[track_caller]
    pub fn client(&self) -> redis::Connection {
        self.connect(&self.url())
    }

    /// Like [`RedisServer::client`], authenticated as ACL user `user`
    /// (for a server whose default user is off).
    #[track_caller]
    pub fn client_as(&self, user: &str, password: &str) -> redis::Connection {
        self.connect(&format!(
            "redis://{user}:{password}@127.0.0.1:{}/0",
            self.port
        ))
    }

    #[track_caller]
    fn connect(&self, target: &str) -> redis::Connection {
        // Messages name the URL without credentials.
        let url = self.url();
        let client =
            redis::Client::open(target).unwrap_or_else(|e| panic!("invalid Redis URL {url}: {e}"));
        let connection = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap_or_else(|e| {
                panic!(
                    "cannot connect to the test Redis at {url}: {e}\n{}",
                    self.log_tail(20)
                )
            });
        let timeout = Some(Duration::from_secs(10));
        connection
            .set_read_timeout(timeout)
            .and_then(|()| connection.set_write_timeout(timeout))
            .unwrap_or_else(|e| panic!("cannot set timeouts on the connection to {url}: {e}"));
        connection
    }

    /// Stops the server as an operator would (`SHUTDOWN NOSAVE`; the AOF is
    /// still flushed) and waits for the process; SIGKILL if it takes more
    /// than 5 s. Does nothing when the server is not running.
    pub fn stop(&mut self) {
        let Some(mut process) = self.process.take() else {
            return;
        };
        if let Ok(client) = redis::Client::open(self.url())
            && let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_secs(1))
        {
            let _ = connection.set_read_timeout(Some(Duration::from_secs(1)));
            // The reply is the connection closing: an error here is expected.
            let _: redis::RedisResult<()> =
                redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut connection);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match process.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break,
            }
        }
        let _ = process.kill();
        process
            .wait()
            .unwrap_or_else(|e| panic!("cannot wait for redis-server to exit: {e}"));
    }

    /// Kills the server with SIGKILL, as a crash would: whatever the AOF
    /// had not yet written is lost.
    pub fn kill9(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            process
                .wait()
                .unwrap_or_else(|e| panic!("cannot wait for the killed redis-server: {e}"));
        }
    }

    /// Starts the server again on the same port, with the same directory and
    /// arguments: with `--appendonly yes` the data comes back. A running
    /// server is stopped first (`stop`); call `kill9` before to restart
    /// after a crash instead.
    ///
    /// # Panics
    ///
    /// When the server does not come back (e.g. another process took the
    /// port meanwhile).
    pub fn restart(&mut self) {
        self.stop();
        if let Err(failure) = self.launch() {
            panic!("cannot restart redis-server: {}", failure.message);
        }
    }

    /// Makes the server hold every client's commands for `ms` milliseconds
    /// (`CLIENT PAUSE`): Redis looks alive but answers nothing, which is what
    /// a long fork, a slow disk or a failover pause look like to a client.
    #[track_caller]
    pub fn pause_clients(&self, ms: u64) {
        let mut connection = self.client();
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .query::<()>(&mut connection)
            .unwrap_or_else(|e| panic!("CLIENT PAUSE {ms} failed: {e}"));
    }

    /// The last `lines` lines of the server's log and console output.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut text = String::new();
        for name in ["redis.log", "console.log"] {
            let path = self.dir.path().join(name);
            let content = std::fs::read_to_string(&path).unwrap_or_default();
            let all: Vec<&str> = content.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            text.push_str(&format!("--- {}\n{}\n", path.display(), tail.join("\n")));
        }
        text
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("redis.conf")
    }

    /// Spawns the server on `self.port` and waits until it answers PING.
    fn launch(&mut self) -> Result<(), LaunchFailure> {
        let console_path = self.dir.path().join("console.log");
        let console = File::options()
            .create(true)
            .append(true)
            .open(&console_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", console_path.display()));
        let console_err = console.try_clone().unwrap_or_else(|e| {
            panic!(
                "cannot duplicate the handle of {}: {e}",
                console_path.display()
            )
        });
        let mut command = Command::new("redis-server");
        if self.config.is_some() {
            command.arg(self.config_path());
        }
        for (flag, port) in &self.extra_ports {
            command.arg(flag).arg(port.to_string());
        }
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // DEBUG SLEEP and friends let tests make Redis slow on purpose.
            .args(["--enable-debug-command", "local"])
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(console)
            .stderr(console_err);
        super::die_with_this_thread(&mut command);
        let shown = format!("{command:?}");
        let mut process = match command.spawn() {
            Ok(process) => process,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not on PATH: run scripts/install-deps (it installs \
                 redis-server and faketime); the integration tests never skip"
            ),
            Err(e) => panic!("cannot start {shown}: {e}"),
        };
        let url = self.url();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = process.try_wait() {
                let tail = self.log_tail(30);
                return Err(LaunchFailure {
                    port_in_use: tail.contains("Address already in use"),
                    message: format!("redis-server exited with {status} at start\n{shown}\n{tail}"),
                });
            }
            if ping(&url) {
                self.process = Some(process);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = process.kill();
                let _ = process.wait();
                return Err(LaunchFailure {
                    port_in_use: false,
                    message: format!(
                        "redis-server did not answer PING within {START_TIMEOUT:?}\n{shown}\n{}",
                        self.log_tail(30)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            // SIGKILL also ends a process a test has stopped with SIGSTOP.
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("cannot bind a loopback port");
    listener
        .local_addr()
        .expect("cannot read the address of a bound listener")
        .port()
}

/// Whether a server at `url` answers PING now.
fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
        return false;
    };
    let _ = connection.set_read_timeout(Some(Duration::from_millis(500)));
    matches!(
        redis::cmd("PING")
            .query::<String>(&mut connection)
            .as_deref(),
        Ok("PONG")
    )
}
