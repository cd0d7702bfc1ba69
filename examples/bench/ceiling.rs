//! The ceiling: `redis-benchmark`'s `EVALSHA` of `return 1` against the
//! scenario's own redis-server, the replicas stopped.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::cluster::{Conn, check_interrupted};
use crate::common::detach_and_tie_to_parent;

/// The ceiling: what one redis-server does with the cheapest EVALSHA.
pub struct Ceiling {
    pub rps: Option<f64>,
    command: String,
    output: String,
}

impl Ceiling {
    /// `redis-benchmark … EVALSHA <sha of "return 1"> 0` against the
    /// redis-server on `port`; its output goes to `dir`.
    pub fn measure(conn: &mut Conn, port: u16, dir: &Path) -> Result<Ceiling> {
        let sha: String = conn.query(redis::cmd("SCRIPT").arg("LOAD").arg("return 1"))?;
        let args: Vec<String> = [
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-q",
            "-n",
            "200000",
            "-c",
            "50",
            "-P",
            "16",
            "EVALSHA",
            &sha,
            "0",
        ]
        .map(String::from)
        .to_vec();
        let command_line = format!("redis-benchmark {}", args.join(" "));
        println!("  ceiling: {command_line}");
        let out_path = dir.join("redis-benchmark.out");
        let status = run_redis_benchmark(&args, &out_path)?;
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        let rps = parse_rps(&text);
        if !status.success() || rps.is_none() {
            println!(
                "  redis-benchmark exited with {status}; output: {:?}",
                text.trim()
            );
        }
        Ok(Ceiling {
            rps,
            command: command_line,
            output: text
                .rsplit(['\r', '\n'])
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string(),
        })
    }

    pub fn json(&self, claims_per_s: Option<f64>) -> Value {
        json!({
            "command": self.command,
            "output": self.output,
            "evalsha_per_s": self.rps,
            "claims_per_s": claims_per_s,
            "ratio": match (claims_per_s, self.rps) {
                (Some(c), Some(r)) if r > 0.0 => Some(c / r),
                _ => None,
            },
        })
    }
}

/// Runs `redis-benchmark args` to its end (at most 120 s), its output in
/// `out_path`.
fn run_redis_benchmark(args: &[String], out_path: &Path) -> Result<ExitStatus> {
    let out =
        File::create(out_path).with_context(|| format!("cannot create {}", out_path.display()))?;
    let mut command = Command::new("redis-benchmark");
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null());
    detach_and_tie_to_parent(&mut command);
    let child = command.spawn().context("cannot start redis-benchmark")?;
    let mut guard = ChildGuard(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        check_interrupted()?;
        if let Some(status) = guard
            .0
            .try_wait()
            .context("cannot wait for redis-benchmark")?
        {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            bail!("redis-benchmark did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills and reaps a child when dropped.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pub fn print_ceiling(ceiling: &Ceiling, claims_per_s: Option<f64>) {
    match (ceiling.rps, claims_per_s) {
        (Some(rps), Some(c)) => println!(
            "\n  ceiling (same redis-server, replicas stopped): {rps:.0} EVALSHA/s; cronlease \
             claims {c:.0}/s = {:.2} % of it",
            c / rps * 100.0
        ),
        (Some(rps), None) => println!("\n  ceiling: {rps:.0} EVALSHA/s"),
        (None, _) => println!("\n  ceiling: not measured ({})", ceiling.output),
    }
}

fn parse_rps(text: &str) -> Option<f64> {
    text.split(['\r', '\n'])
        .filter_map(|line| {
            let before = &line[..line.find(" requests per second")?];
            before.split_whitespace().last()?.parse::<f64>().ok()
        })
        .next_back()
}
