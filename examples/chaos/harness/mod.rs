//! The cluster under test: the private Redis, one proxy and one replica per
//! "host", and what happens to the processes: start, wait until ready,
//! watch for deaths, stop in order. Children are spawned from the main
//! thread only: the "parent" of `PR_SET_PDEATHSIG` is the spawning thread.

pub mod config;
mod in_redis;
mod replica;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::Signal;
use serde_json::json;

use crate::common::{DurableRedis, INTERRUPTED};
use crate::faults::{Fault, FaultKind};
use crate::proxy::{Mode, Proxy};
use crate::records::Record;
use crate::rng::Rng;
use crate::sink::Sink;
use crate::wall::{now_ms, rfc3339};

pub use in_redis::held_json;
pub use replica::{Launcher, Replica, read_from};

/// How long a replica may take to exit after SIGTERM (`shutdown_grace` 3 s
/// + `kill_grace` 1 s + slack).
const STOP_TIMEOUT: Duration = Duration::from_secs(8);

/// The longest wait, after the last fault, for the notification events
/// written so far to be delivered: a first retry waits 5 s, a second 10 s.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Harness {
    pub out: PathBuf,
    pub launcher: Launcher,
    pub effects: PathBuf,
    pub replicas: Vec<Replica>,
    pub redis: DurableRedis,
    pub proxies: Vec<Proxy>,
    /// The receiver of the replicas' webhook channel.
    pub sink: Sink,
    /// Dropped after the replicas, Redis and the proxies, so that it stops
    /// after the processes are gone.
    runtime: tokio::runtime::Runtime,
    pub rng: Rng,
    pub kinds: Vec<(FaultKind, u64)>,
    pub faults: Vec<Fault>,
    fault_log: File,
    /// Outcome records read just before Redis was wiped.
    pub snapshots: Vec<Record>,
    /// When every replica was first ready, and when the shutdown began.
    pub ready_ms: i64,
    pub shutdown_ms: i64,
    /// When the wait for notifications to settle began: events written
    /// before it had their chance to be delivered.
    pub settle_from_ms: i64,
    /// Replicas that died by themselves, did not exit 0 on SIGTERM, or
    /// did not take a reload (E).
    pub exit_problems: Vec<String>,
    pub started: Instant,
}

/// Whether the first Ctrl-C (or SIGTERM) has come: stop injecting, stop
/// the replicas in order, check.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

