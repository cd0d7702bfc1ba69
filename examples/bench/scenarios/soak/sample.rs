//! One sample of the soak: Redis's keys by kind, its memory, the outcomes
//! recorded and every replica's RSS; and the table of the samples.

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::SOAK_SAMPLE_EVERY_MS;
use super::keys::{DEDUP_KEY_KINDS, job_key_part, key_kind, key_kinds};
use crate::cluster::{Cluster, Conn, KEY_PREFIX, job_name, runs_key};
use crate::common::print_table;
use crate::measure::info_field;
use crate::scrape::proc_status_kb;

/// The parts of `INFO memory` the soak keeps beside `used_memory`: the data
/// set, and the overhead (clients' buffers, scripts, the key tables) that
/// moves without the data.
const MEMORY_PARTS: [&str; 5] = [
    "used_memory_dataset",
    "used_memory_overhead",
    "mem_clients_normal",
    "used_memory_scripts",
    "used_memory_startup",
];

/// The elapsed times (ms) of the soak's samples: 0, every
/// [`SOAK_SAMPLE_EVERY_MS`], and the end when it is not one of those.
pub fn soak_sample_offsets(seconds: u64) -> Vec<i64> {
    let end = seconds as i64 * 1_000;
    let mut offsets: Vec<i64> = (0..=end).step_by(SOAK_SAMPLE_EVERY_MS as usize).collect();
    if offsets.last() != Some(&end) {
        offsets.push(end);
    }
    offsets
}

/// What Redis and the replicas held at one point of the soak.
pub struct SoakSample {
    /// Since the first sample, ms of Redis time.
    pub elapsed_ms: i64,
    /// `DBSIZE`.
    pub keys: u64,
    /// The keys `SCAN` returned, by [`key_kind`]. A key created or expired
    /// during the scan may be counted or not, so the sum can differ from
    /// `keys` by a few.
    keys_by_kind: BTreeMap<&'static str, u64>,
    /// The most dedup keys ([`DEDUP_KEY_KINDS`]) one job had.
    pub dedup_keys_most_per_job: u64,
    /// `used_memory` of `INFO memory`, bytes.
    pub used_memory: u64,
    /// The parts of `used_memory` in [`MEMORY_PARTS`] (for the JSON): what
    /// moved when `used_memory` did.
    memory_parts: BTreeMap<&'static str, u64>,
    redis_rss_kb: Option<u64>,
    /// The sum of the outcome streams' `entries-added` (Redis 7): every
    /// outcome recorded since the start, whatever `history` trimmed since.
    /// `None` when Redis does not report it.
    pub outcomes: Option<u64>,
    /// Per replica (in start order) its VmRSS; `None` once it exited.
    rss_kb: Vec<Option<u64>>,
}

/// The keys of one `SCAN` of the whole keyspace.
struct KeyScan {
    by_kind: BTreeMap<&'static str, u64>,
    dedup_most_per_job: u64,
}

impl SoakSample {
    /// `DBSIZE`, a `SCAN` of the whole keyspace, `INFO memory`, the outcome
    /// streams' `entries-added`, and every replica's and redis-server's RSS.
    pub fn take(cluster: &mut Cluster, elapsed_ms: i64) -> Result<SoakSample> {
        let keys: u64 = cluster.conn.query(&redis::cmd("DBSIZE"))?;
        let scan = scan_keys(&mut cluster.conn)?;
        let info: String = cluster.conn.query(redis::cmd("INFO").arg("memory"))?;
        let used_memory =
            info_field(&info, "used_memory").context("INFO memory has no used_memory")?;
        let memory_parts = MEMORY_PARTS
            .iter()
            .filter_map(|&name| Some((name, info_field(&info, name)?)))
            .collect();
        let outcomes = outcomes_recorded(&mut cluster.conn, cluster.jobs)?;
        let rss_kb = cluster
            .replicas
            .iter()
            .map(|r| r.running_pid().and_then(|pid| proc_status_kb(pid, "VmRSS")))
            .collect();
        Ok(SoakSample {
            elapsed_ms,
            keys,
            keys_by_kind: scan.by_kind,
            dedup_keys_most_per_job: scan.dedup_most_per_job,
            used_memory,
            memory_parts,
            redis_rss_kb: proc_status_kb(cluster.redis_pid(), "VmRSS"),
            outcomes,
            rss_kb,
        })
    }

    pub fn kind(&self, kind: &str) -> u64 {
        self.keys_by_kind.get(kind).copied().unwrap_or(0)
    }

