//! A scenario's cluster: its private redis-server, the bench's connection
//! to it, and the replicas, started, watched and stopped in order.

mod calls;
mod config;
mod conn;
mod job_kind;
mod outcomes;
mod replica;
mod window;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub use calls::Call;
pub use config::job_name;
pub use conn::Conn;
pub use job_kind::{JobKind, ReplicaKind};
pub use outcomes::{Rec, runs_key};
pub use window::{Snapshot, Window};

use crate::Env;
use crate::ceiling::Ceiling;
use crate::clock::{local_ms, local_us};
use crate::common::{INTERRUPTED, RedisProcess, indent, tail};
use crate::measure::proc_cpu_s;
use crate::replica_stats::{LogCounts, ReplicaStats};
use crate::scrape::proc_status_kb;
use crate::ticks::Schedule;
pub use config::{PLACEMENT_GROUPS, Placement};
use config::{check_config, jobs_toml};
use replica::{Launch, Replica};

pub const KEY_PREFIX: &str = "bench";

/// After every replica is ready, before the first window.
const WARMUP: Duration = Duration::from_secs(3);

/// How long replicas may take to be ready (10,000 jobs included).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How long stopping replicas may take after SIGTERM (`shutdown_grace` 5 s
/// plus `kill_grace` 1 s plus slack).
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// How the cluster ended.
pub struct End {
    pub replicas: Vec<ReplicaStats>,
}

pub struct Cluster<'a> {
    env: &'a Env,
    name: String,
    dir: PathBuf,
    redis: RedisProcess,
    pub conn: Conn,
    pub replicas: Vec<Replica>,
    jobs_toml: String,
    pub jobs: usize,
    /// Lines added to `[daemon]` of every replica's config (the soak's
    /// `history`); empty for the other scenarios, which keep the defaults.
    daemon_lines: String,
    /// Redis time − local time, µs (the bench, the replicas and Redis share
    /// the host's clock: near 0).
    pub offset_us: i64,
    checked: bool,
    /// VmHWM of each replica before it was first scraped.
    hwm_before_scrape: Vec<Option<u64>>,
}

impl<'a> Cluster<'a> {
    pub fn start(env: &'a Env, name: &str, jobs: usize, schedule: Schedule) -> Result<Cluster<'a>> {
        Cluster::start_with_daemon_lines(env, name, jobs, schedule, "")
    }

    /// [`Cluster::start`], with `daemon_lines` (TOML, one setting a line)
    /// added to `[daemon]` of every replica's config.
    pub fn start_with_daemon_lines(
        env: &'a Env,
        name: &str,
        jobs: usize,
        schedule: Schedule,
        daemon_lines: &str,
    ) -> Result<Cluster<'a>> {
        Cluster::start_placed(env, name, jobs, schedule, daemon_lines, Placement::None)
    }

