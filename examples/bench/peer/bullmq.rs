//! BullMQ measured the way the scenario measured cronlease: its own private
//! redis-server, K job schedulers on the whole second (`producer.js`), 3
//! worker processes at concurrency 50 (`worker.js`), a warm-up of 3 s, one
//! window of whole seconds of Redis time with a snapshot half a second
//! before each end (Redis's commands and CPU, the workers' CPU), the
//! workers' peak RSS read before SIGTERM, then their notes read.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::install::Installed;
use super::{Costs, PeerFigures};
use crate::Env;
use crate::clock::{format_ms, local_ms};
use crate::cluster::{Conn, check_interrupted};
use crate::common::{RedisProcess, detach_and_tie_to_parent, indent, tail};
use crate::measure::proc_cpu_s;
use crate::scrape::{parse_commandstats, proc_status_kb};
use crate::ticks::{Percentiles, ceil_to};

/// Worker processes, and jobs each runs at once.
pub const WORKERS: usize = 3;
pub const CONCURRENCY: usize = 50;

/// After the workers are ready, before the window.
const WARMUP: Duration = Duration::from_secs(3);

/// After the window's end, before the workers are stopped: jobs of the last
/// ticks still queued then are not counted as started (BullMQ's lateness
/// under load exceeds cronlease's `GRACE_MS`, so it gets more).
const GRACE_MS: i64 = 5_000;

/// How long the producer, a worker's start and a worker's stop may take.
const PRODUCER_TIMEOUT: Duration = Duration::from_secs(300);
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A `node` process; dropping it kills it.
struct NodeProcess {
    child: Child,
    log: PathBuf,
    exited: bool,
}