    pub fn json(&self, names: &[String]) -> Value {
        json!({
            "elapsed_s": self.elapsed_ms as f64 / 1000.0,
            "keys": self.keys,
            "keys_by_kind": self.keys_by_kind,
            "dedup_keys_most_per_job": self.dedup_keys_most_per_job,
            "used_memory_bytes": self.used_memory,
            "info_memory": self.memory_parts,
            "redis_rss_kb": self.redis_rss_kb,
            "outcomes_recorded": self.outcomes,
            "replica_rss_kb": names
                .iter()
                .zip(&self.rss_kb)
                .map(|(name, kb)| json!({"replica": name, "rss_kb": kb}))
                .collect::<Vec<_>>(),
        })
    }
}

/// Every key by [`key_kind`], and the most dedup keys of one job.
fn scan_keys(conn: &mut Conn) -> Result<KeyScan> {
    let mut by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut dedup_keys_by_job: HashMap<String, u64> = HashMap::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, names): (u64, Vec<String>) =
            conn.query(redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(1_000))?;
        for name in &names {
            let kind = key_kind(name);
            *by_kind.entry(kind).or_default() += 1;
            if DEDUP_KEY_KINDS.contains(&kind)
                && let Some((job, _)) = name
                    .strip_prefix(KEY_PREFIX)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .and_then(job_key_part)
            {
                *dedup_keys_by_job.entry(job.to_string()).or_default() += 1;
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(KeyScan {
        by_kind,
        dedup_most_per_job: dedup_keys_by_job.values().copied().max().unwrap_or(0),
    })
}

/// The sum over the jobs of their outcome stream's `entries-added`
/// (`XINFO STREAM`): every outcome recorded so far, however many `history`
/// trimmed. `None` when this Redis does not report it (before 7.0); a job
/// without a stream has recorded nothing.
fn outcomes_recorded(conn: &mut Conn, jobs: usize) -> Result<Option<u64>> {
    let mut total = 0;
    let batch = 500;
    for first in (0..jobs).step_by(batch) {
        let last = (first + batch).min(jobs);
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for n in first..last {
            pipe.cmd("XINFO").arg("STREAM").arg(runs_key(n));
        }
        let replies: Vec<redis::RedisResult<HashMap<String, redis::Value>>> = conn
            .query_pipe(&pipe, last - first)
            .context("cannot read the outcome streams' XINFO")?;
        for (n, reply) in (first..last).zip(replies) {
            let fields = match reply {
                Ok(fields) => fields,
                Err(e) if e.to_string().contains("no such key") => continue,
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("XINFO STREAM of job {} failed", job_name(n)));
                }
            };
            let Some(added) = fields.get("entries-added") else {
                return Ok(None);
            };
            total += redis::from_redis_value_ref::<u64>(added)
                .with_context(|| format!("entries-added of job {}", job_name(n)))?;
        }
    }
    Ok(Some(total))
}

/// The soak's table: one row per sample, one column per key kind that
/// occurs in any sample.
pub fn print_soak_samples(samples: &[SoakSample], names: &[String]) {
    let kinds: Vec<&str> = key_kinds()
        .into_iter()
        .filter(|kind| samples.iter().any(|s| s.kind(kind) > 0))
        .collect();
    let mut header = vec![
        "elapsed s".to_string(),
        "outcomes".to_string(),
        "keys".to_string(),
    ];
    header.extend(kinds.iter().map(|kind| kind.to_string()));
    header.push("used_memory MB".to_string());
    header.extend(names.iter().map(|name| format!("{name} RSS MB")));
    let first_outcomes = samples.first().and_then(|s| s.outcomes);
    let rows: Vec<Vec<String>> = samples
        .iter()
        .map(|s| {
            let mut row = vec![
                format!("{}", s.elapsed_ms / 1_000),
                match (first_outcomes, s.outcomes) {
                    (Some(a), Some(b)) => format!("+{}", b.saturating_sub(a)),
                    _ => "-".to_string(),
                },
                s.keys.to_string(),
            ];
            row.extend(kinds.iter().map(|kind| s.kind(kind).to_string()));
            row.push(format!("{:.2}", megabytes(s.used_memory)));
            row.extend(s.rss_kb.iter().map(|&kb| kb_as_megabytes(kb)));
            row
        })
        .collect();
    print_table(&header, &rows);
    println!(
        "  (outcomes: recorded since the first sample; keys by kind from a SCAN, which may \
         differ from DBSIZE by the keys written or expired meanwhile)"
    );
}

pub fn megabytes(bytes: u64) -> f64 {
    bytes as f64 / 1024.0 / 1024.0
}

/// A `/proc` kB figure in MB, one decimal; `-` when it could not be read.
fn kb_as_megabytes(kb: Option<u64>) -> String {
    kb.map_or("-".to_string(), |kb| format!("{:.1}", kb as f64 / 1024.0))
}