    /// [`Cluster::start_with_daemon_lines`], with `jobs` jobs on `schedule`
    /// placed as `placement` says.
    pub fn start_placed(
        env: &'a Env,
        name: &str,
        jobs: usize,
        schedule: Schedule,
        daemon_lines: &str,
        placement: Placement,
    ) -> Result<Cluster<'a>> {
        let dir = env.work.join(name);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let redis = RedisProcess::start(&dir)?;
        let conn = Conn::new(redis.connect(Duration::from_secs(60))?);
        let mut cluster = Cluster {
            env,
            name: name.to_string(),
            dir,
            redis,
            conn,
            replicas: Vec::new(),
            jobs_toml: jobs_toml(jobs, schedule, env.kind, placement),
            jobs,
            daemon_lines: format!("{daemon_lines}{}", placement.daemon_lines()),
            offset_us: 0,
            checked: false,
            hwm_before_scrape: Vec::new(),
        };
        cluster.offset_us = cluster.measure_offset_us()?;
        Ok(cluster)
    }

    /// Redis time − local time in µs, from the `TIME` with the shortest
    /// round trip of five.
    fn measure_offset_us(&mut self) -> Result<i64> {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..5 {
            let before = local_us();
            let (secs, micros): (i64, i64) = self.conn.query(&redis::cmd("TIME"))?;
            let after = local_us();
            let rtt = after - before;
            let offset = secs * 1_000_000 + micros - (before + after) / 2;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, offset));
            }
        }
        Ok(best.expect("five measurements").1)
    }

    pub fn redis_time(&mut self) -> Result<i64> {
        let (secs, micros): (i64, i64) = self.conn.query(&redis::cmd("TIME"))?;
        Ok(secs * 1_000 + micros / 1_000)
    }

    pub fn redis_pid(&self) -> u32 {
        self.redis.pid()
    }

    /// Starts `n` more replicas and waits until every one is ready and has
    /// said where its metrics are.
    pub fn add_replicas(&mut self, n: usize) -> Result<()> {
        let first = self.replicas.len();
        let program = self.env.kind.replica_program()?;
        for i in first..first + n {
            let name = format!("bench-{}", i + 1);
            let config = self.write_config(&name)?;
            if !self.checked {
                check_config(&config, self.env.kind)?;
                self.checked = true;
            }
            let replica = Replica::start(Launch {
                program: &program,
                config: &config,
                name: &name,
                dir: &self.dir,
                rust_log: &self.env.rust_log,
            })?;
            self.replicas.push(replica);
            self.hwm_before_scrape.push(None);
        }
        self.wait_ready(first)
    }

    /// Waits until the replicas from index `first` on are ready and have
    /// said where their metrics are.
    fn wait_ready(&mut self, first: usize) -> Result<()> {
        let started = Instant::now();
        let deadline = started + READY_TIMEOUT;
        loop {
            check_interrupted()?;
            let mut pending = Vec::new();
            for replica in &mut self.replicas[first..] {
                replica.check_ready()?;
                if !(replica.ready && replica.port.is_some()) {
                    pending.push(replica.name.clone());
                }
            }
            if pending.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let replica = self
                    .replicas
                    .iter()
                    .find(|r| r.name == pending[0])
                    .expect("pending names a replica");
                bail!(
                    "{} not ready within {READY_TIMEOUT:?} (ready: {}, metrics port: {:?}; the \
                     replicas' RUST_LOG must let `metrics listening on` through); last lines \
                     of {}:\n{}",
                    pending.join(", "),
                    replica.ready,
                    replica.port,
                    replica.log.display(),
                    indent(&tail(&replica.log, 15))
                );
            }
            // Often enough for the start-up time (spawn → ready).
            std::thread::sleep(Duration::from_millis(10));
        }
        let names: Vec<String> = self.replicas[first..]
            .iter()
            .map(|r| {
                format!(
                    "{} (pid {}, metrics :{})",
                    r.name,
                    r.pid(),
                    r.port.unwrap_or(0)
                )
            })
            .collect();
        println!(
            "  ready after {:.1} s: {}",
            started.elapsed().as_secs_f64(),
            names.join(", ")
        );
        Ok(())
    }

    pub fn warm_up(&mut self) -> Result<()> {
        let until = Instant::now() + WARMUP;
        while Instant::now() < until {
            check_interrupted()?;
            self.check_alive()?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Fails when a replica that should be running has exited.
    fn check_alive(&mut self) -> Result<()> {
        for replica in &mut self.replicas {
            if !replica.killed && replica.poll() {
                bail!(
                    "{} exited by itself with {}; last lines of {}:\n{}",
                    replica.name,
                    replica.exit.expect("polled"),
                    replica.log.display(),
                    indent(&tail(&replica.log, 15))
                );
            }
        }
        Ok(())
    }

    /// Sleeps until `target` of Redis time, watching the replicas.
    pub fn sleep_until_redis(&mut self, target: i64, what: &str) -> Result<()> {
        let mut next_progress = local_ms() + 10_000;
        loop {
            check_interrupted()?;
            self.check_alive()?;
            let now = local_ms() + self.offset_us / 1_000;
            if now >= target {
                return Ok(());
            }
            if local_ms() >= next_progress {
                println!("    {what}: {:.0} s to go", (target - now) as f64 / 1000.0);
                next_progress += 10_000;
            }
            std::thread::sleep(Duration::from_millis((target - now).clamp(1, 100) as u64));
        }
    }

    fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&i| self.replicas[i].exit.is_none())
            .collect()
    }

    pub fn replica_stats(&mut self, i: usize) -> ReplicaStats {
        let replica = &mut self.replicas[i];
        let pid = replica.pid();
        // A reaped pid may belong to another process by now.
        let alive = !replica.poll();
        ReplicaStats {
            name: replica.name.clone(),
            pid,
            cpu_s: proc_cpu_s(pid, self.env.clk_tck).filter(|_| alive),
            hwm_kb: proc_status_kb(pid, "VmHWM").filter(|_| alive),
            rss_kb: proc_status_kb(pid, "VmRSS").filter(|_| alive),
            hwm_before_scrape_kb: self.hwm_before_scrape[i],
            exit: String::new(),
            log: LogCounts::default(),
        }
    }

    /// Waits until `until` (Redis time), reads every replica's CPU and
    /// memory, and stops them with SIGTERM.
    pub fn stop(&mut self, until: i64) -> Result<End> {
        self.sleep_until_redis(until, "last outcomes")?;
        let mut stats: Vec<ReplicaStats> = (0..self.replicas.len())
            .map(|i| self.replica_stats(i))
            .collect();
        for replica in &self.replicas {
            replica.sigterm();
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for (replica, stats) in self.replicas.iter_mut().zip(&mut stats) {
            let was_killed = replica.killed;
            stats.exit = match replica.wait_until(deadline) {
                _ if was_killed => "killed (SIGKILL)".to_string(),
                Some(status) if status.success() => "0 after SIGTERM".to_string(),
                Some(status) => format!("{status} after SIGTERM"),
                None => {
                    replica.kill9();
                    format!("did not stop within {STOP_TIMEOUT:?}: killed")
                }
            };
        }
        for (replica, stats) in self.replicas.iter().zip(&mut stats) {
            stats.log = LogCounts::read(&replica.log);
        }
        Ok(End { replicas: stats })
    }

    /// Every outcome of every job with a stream id from `from_ms` on.
    pub fn read_outcomes(&mut self, from_ms: i64) -> Result<Vec<Vec<Rec>>> {
        outcomes::read_outcomes(&mut self.conn, self.jobs, from_ms)
    }

    /// Every handler call the replicas noted (embedded replicas: see
    /// `JobKind::notes_handler_calls`), read after they stopped.
    pub fn read_calls(&self) -> Result<Vec<Call>> {
        let mut all = Vec::new();
        for replica in &self.replicas {
            all.extend(calls::read_calls(
                &self.state_dir(&replica.name),
                &replica.name,
            )?);
        }
        Ok(all)
    }

    /// The ceiling against this cluster's redis-server (the replicas are
    /// stopped by now).
    pub fn ceiling(&mut self) -> Result<Ceiling> {
        Ceiling::measure(&mut self.conn, self.redis.port, &self.dir)
    }
}

pub fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}