impl Harness {
    /// Redis, then `replicas` proxies and replicas, each ready.
    pub fn start(
        replicas: u32,
        out: &Path,
        launcher: Launcher,
        seed: u64,
        kinds: Vec<(FaultKind, u64)>,
    ) -> Result<Harness> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the proxies' runtime")?;
        let redis = DurableRedis::start(&out.join("redis"))?;
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
        let sink = Sink::start(&runtime, &out.join("notifications.jsonl"))?;
        println!("webhook sink: {}", sink.url());
        let mut harness = Harness {
            out: out.to_path_buf(),
            launcher,
            effects,
            replicas: Vec::new(),
            redis,
            proxies: Vec::new(),
            sink,
            runtime,
            rng: Rng(seed),
            kinds,
            faults: Vec::new(),
            fault_log,
            snapshots: Vec::new(),
            ready_ms: 0,
            shutdown_ms: 0,
            settle_from_ms: 0,
            exit_problems: Vec::new(),
            started: Instant::now(),
        };
        for n in 1..=replicas {
            harness.add_replica(&format!("r{n}"))?;
        }
        harness.check_config()?;
        harness.start_replicas()?;
        harness.ready_ms = now_ms();
        harness.started = Instant::now();
        Ok(harness)
    }

    /// A proxy and a replica (its directory and config), not started.
    fn add_replica(&mut self, name: &str) -> Result<()> {
        let proxy = Proxy::start(&self.runtime, self.redis.addr())?;
        let dir = self.out.join(name);
        std::fs::create_dir_all(&dir)?;
        let replica = Replica {
            config: dir.join("jobs.toml"),
            log: self.out.join(format!("{name}.log")),
            dir,
            name: name.to_string(),
            proxy_port: proxy.port,
            sink_url: self.sink.url(),
            skew: None,
            quick_timeout: false,
            process: None,
        };
        replica.write_config(&self.effects)?;
        self.proxies.push(proxy);
        self.replicas.push(replica);
        Ok(())
    }

    /// Starts every replica, then waits for each to be ready.
    fn start_replicas(&mut self) -> Result<()> {
        for replica in &mut self.replicas {
            replica.spawn(&self.launcher)?;
        }
        for replica in &mut self.replicas {
            replica.wait_ready()?;
            println!(
                "{} ready (pid {}), via proxy 127.0.0.1:{}, config {}, log {}",
                replica.name,
                replica.pid().unwrap_or(0),
                replica.proxy_port,
                replica.config.display(),
                replica.log.display()
            );
        }
        Ok(())
    }

    /// `cronlease check` on the first config, so a bad one is reported
    /// before any daemon starts.
    fn check_config(&self) -> Result<()> {
        let config = &self.replicas[0].config;
        let output = Command::new(&self.launcher.cronlease)
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

    /// Waits, with the replicas running undisturbed, until every
    /// notification event written so far has left Redis (an entry is
    /// deleted once delivered), at most `SETTLE_TIMEOUT`.
    fn settle_notifications(&mut self) {
        let from = now_ms();
        self.settle_from_ms = from;
        println!("\nwaiting for the notifications written so far to be delivered…");
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let left = self.events_written_before(from);
            if left == Some(0) {
                let (received, _) = self.sink.progress();
                println!(
                    "  settled after {:.1} s ({received} requests received)",
                    (now_ms() - from) as f64 / 1_000.0
                );
                return;
            }
            if Instant::now() >= deadline {
                let left = left.map_or_else(|| "unknown".to_string(), |n| n.to_string());
                println!("  still undelivered after {SETTLE_TIMEOUT:?}: {left} events");
                return;
            }
            if !self.nap(Duration::from_millis(250)) {
                return;
            }
        }
    }

    /// Seconds since every replica was first ready.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Restarts replica `i` after it exited, and waits until it is ready.
    pub fn respawn(&mut self, i: usize) -> Result<()> {
        let replica = &mut self.replicas[i];
        replica.spawn(&self.launcher)?;
        replica.wait_ready()
    }

    /// Sleeps `duration` in small steps, watching for replicas that die by
    /// themselves (recorded, then restarted). False when interrupted.
    pub fn nap(&mut self, duration: Duration) -> bool {
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

    /// Like `nap`, but never treats the stopped replica as dead, and
    /// returns at once when interrupted (the caller resumes it).
    pub fn nap_stopped(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        while Instant::now() < until && !interrupted() {
            std::thread::sleep(Duration::from_millis(20));
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
                    kind: FaultKind::UnexpectedExit,
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

    /// Appends the fault to `faults.jsonl` (at once, so that it survives a
    /// crash of the suite) and to the list the checker gets.
    pub fn log_fault(&mut self, fault: Fault) {
        let line = fault.to_json(self.faults.len() + 1);
        let _ = writeln!(self.fault_log, "{line}");
        let _ = self.fault_log.flush();
        self.faults.push(fault);
    }

    /// SIGTERM, then waits for the exit; anything but 0 within the timeout
    /// is recorded (and the process killed). Returns the status shown.
    pub fn stop_replica(&mut self, i: usize) -> String {
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

    /// The end: proxies restored, the notifications given their chance,
    /// every replica stopped with SIGTERM.
    pub fn shutdown(&mut self) {
        for proxy in &self.proxies {
            proxy.set(Mode::Pass);
        }
        for replica in &self.replicas {
            replica.signal(Signal::SIGCONT);
        }
        self.watch_replicas();
        self.settle_notifications();
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
}
