//! A measured window of ticks and the two snapshots around it: Redis's
//! command counts, the replicas' claims (`/metrics`) and CPU.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result};

use super::Cluster;
use crate::clock::format_ms;
use crate::measure::proc_cpu_s;
use crate::scrape::{metrics_agent, parse_commandstats, proc_status_kb, scrape_claims};
use crate::ticks::ceil_to;

/// The figures of one point in time.
pub struct Snapshot {
    /// `INFO commandstats`: calls by command.
    pub commands: BTreeMap<String, u64>,
    /// Commands the bench had sent before, and after, its INFO.
    pub issued_before_info: u64,
    pub issued_after_info: u64,
    /// Per replica index: claims by result (None: not running).
    pub claims: Vec<Option<BTreeMap<String, u64>>>,
    pub cpu: Vec<Option<f64>>,
    /// Each replica's CPU again once its `/metrics` were scraped: the
    /// difference is what the scrape cost it, its other work meanwhile
    /// included.
    pub cpu_after_scrape: Vec<Option<f64>>,
    /// When `cpu` and `cpu_after_scrape` were read.
    pub cpu_read: Instant,
    pub scraped: Instant,
    pub redis_cpu: Option<f64>,
}

/// A measured window: ticks `[t0, t1)`, snapshots at `t0 − 500` and
/// `t1 − 500` (between ticks).
pub struct Window {
    pub label: String,
    pub replicas: Vec<usize>,
    pub names: Vec<String>,
    pub t0: i64,
    pub t1: i64,
    pub start: Snapshot,
    pub end: Snapshot,
    /// How long the two snapshots took: INFO is read first, then every
    /// replica's /metrics, so a slow scrape shifts the claims' window.
    pub snapshot_ms: [u64; 2],
}

impl Cluster<'_> {
    /// Measures `seconds` whole seconds of ticks.
    pub fn window(&mut self, label: &str, seconds: u64) -> Result<Window> {
        self.window_aligned(label, seconds, 1_000, 0)
    }

    /// Measures `seconds` whole seconds of ticks from `lead_ms` before a
    /// multiple of `align_ms` of Redis time (the burst scenario's windows
    /// start between bursts, so that the snapshots' scrapes do not meet
    /// one).
    pub fn window_aligned(
        &mut self,
        label: &str,
        seconds: u64,
        align_ms: i64,
        lead_ms: i64,
    ) -> Result<Window> {
        let now = self.redis_time()?;
        let t0 = ceil_to(now + 700 + lead_ms, align_ms) - lead_ms;
        let t1 = t0 + seconds as i64 * 1_000;
        self.sleep_until_redis(t0 - 500, label)?;
        let taken = Instant::now();
        let start = self.snapshot()?;
        let start_took = taken.elapsed();
        println!(
            "  [{label}] measuring ticks {} … {} ({} replicas; snapshot took {} ms)",
            format_ms(t0),
            format_ms(t1 - 1_000),
            self.live().len(),
            taken.elapsed().as_millis()
        );
        self.sleep_until_redis(t1 - 500, label)?;
        let taken = Instant::now();
        let end = self.snapshot()?;
        let end_took = taken.elapsed();
        println!(
            "  [{label}] window done (snapshot took {} ms)",
            end_took.as_millis()
        );
        Ok(Window {
            label: label.to_string(),
            replicas: self.live(),
            names: self.replicas.iter().map(|r| r.name.clone()).collect(),
            t0,
            t1,
            start,
            end,
            snapshot_ms: [start_took.as_millis() as u64, end_took.as_millis() as u64],
        })
    }

    fn snapshot(&mut self) -> Result<Snapshot> {
        for i in self.live() {
            if self.hwm_before_scrape[i].is_none() {
                self.hwm_before_scrape[i] = proc_status_kb(self.replicas[i].pid(), "VmHWM");
            }
        }
        let issued_before_info = self.conn.issued;
        let info: String = self.conn.query(redis::cmd("INFO").arg("commandstats"))?;
        let issued_after_info = self.conn.issued;
        let commands = parse_commandstats(&info);
        // CPU next, before the scrapes: rendering /metrics costs CPU too.
        let clk = self.env.clk_tck;
        let cpu = self
            .replicas
            .iter()
            .map(|r| r.running_pid().and_then(|pid| proc_cpu_s(pid, clk)))
            .collect();
        let redis_cpu = proc_cpu_s(self.redis.pid(), clk);
        let cpu_read = Instant::now();
        let claims = self.scrape_all()?;
        let cpu_after_scrape = self
            .replicas
            .iter()
            .map(|r| r.running_pid().and_then(|pid| proc_cpu_s(pid, clk)))
            .collect();
        let scraped = Instant::now();
        Ok(Snapshot {
            commands,
            issued_before_info,
            issued_after_info,
            claims,
            cpu,
            cpu_after_scrape,
            cpu_read,
            scraped,
            redis_cpu,
        })
    }

    /// Every running replica's claims, scraped in parallel; `None` for the
    /// others.
    fn scrape_all(&self) -> Result<Vec<Option<BTreeMap<String, u64>>>> {
        let ports: Vec<Option<u16>> = self
            .replicas
            .iter()
            .map(|r| if r.exit.is_none() { r.port } else { None })
            .collect();
        let agent = metrics_agent();
        let scraped: Vec<Option<Result<BTreeMap<String, u64>>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = ports
                .iter()
                .map(|port| {
                    port.map(|port| {
                        let agent = &agent;
                        scope.spawn(move || scrape_claims(agent, port))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("scrape thread panicked")))
                    })
                })
                .collect()
        });
        let mut claims = Vec::new();
        for (i, result) in scraped.into_iter().enumerate() {
            claims.push(match result {
                None => None,
                Some(result) => Some(result.with_context(|| {
                    format!("cannot read the metrics of {}", self.replicas[i].name)
                })?),
            });
        }
        Ok(claims)
    }
}
