//! The jobs' outcome streams, as the figures need them.

use std::collections::HashMap;

use anyhow::{Context, Result};

use super::{Conn, KEY_PREFIX, job_name};

/// One outcome entry, the fields the bench needs.
pub struct Rec {
    pub tick: i64,
    pub started_ms: Option<i64>,
    /// When the replica saw the run end (its clock, as Redis time).
    pub finished_ms: Option<i64>,
    pub status: String,
    pub replica: String,
}

/// The outcome stream of job number `n`.
pub fn runs_key(n: usize) -> String {
    format!("{KEY_PREFIX}:{{{}}}:runs", job_name(n))
}

/// Every outcome of each of the first `jobs` jobs with a stream id from
/// `from_ms` on, one list per job.
pub fn read_outcomes(conn: &mut Conn, jobs: usize, from_ms: i64) -> Result<Vec<Vec<Rec>>> {
    let mut all = Vec::with_capacity(jobs);
    let batch = 500;
    for first in (0..jobs).step_by(batch) {
        let mut pipe = redis::pipe();
        let last = (first + batch).min(jobs);
        for n in first..last {
            pipe.cmd("XRANGE")
                .arg(runs_key(n))
                .arg(from_ms.to_string())
                .arg("+");
        }
        let streams: Vec<Vec<(String, Vec<String>)>> = conn
            .query_pipe(&pipe, last - first)
            .context("cannot read the outcome streams")?;
        for entries in streams {
            all.push(entries.into_iter().filter_map(record).collect());
        }
    }
    Ok(all)
}

/// A stream entry as a [`Rec`]; `None` without a readable `tick`.
fn record((_id, flat): (String, Vec<String>)) -> Option<Rec> {
    let fields: HashMap<&str, &str> = flat
        .chunks_exact(2)
        .map(|p| (p[0].as_str(), p[1].as_str()))
        .collect();
    Some(Rec {
        tick: fields.get("tick")?.parse().ok()?,
        started_ms: fields.get("started_ms").and_then(|s| s.parse().ok()),
        finished_ms: fields.get("finished_ms").and_then(|s| s.parse().ok()),
        status: fields.get("status").copied().unwrap_or("").to_string(),
        replica: fields.get("replica").copied().unwrap_or("").to_string(),
    })
}