impl NodeProcess {
    fn start(installed: &Installed, args: &[String], log: PathBuf) -> Result<NodeProcess> {
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let mut command = Command::new("node");
        command
            .args(args)
            .current_dir(&installed.dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        detach_and_tie_to_parent(&mut command);
        let child = command.spawn().context("cannot start node")?;
        Ok(NodeProcess {
            child,
            log,
            exited: false,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for its end until `deadline`; false if it is still running.
    fn wait_until(&mut self, deadline: Instant) -> Result<bool> {
        loop {
            if self.child.try_wait()?.is_some() {
                self.exited = true;
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            check_interrupted()?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn failed(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.exited = true;
                Some(format!(
                    "node exited with {status}; {}:\n{}",
                    self.log.display(),
                    indent(&tail(&self.log, 15))
                ))
            }
            _ => None,
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Redis's command count and CPU, the workers' CPU, at one point.
struct Snapshot {
    calls: u64,
    issued_before: u64,
    issued_after: u64,
    redis_cpu: Option<f64>,
    workers_cpu: Option<f64>,
}

/// Runs BullMQ with `k` job schedulers for a window of `seconds`; its files
/// go to `dir`.
pub fn measure(
    env: &Env,
    installed: &Installed,
    k: usize,
    seconds: u64,
    dir: &Path,
) -> Result<PeerFigures> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let redis = RedisProcess::start(dir)?;
    let mut conn = Conn::new(redis.connect(Duration::from_secs(60))?);
    let port = redis.port.to_string();

    let started = Instant::now();
    let mut producer = NodeProcess::start(
        installed,
        &["producer.js".into(), port.clone(), k.to_string()],
        dir.join("producer.log"),
    )?;
    if !producer.wait_until(started + PRODUCER_TIMEOUT)? {
        bail!("the BullMQ producer did not finish within {PRODUCER_TIMEOUT:?}");
    }
    let status = producer.child.wait()?;
    if !status.success() {
        bail!(
            "the BullMQ producer exited with {status}; {}:\n{}",
            producer.log.display(),
            indent(&tail(&producer.log, 15))
        );
    }
    println!("  {}", tail(&producer.log, 1).trim());

    let mut workers = Vec::new();
    let mut outs = Vec::new();
    for i in 1..=WORKERS {
        let out = dir.join(format!("worker-{i}.tsv"));
        workers.push(NodeProcess::start(
            installed,
            &[
                "worker.js".into(),
                port.clone(),
                CONCURRENCY.to_string(),
                out.to_string_lossy().into_owned(),
            ],
            dir.join(format!("worker-{i}.log")),
        )?);
        outs.push(out);
    }
    wait_ready(&mut workers)?;
    println!(
        "  {WORKERS} BullMQ workers ready after {:.1} s (producer included)",
        started.elapsed().as_secs_f64()
    );
    sleep_watching(&mut workers, Instant::now() + WARMUP)?;

    let clk = env.clk_tck;
    let redis_pid = redis.pid();
    let worker_pids: Vec<u32> = workers.iter().map(NodeProcess::pid).collect();
    let redis_ms = |conn: &mut Conn| -> Result<i64> {
        let (secs, micros): (i64, i64) = conn.query(&redis::cmd("TIME"))?;
        Ok(secs * 1_000 + micros / 1_000)
    };
    let offset_ms = redis_ms(&mut conn)? - local_ms();
    let t0 = ceil_to(local_ms() + offset_ms + 700, 1_000);
    let t1 = t0 + seconds as i64 * 1_000;
    let at = |redis_time: i64| {
        Instant::now() + Duration::from_millis((redis_time - offset_ms - local_ms()).max(0) as u64)
    };
    sleep_watching(&mut workers, at(t0 - 500))?;
    let start = snapshot(&mut conn, redis_pid, &worker_pids, clk)?;
    println!(
        "  [BullMQ] measuring ticks {} … {}",
        format_ms(t0),
        format_ms(t1 - 1_000)
    );
    sleep_watching(&mut workers, at(t1 - 500))?;
    let end = snapshot(&mut conn, redis_pid, &worker_pids, clk)?;
    sleep_watching(&mut workers, at(t1 + GRACE_MS))?;
    let peak_rss_kb: Vec<Option<u64>> = worker_pids
        .iter()
        .map(|&pid| proc_status_kb(pid, "VmHWM"))
        .collect();
    for worker in &workers {
        let _ = kill(Pid::from_raw(worker.pid() as i32), Signal::SIGTERM);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for worker in &mut workers {
        if !worker.wait_until(deadline)? {
            println!(
                "  NOTE: a BullMQ worker did not stop within {STOP_TIMEOUT:?}; its last notes are lost"
            );
        }
    }
    drop(workers);
    drop(redis);

    let mut notes = Vec::new();
    for out in &outs {
        notes.extend(read_notes(out)?);
    }
    let own = end.issued_before - start.issued_after + 1;
    let commands = end.calls.saturating_sub(start.calls).saturating_sub(own);
    let delta = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
    let costs = Costs {
        commands,
        workers_cpu_s: delta(start.workers_cpu, end.workers_cpu),
        redis_cpu_s: delta(start.redis_cpu, end.redis_cpu),
        peak_rss_kb,
    };
    Ok(PeerFigures::new(k, seconds, (t0, t1), &notes, costs))
}

/// Waits until every worker printed `ready`.
fn wait_ready(workers: &mut [NodeProcess]) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        check_interrupted()?;
        let mut all = true;
        for worker in workers.iter_mut() {
            if let Some(failure) = worker.failed() {
                bail!("a BullMQ worker failed at start: {failure}");
            }
            let log = std::fs::read_to_string(&worker.log).unwrap_or_default();
            all &= log.lines().any(|l| l == "ready");
        }
        if all {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the BullMQ workers were not ready within {READY_TIMEOUT:?}; {}:\n{}",
                workers[0].log.display(),
                indent(&tail(&workers[0].log, 15))
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sleeps until `until`, failing if a worker exits.
fn sleep_watching(workers: &mut [NodeProcess], until: Instant) -> Result<()> {
    loop {
        check_interrupted()?;
        for worker in workers.iter_mut() {
            if let Some(failure) = worker.failed() {
                bail!("a BullMQ worker exited by itself: {failure}");
            }
        }
        let now = Instant::now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}

fn snapshot(conn: &mut Conn, redis_pid: u32, workers: &[u32], clk: f64) -> Result<Snapshot> {
    let issued_before = conn.issued;
    let info: String = conn.query(redis::cmd("INFO").arg("commandstats"))?;
    let issued_after = conn.issued;
    let workers_cpu: Option<Vec<f64>> = workers.iter().map(|&pid| proc_cpu_s(pid, clk)).collect();
    Ok(Snapshot {
        calls: parse_commandstats(&info).values().sum(),
        issued_before,
        issued_after,
        redis_cpu: proc_cpu_s(redis_pid, clk),
        workers_cpu: workers_cpu.map(|cpu| cpu.iter().sum()),
    })
}

/// One job a worker processed.
pub struct Note {
    pub scheduler: String,
    pub tick_ms: i64,
    pub called_us: i64,
    pub processed_on_ms: Option<i64>,
}

fn read_notes(path: &Path) -> Result<Vec<Note>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut notes = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [scheduler, tick, called, processed_on] = fields[..] else {
            bail!("{}: not a worker's note: {line:?}", path.display());
        };
        let (Ok(tick_ms), Ok(called_us)) = (tick.parse(), called.parse()) else {
            bail!("{}: not a worker's note: {line:?}", path.display());
        };
        notes.push(Note {
            scheduler: scheduler.to_string(),
            tick_ms,
            called_us,
            processed_on_ms: processed_on.parse().ok(),
        });
    }
    Ok(notes)
}

/// The notes of ticks in `[t0, t1)`: (distinct ticks processed, ticks
/// processed twice or more, tick → processedOn ms, tick → called µs).
pub fn tally(
    notes: &[Note],
    t0: i64,
    t1: i64,
) -> (u64, u64, Option<Percentiles>, Option<Percentiles>) {
    let mut by_tick: HashMap<(&str, i64), u32> = HashMap::new();
    let mut processed_on = Vec::new();
    let mut called = Vec::new();
    for note in notes.iter().filter(|n| n.tick_ms >= t0 && n.tick_ms < t1) {
        *by_tick
            .entry((note.scheduler.as_str(), note.tick_ms))
            .or_default() += 1;
        if let Some(at) = note.processed_on_ms {
            processed_on.push(at - note.tick_ms);
        }
        called.push(note.called_us - note.tick_ms * 1_000);
    }
    (
        by_tick.len() as u64,
        by_tick.values().filter(|&&n| n > 1).count() as u64,
        Percentiles::of(processed_on),
        Percentiles::of(called),
    )
}
