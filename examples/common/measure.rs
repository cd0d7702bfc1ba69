//! What the benchmarks share (`#[path = "…/common/measure.rs"] mod
//! measure;` in `bench`, `lock_cost` and `quorum_cost`): numbers read from
//! `INFO` replies and from `/proc`, and a tokio `main`.

// Each benchmark uses a subset of these helpers.
#![allow(dead_code)]

use std::future::Future;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

use crate::common::RedisProcess;

/// One section of the `INFO` of `redis` (`stats`, `commandstats`, …).
pub fn info(redis: &RedisProcess, section: &str) -> Result<String> {
    let mut conn = redis.connect(std::time::Duration::from_secs(5))?;
    redis::cmd("INFO")
        .arg(section)
        .query(&mut conn)
        .with_context(|| format!("INFO {section}"))
}

/// Commands `redis` has processed so far (`INFO stats`).
pub fn commands_processed(redis: &RedisProcess) -> Result<u64> {
    info_field(&info(redis, "stats")?, "total_commands_processed")
        .context("no total_commands_processed in INFO stats")
}

/// µs `redis` has spent running scripts (`EVALSHA`) so far.
pub fn script_usec(redis: &RedisProcess) -> Result<u64> {
    Ok(command_usec(&info(redis, "commandstats")?, "evalsha"))
}

/// A numeric field (`used_memory:123`) of an `INFO` reply.
pub fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(':')?
            .trim()
            .parse::<u64>()
            .ok()
    })
}

/// The µs Redis has spent in `command` (lower case), from its line of an
/// `INFO commandstats` reply; 0 if it never ran.
pub fn command_usec(commandstats: &str, command: &str) -> u64 {
    commandstats
        .lines()
        .find_map(|line| {
            line.strip_prefix("cmdstat_")?
                .strip_prefix(command)?
                .strip_prefix(':')
        })
        .and_then(|stats| stats.split(',').find_map(|kv| kv.strip_prefix("usec=")))
        .and_then(|us| us.parse().ok())
        .unwrap_or(0)
}

/// utime + stime of a process, in seconds.
pub fn proc_cpu_s(pid: u32, clk_tck: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: the first one is field 3 (state); utime is 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clk_tck)
}

/// `sysconf(_SC_CLK_TCK)` through `getconf`; 100 (Linux's) if that fails.
pub fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Runs `work` on a multi-thread tokio runtime: the exit status, and the
/// error with its causes on stderr.
pub fn run_main(work: impl Future<Output = Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
