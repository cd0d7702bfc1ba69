//! One replica process: started with its own log and `NOTIFY_SOCKET`,
//! ready when it says so, stopped with SIGTERM or killed.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{detach_and_tie_to_parent, indent, tail};

/// How a replica is started: its program, config and name, where its
/// files go, and its `RUST_LOG`.
pub struct Launch<'a> {
    pub program: &'a Path,
    pub config: &'a Path,
    pub name: &'a str,
    pub dir: &'a Path,
    pub rust_log: &'a str,
}

/// One `cronlease run` process; dropping it kills it.
pub struct Replica {
    pub name: String,
    child: Child,
    pub log: PathBuf,
    /// Its `NOTIFY_SOCKET`: `READY=1` arrives here.
    notify: UnixDatagram,
    pub ready: bool,
    /// When it was spawned, and how long after that it was first seen
    /// ready (polled every 10 ms while the bench waits for it).
    spawned: Instant,
    pub ready_after: Option<Duration>,
    pub port: Option<u16>,
    /// Killed on purpose (the takeover), not a failure.
    pub killed: bool,
    /// Set once reaped; its pid is never signalled after that.
    pub exit: Option<ExitStatus>,
}

impl Replica {
    pub fn start(launch: Launch) -> Result<Replica> {
        let Launch {
            program,
            config,
            name,
            dir,
            rust_log,
        } = launch;
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out
            .try_clone()
            .with_context(|| format!("cannot duplicate the handle of {}", log.display()))?;
        let socket_path = dir.join(format!("{name}.notify"));
        let _ = std::fs::remove_file(&socket_path);
        let notify = UnixDatagram::bind(&socket_path)
            .with_context(|| format!("cannot bind {}", socket_path.display()))?;
        notify
            .set_nonblocking(true)
            .context("cannot make the notify socket non-blocking")?;
        let mut command = Command::new(program);
        command
            .arg("run")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("RUST_LOG", rust_log)
            .env("NO_COLOR", "1")
            .env("NOTIFY_SOCKET", &socket_path)
            // Symbolizing a backtrace per panic would weigh on CPU and RSS.
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .env_remove("CRONLEASE_CONFIG");
        detach_and_tie_to_parent(&mut command);
        let spawned = Instant::now();
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {} run", program.display()))?;
        Ok(Replica {
            name: name.to_string(),
            child,
            log,
            notify,
            ready: false,
            spawned,
            ready_after: None,
            port: None,
            killed: false,
            exit: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its pid while it has not been reaped.
    pub fn running_pid(&self) -> Option<u32> {
        self.exit.is_none().then(|| self.pid())
    }

    /// Reads what the replica has said so far: `READY=1` on the notify
    /// socket or `ready` in its log; the metrics port from its log.
    pub fn check_ready(&mut self) -> Result<()> {
        if self.poll() {
            bail!(
                "{} exited with {} before it was ready; last lines of {}:\n{}",
                self.name,
                self.exit.expect("polled"),
                self.log.display(),
                indent(&tail(&self.log, 15))
            );
        }
        let mut buffer = [0u8; 4096];
        while let Ok(n) = self.notify.recv(&mut buffer) {
            let message = String::from_utf8_lossy(&buffer[..n]);
            if message.lines().any(|l| l == "READY=1") {
                self.ready = true;
            }
        }
        self.note_ready_time();
        if self.ready && self.port.is_some() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        for line in text.lines() {
            if line.contains("cronlease::daemon: ready") {
                self.ready = true;
            }
            if self.port.is_none()
                && let Some(rest) = line.split("metrics listening on http://").nth(1)
                && let Some(addr) = rest.split('/').next()
                && let Ok(addr) = addr.parse::<SocketAddr>()
            {
                self.port = Some(addr.port());
            }
        }
        self.note_ready_time();
        Ok(())
    }

    /// The first time it is seen ready, how long after its spawn.
    fn note_ready_time(&mut self) {
        if self.ready && self.ready_after.is_none() {
            self.ready_after = Some(self.spawned.elapsed());
        }
    }

    /// Whether the process has exited, reaping it if so.
    pub fn poll(&mut self) -> bool {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit.is_some()
    }

    pub fn sigterm(&self) {
        if self.exit.is_none() {
            let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGTERM);
        }
    }

    pub fn kill9(&mut self) {
        if self.exit.is_none() {
            self.killed = true;
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    pub fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        while !self.poll() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.exit
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}
