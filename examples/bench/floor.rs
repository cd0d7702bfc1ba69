//! The spawn floor of the `processes` scenario: `examples/bench_spawn_floor.rs`
//! run to its end, and what its lines add up to.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::clock::local_ms;
use crate::cluster::check_interrupted;
use crate::common::{detach_and_tie_to_parent, example_binary, indent, tail};
use crate::handler::{json_us, show_us};
use crate::ticks::{Percentiles, ceil_to};

/// What the floor program measured.
pub struct Floor {
    pub per_tick: usize,
    pub ticks: usize,
    pub threads: usize,
    /// Processes started (spawn returned) and reaped.
    pub started: u64,
    pub reaped: u64,
    pub spawn_failures: u64,
    /// Tick to spawn returned, µs.
    pub spawned_us: Option<Percentiles>,
    /// Tick to reaped, µs.
    pub reaped_us: Option<Percentiles>,
}

impl Floor {
    /// Runs the floor program for `ticks` seconds of `per_tick` processes
    /// from the next whole second but one; its files go to `dir`.
    pub fn measure(per_tick: usize, ticks: usize, dir: &Path) -> Result<Floor> {
        let program = example_binary("bench_spawn_floor")?;
        let out = dir.join("spawn-floor.tsv");
        let log = dir.join("spawn-floor.log");
        let first = ceil_to(local_ms() + 1_500, 1_000);
        println!(
            "  spawn floor: {} starting {per_tick} `true` processes a second for {ticks} s",
            program.display()
        );
        let log_file = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut command = Command::new(&program);
        command
            .args(["--per-tick", &per_tick.to_string()])
            .args(["--first-tick-ms", &first.to_string()])
            .args(["--ticks", &ticks.to_string()])
            .arg("--out")
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        detach_and_tie_to_parent(&mut command);
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let deadline = Instant::now() + Duration::from_secs(ticks as u64 + 60);
        let status = loop {
            if let Err(e) = check_interrupted() {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
            if let Some(status) = child.try_wait().context("cannot wait for the floor")? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the spawn floor did not finish within {ticks} s + 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if !status.success() {
            bail!(
                "the spawn floor exited with {status}; {}:\n{}",
                log.display(),
                indent(&tail(&log, 10))
            );
        }
        let text = std::fs::read_to_string(&out)
            .with_context(|| format!("cannot read {}", out.display()))?;
        Ok(Floor::read(&text, per_tick, ticks))
    }

    fn read(text: &str, per_tick: usize, ticks: usize) -> Floor {
        let mut spawned = Vec::new();
        let mut reaped = Vec::new();
        let (mut spawn_failures, mut threads) = (0, 0);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# spawn_failures ") {
                spawn_failures = rest.trim().parse().unwrap_or(0);
                continue;
            }
            if let Some(rest) = line.strip_prefix("# threads ") {
                threads = rest.trim().parse().unwrap_or(0);
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let [tick, at, exit] = fields[..] else {
                continue;
            };
            let (Ok(tick), Ok(at)) = (tick.parse::<i64>(), at.parse::<i64>()) else {
                continue;
            };
            spawned.push(at - tick * 1_000);
            if let Ok(exit) = exit.parse::<i64>() {
                reaped.push(exit - tick * 1_000);
            }
        }
        Floor {
            per_tick,
            ticks,
            threads,
            started: spawned.len() as u64,
            reaped: reaped.len() as u64,
            spawn_failures,
            spawned_us: Percentiles::of(spawned),
            reaped_us: Percentiles::of(reaped),
        }
    }

    pub fn due(&self) -> u64 {
        (self.per_tick * self.ticks) as u64
    }

    pub fn rows(&self) -> Vec<Vec<String>> {
        vec![
            vec![
                format!("spawn floor ({} threads): started / due", self.threads),
                format!(
                    "{} / {} ({} spawn failures)",
                    self.started,
                    self.due(),
                    self.spawn_failures
                ),
            ],
            vec![
                "  floor tick → spawned p50 / p99 / max".into(),
                show_us(self.spawned_us),
            ],
            vec![
                "  floor tick → reaped p50 / p99 / max".into(),
                show_us(self.reaped_us),
            ],
        ]
    }

    pub fn json(&self) -> Value {
        let us = json_us;
        json!({
            "per_tick": self.per_tick,
            "ticks": self.ticks,
            "threads": self.threads,
            "due": self.due(),
            "started": self.started,
            "reaped": self.reaped,
            "spawn_failures": self.spawn_failures,
            "tick_to_spawned": us(self.spawned_us),
            "tick_to_reaped": us(self.reaped_us),
        })
    }
}
