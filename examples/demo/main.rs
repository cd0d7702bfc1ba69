//! The demo: three `cronlease` replicas share one private Redis and race for
//! a lottery draw that ticks every 2 seconds; afterwards the demo reads what
//! they recorded and checks that every tick was drawn exactly once.
//!
//! ```sh
//! scripts/demo                 # builds, then runs for 30 s
//! scripts/demo --seconds 60
//! scripts/demo --kind embedded # the replicas are a Rust service embedding the library
//! ```
//!
//! The replicas are `cronlease run` daemons running `examples/lottery-draw.sh`
//! (`--kind daemon`, the default), or instances of `examples/embedded_lottery.rs`
//! (`--kind embedded`), whose async handler records each draw exactly as the
//! script does. Only the command line differs: the settings, the processes,
//! their stop and the check are the same for both.
//!
//! Everything lives in a fresh temporary directory (Redis on a free loopback
//! port, one state directory and log per replica, and a config per daemon);
//! the directory is kept afterwards so the logs can be read, and its path is
//! printed. The processes are killed on every way out: normal end, error,
//! panic (Drop), Ctrl-C (an orderly stop, then the report), and the demo
//! itself being killed (they get SIGKILL through `PR_SET_PDEATHSIG`).
//!
//! The example does not share code with `tests/it/support`: an example cannot
//! import integration-test modules, so the few helpers it needs are here.
//!
//! Files: this one the command line, the settings and the flow;
//! `replicas.rs` what each kind runs and a replica process; `record.rs`
//! the outcomes and draws read back, printed and checked.

#[path = "../common/mod.rs"]
mod common;
mod record;
mod replicas;

use record::{print_outcomes, print_share, read_draws, read_outcomes, runs_key, verify};
use replicas::{Program, Replica};

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::{Parser, ValueEnum};
use common::{
    INTERRUPTED, RedisProcess, cronlease_binary, detach_and_tie_to_parent, example_binary, indent,
    install_interrupt_handler, on_path, print_table, tail, toml_string,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The job the demo runs, and its key prefix in Redis.
const JOB: &str = "lottery-draw";
const KEY_PREFIX: &str = "demo";

/// The job's schedule, and its period.
const SCHEDULE: &str = "*/2 * * * * *";
const TICK_MS: i64 = 2_000;

/// The replicas' settings, one set for both kinds: written into a daemon's
/// config, passed to an embedded instance as flags.
const LEASE: &str = "3s";
const HEARTBEAT: &str = "1s";
const SHUTDOWN_GRACE: &str = "5s";
const KILL_GRACE: &str = "2s";
const COMMAND_TIMEOUT: &str = "300ms";
const WINNERS: &str = "3";
const JOB_TIMEOUT: &str = "10s";

/// How long stopping replicas may take after SIGTERM: `SHUTDOWN_GRACE`
/// plus `KILL_GRACE` plus slack.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Run three cronlease replicas against a private Redis and check that a
/// job ticking every 2 s ran exactly once per tick.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Args {
    /// How long the replicas run before they are stopped with SIGTERM.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// How many replicas to start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    replicas: u32,
    /// What the replicas are.
    #[arg(long, value_enum, default_value_t = Kind::Daemon)]
    kind: Kind,
}

