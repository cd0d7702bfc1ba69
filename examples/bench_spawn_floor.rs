//! The spawn floor of the benchmark's `processes` scenario: a
//! plain program that starts `true` processes at the instants cronlease's
//! jobs are due — `--per-tick` of them at each of `--ticks` whole seconds
//! from `--first-tick-ms` (wall clock, ms since the epoch) — and notes, for
//! each, when its spawn returned and when it was reaped. The benchmark
//! starts it after its replicas stopped, on the same machine, and compares
//! cronlease's lateness with this one's.
//!
//! ```sh
//! cargo run --release --example bench_spawn_floor -- --per-tick 1000 \
//!     --first-tick-ms 1700000000000 --ticks 30 --out floor.tsv
//! ```
//!
//! - **Spawning.** `--threads` threads (default: the CPUs this process may
//!   use) share the processes of a tick; each sleeps until the tick, then
//!   starts its share one after another with `std::process::Command`
//!   (`true` found on `PATH`, stdio `/dev/null`, nothing else: glibc's
//!   `posix_spawn`, whose return means the child has exec'd) and notes the
//!   wall clock (µs) when the spawn returned.
//! - **Reaping.** One thread waits for any child (`waitpid(-1)`) and notes
//!   the wall clock when each was reaped. Pids are few (`pid_max` can be
//!   32,768) and reused, so a pid's spawns and reaps are paired in order: a
//!   pid is only reused after its reap.
//! - **Output.** `--out` gets one `TICK_MS\tSPAWNED_US\tREAPED_US` line per
//!   process started, in no order, then `# spawn_failures N` and
//!   `# threads N` lines. Exit status 0, or 1 with the error on stderr.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::Parser;
use nix::errno::Errno;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

/// Start `true` processes at whole seconds and note when each started and
/// was reaped.
#[derive(Debug, Parser)]
#[command(name = "bench_spawn_floor")]
struct Args {
    /// Processes started at each tick.
    #[arg(long)]
    per_tick: usize,
    /// The first tick, wall clock, ms since the epoch.
    #[arg(long)]
    first_tick_ms: i64,
    /// Ticks, one a second.
    #[arg(long)]
    ticks: usize,
    /// Spawning threads (default: the CPUs available).
    #[arg(long)]
    threads: Option<usize>,
    /// Where the lines go.
    #[arg(long)]
    out: std::path::PathBuf,
}

/// One process: its tick, its pid, when its spawn returned (µs).
struct Spawned {
    tick_ms: i64,
    pid: i32,
    spawned_us: i64,
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_spawn_floor: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let spawned: Mutex<Vec<Spawned>> = Mutex::new(Vec::with_capacity(args.per_tick * args.ticks));
    let failures = Mutex::new(0u64);
    let reaped: Mutex<Vec<(i32, i64)>> = Mutex::new(Vec::new());
    let spawning_done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reaper = scope.spawn(|| reap(&reaped, &spawning_done));
        let spawners: Vec<_> = (0..threads)
            .map(|t| {
                // Thread t starts processes t, t + threads, … of each tick.
                let share = (args.per_tick + threads - 1 - t) / threads;
                let (spawned, failures) = (&spawned, &failures);
                scope.spawn(move || spawn_share(args, share, spawned, failures))
            })
            .collect();
        for spawner in spawners {
            let _ = spawner.join();
        }
        spawning_done.store(true, Ordering::SeqCst);
        let _ = reaper.join();
    });
    let spawned = spawned.into_inner().unwrap_or_else(|e| e.into_inner());
    let reaped = reaped.into_inner().unwrap_or_else(|e| e.into_inner());
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    write_out(&args.out, &pair(spawned, reaped), failures, threads)
}

/// Starts `share` processes at each tick.
fn spawn_share(args: &Args, share: usize, spawned: &Mutex<Vec<Spawned>>, failures: &Mutex<u64>) {
    let mut mine = Vec::with_capacity(share * args.ticks);
    let mut failed = 0;
    for n in 0..args.ticks {
        let tick_ms = args.first_tick_ms + n as i64 * 1_000;
        sleep_until_us(tick_ms * 1_000);
        for _ in 0..share {
            let child = Command::new("true")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let spawned_us = now_us();
            match child {
                // Dropping a `Child` neither waits nor kills: the reaper
                // thread reaps it.
                Ok(child) => mine.push(Spawned {
                    tick_ms,
                    pid: child.id() as i32,
                    spawned_us,
                }),
                Err(_) => failed += 1,
            }
        }
    }
    spawned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(mine);
    *failures.lock().unwrap_or_else(|e| e.into_inner()) += failed;
}

/// Reaps every child as it exits until the spawners are done and no child
/// is left, noting (pid, µs).
fn reap(reaped: &Mutex<Vec<(i32, i64)>>, spawning_done: &AtomicBool) {
    let mut mine = Vec::new();
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)) => {
                mine.push((pid.as_raw(), now_us()));
            }
            Ok(_) | Err(Errno::EINTR) => {}
            // No child at the moment: between ticks, or the end.
            Err(_) => {
                if spawning_done.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    *reaped.lock().unwrap_or_else(|e| e.into_inner()) = mine;
}

/// Each process with its reap: per pid, the k-th spawn (in time) with the
/// k-th reap (a pid is reused only after its reap).
fn pair(mut spawned: Vec<Spawned>, reaped: Vec<(i32, i64)>) -> Vec<(i64, i64, Option<i64>)> {
    let mut reaps: HashMap<i32, Vec<i64>> = HashMap::new();
    for (pid, at) in reaped {
        reaps.entry(pid).or_default().push(at);
    }
    for times in reaps.values_mut() {
        times.sort_unstable();
        times.reverse();
    }
    spawned.sort_by_key(|s| s.spawned_us);
    spawned
        .iter()
        .map(|s| {
            let reaped = reaps.get_mut(&s.pid).and_then(Vec::pop);
            (s.tick_ms, s.spawned_us, reaped)
        })
        .collect()
}

fn write_out(
    path: &std::path::Path,
    lines: &[(i64, i64, Option<i64>)],
    failures: u64,
    threads: usize,
) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for (tick, spawned, reaped) in lines {
        let reaped = reaped.map_or(String::new(), |r| r.to_string());
        writeln!(out, "{tick}\t{spawned}\t{reaped}")?;
    }
    writeln!(out, "# spawn_failures {failures}")?;
    writeln!(out, "# threads {threads}")?;
    out.flush()
        .with_context(|| format!("cannot write {}", path.display()))
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Sleeps until the wall clock reads `target_us`.
fn sleep_until_us(target_us: i64) {
    loop {
        let left = target_us - now_us();
        if left <= 0 {
            return;
        }
        std::thread::sleep(Duration::from_micros(left as u64));
    }
}
