//! The handler calls an embedded replica noted: one `JOB\tTICK_MS\tWALL_US`
//! line per call in `<state_dir>/handler-calls.tsv`
//! (`examples/bench_embedded_replica.rs` writes them).

use std::path::Path;

use anyhow::{Context, Result, bail};

/// The file, in a replica's state directory.
const CALLS_FILE: &str = "handler-calls.tsv";

/// One call of a job's handler.
pub struct Call {
    pub job: String,
    pub tick_ms: i64,
    /// The replica's wall clock when the handler began, µs since the epoch.
    pub wall_us: i64,
    pub replica: String,
}

/// The calls noted in `state_dir` by `replica`; none if it noted none.
pub fn read_calls(state_dir: &Path, replica: &str) -> Result<Vec<Call>> {
    let path = state_dir.join(CALLS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut calls = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        let parsed = match fields[..] {
            [job, tick_ms, wall_us] => {
                tick_ms
                    .parse()
                    .ok()
                    .zip(wall_us.parse().ok())
                    .map(|(tick_ms, wall_us)| Call {
                        job: job.to_string(),
                        tick_ms,
                        wall_us,
                        replica: replica.to_string(),
                    })
            }
            _ => None,
        };
        match parsed {
            Some(call) => calls.push(call),
            None => bail!("{}:{}: not a handler call: {line:?}", path.display(), n + 1),
        }
    }
    Ok(calls)
}