/// The two ways to run a replica of cronlease.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Kind {
    /// `cronlease run`, the job a process (`examples/lottery-draw.sh`).
    Daemon,
    /// The `embedded_lottery` example: a service embedding the library, the
    /// job an async handler.
    Embedded,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Daemon => "daemon",
            Kind::Embedded => "embedded",
        }
    }

    /// What a replica of this kind is, for the output.
    fn describe(self) -> &'static str {
        match self {
            Kind::Daemon => "`cronlease run` daemons running examples/lottery-draw.sh",
            Kind::Embedded => "embedded_lottery instances (the library, an async handler)",
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The whole demo; `Ok(false)` when the exactly-once check found violations.
/// Every process it starts is owned by a guard dropped before it returns.
fn run(args: &Args) -> Result<bool> {
    let program = Program::find(args.kind)?;
    for tool in ["redis-server", "redis-cli"] {
        if !on_path(tool) {
            bail!("{tool} is not on PATH: run scripts/install-deps (scripts/demo does)");
        }
    }
    install_interrupt_handler()?;

    let work = tempfile::Builder::new()
        .prefix("cronlease-demo-")
        .tempdir()
        .context("cannot create the demo's temporary directory")?
        // Kept on purpose: the replicas' logs are the demo's second output.
        .keep();
    println!("work directory: {}", work.display());

    let redis = RedisProcess::start(&work)?;
    let url = redis.url();
    println!(
        "redis-server:   {url} (pid {}, log {}/redis.log)",
        redis.pid(),
        work.display()
    );
    let mut connection = redis.connect(Duration::from_secs(10))?;

    println!(
        "kind:           {}: {}",
        args.kind.name(),
        args.kind.describe()
    );
    let mut replicas = Vec::new();
    for n in 1..=args.replicas {
        let name = format!("replica-{n}");
        let arguments = program.arguments(&work, &name, &url)?;
        let replica = Replica::start(program.path(), &arguments, &name, &work)?;
        println!(
            "started {name} (pid {}), log {}",
            replica.pid(),
            replica.log.display()
        );
        replicas.push(replica);
    }

    println!(
        "\n{} {} replicas race for `{JOB}` (every 2 s) for {} s; Ctrl-C stops early…",
        args.replicas,
        args.kind.name(),
        args.seconds
    );
    let mut violations = Vec::new();
    let all_gone = run_for(
        Duration::from_secs(args.seconds),
        &mut replicas,
        &mut connection,
    );
    for replica in &mut replicas {
        if let Some(status) = replica.exit {
            violations.push(format!(
                "{} exited by itself with {status} before the end; last lines of its log:\n{}",
                replica.name,
                indent(&replica.log_tail(15))
            ));
        }
    }
    if all_gone {
        println!("every replica has exited: stopping early");
    }

    println!("\nstopping the replicas (SIGTERM)…");
    for replica in &replicas {
        replica.sigterm();
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for replica in &mut replicas {
        let already_gone = replica.exit.is_some();
        match replica.wait_until(deadline) {
            // Reported above as an early exit.
            Some(_) if already_gone => {}
            Some(status) if status.success() => {}
            Some(status) => violations.push(format!(
                "{} exited with {status} after SIGTERM (an orderly stop exits 0)",
                replica.name
            )),
            None => {
                replica.kill9();
                violations.push(format!(
                    "{} did not exit within {STOP_TIMEOUT:?} of SIGTERM and was killed",
                    replica.name
                ));
            }
        }
    }

    let outcomes = read_outcomes(&mut connection)?;
    let draws = read_draws(&mut connection)?;
    let highest_fence: Option<i64> = redis::cmd("GET")
        .arg("lottery:fence")
        .query(&mut connection)
        .context("cannot read lottery:fence")?;
    print_outcomes(&outcomes, &draws);

    let (ticks, found) = verify(&outcomes, &draws, highest_fence);
    violations.extend(found);
    print_share(&outcomes);

    println!("\nreplica logs:");
    for replica in &replicas {
        println!("  {}", replica.log.display());
    }
    println!("(rm -r {} when done)", work.display());

    drop(replicas);
    drop(redis);
    if violations.is_empty() {
        println!(
            "\n{} replicas ({}): {ticks} ticks, each run exactly once",
            args.kind.name(),
            args.replicas
        );
        Ok(true)
    } else {
        println!(
            "\n{} replicas ({}): {} violation(s):",
            args.kind.name(),
            args.replicas,
            violations.len()
        );
        for violation in &violations {
            println!("  - {violation}");
        }
        Ok(false)
    }
}

/// Lets the replicas run for `duration`, printing progress every 5 s.
/// Returns early, `true`, when every replica has exited; early, `false`, on
/// Ctrl-C.
fn run_for(
    duration: Duration,
    replicas: &mut [Replica],
    connection: &mut redis::Connection,
) -> bool {
    let started = Instant::now();
    let mut next_report = Duration::from_secs(5);
    let key = runs_key();
    while started.elapsed() < duration {
        if INTERRUPTED.load(Ordering::SeqCst) {
            println!("interrupted after {} s", started.elapsed().as_secs());
            return false;
        }
        let mut alive = 0;
        for replica in replicas.iter_mut() {
            let was_running = replica.exit.is_none();
            if !replica.poll() {
                alive += 1;
            } else if was_running {
                println!(
                    "{} exited early with {}",
                    replica.name,
                    replica.exit.expect("poll said it exited")
                );
            }
        }
        if alive == 0 {
            return true;
        }
        if started.elapsed() >= next_report {
            let recorded = redis::cmd("XLEN")
                .arg(&key)
                .query::<u64>(connection)
                .map_or_else(|e| format!("cannot read: {e}"), |n| n.to_string());
            println!(
                "  {:>3} s: {recorded} outcomes recorded, {alive} replicas running",
                next_report.as_secs()
            );
            next_report += Duration::from_secs(5);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
