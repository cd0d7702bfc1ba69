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

mod common;

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

/// The program the replicas run, and how each one is started: the only
/// thing in which the kinds differ.
enum Program {
    /// `cronlease run --config FILE`, one config per replica, checked first.
    Daemon { cronlease: PathBuf, script: PathBuf },
    /// `embedded_lottery` with the settings as flags.
    Embedded { example: PathBuf },
}

impl Program {
    /// Finds what `kind` needs, built next to the demo.
    fn find(kind: Kind) -> Result<Program> {
        match kind {
            Kind::Daemon => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/lottery-draw.sh");
                if !script.is_file() {
                    bail!("the job script {} is missing", script.display());
                }
                Ok(Program::Daemon {
                    cronlease: cronlease_binary()?,
                    script,
                })
            }
            Kind::Embedded => Ok(Program::Embedded {
                example: example_binary("embedded_lottery")?,
            }),
        }
    }

    fn path(&self) -> &Path {
        match self {
            Program::Daemon { cronlease, .. } => cronlease,
            Program::Embedded { example } => example,
        }
    }

    /// The arguments of replica `name`, after writing what it needs in
    /// `dir`: its state directory (spools are per replica), and a daemon's
    /// config.
    fn arguments(&self, dir: &Path, name: &str, url: &str) -> Result<Vec<OsString>> {
        let state_dir = dir.join(format!("state-{name}"));
        std::fs::create_dir_all(&state_dir)
            .with_context(|| format!("cannot create {}", state_dir.display()))?;
        match self {
            Program::Daemon { cronlease, script } => {
                let config = write_config(dir, name, url, &state_dir, script)?;
                check_config(cronlease, &config)?;
                Ok(vec!["run".into(), "--config".into(), config.into()])
            }
            Program::Embedded { .. } => {
                let flags = [
                    ("--redis", url),
                    ("--prefix", KEY_PREFIX),
                    ("--instance", name),
                    ("--schedule", SCHEDULE),
                    ("--timezone", "UTC"),
                    ("--winners", WINNERS),
                    ("--timeout", JOB_TIMEOUT),
                    ("--lease", LEASE),
                    ("--heartbeat", HEARTBEAT),
                    ("--shutdown-grace", SHUTDOWN_GRACE),
                    ("--kill-grace", KILL_GRACE),
                    ("--command-timeout", COMMAND_TIMEOUT),
                ];
                let mut arguments: Vec<OsString> = flags
                    .iter()
                    .flat_map(|&(flag, value)| [flag.into(), value.into()])
                    .collect();
                arguments.push("--state-dir".into());
                arguments.push(state_dir.into());
                Ok(arguments)
            }
        }
    }
}

/// One replica process (`PROGRAM ARGUMENTS…`, its output in `NAME.log`);
/// dropping it kills it.
struct Replica {
    name: String,
    child: Child,
    log: PathBuf,
    /// Set once the process has been reaped; its pid is never signalled
    /// after that, as it may belong to another process by then.
    exit: Option<ExitStatus>,
}

impl Replica {
    fn start(program: &Path, arguments: &[OsString], name: &str, dir: &Path) -> Result<Replica> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out
            .try_clone()
            .with_context(|| format!("cannot duplicate the handle of {}", log.display()))?;
        let rust_log =
            std::env::var("RUST_LOG").unwrap_or_else(|_| "cronlease=debug,info".to_string());
        let mut command = Command::new(program);
        command
            .args(arguments)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("RUST_LOG", rust_log)
            .env("NO_COLOR", "1")
            // Not this machine's systemd: the demo is the supervisor here.
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .env_remove("CRONLEASE_CONFIG");
        detach_and_tie_to_parent(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {} for {name}", program.display()))?;
        Ok(Replica {
            name: name.to_string(),
            child,
            log,
            exit: None,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited, reaping it if so.
    fn poll(&mut self) -> bool {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit.is_some()
    }

    fn sigterm(&self) {
        if self.exit.is_none() {
            let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGTERM);
        }
    }

    fn kill9(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    /// Waits for the process to exit until `deadline`.
    fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        while !self.poll() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.exit
    }

    fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Writes `DIR/NAME.toml` for one daemon: its own `replica_id` and
/// `state_dir`, the shared Redis, settings and job.
fn write_config(
    dir: &Path,
    name: &str,
    url: &str,
    state_dir: &Path,
    script: &Path,
) -> Result<PathBuf> {
    let text = format!(
        r#"# Written by the cronlease demo (examples/demo.rs).
[redis]
url = {url}
key_prefix = "{KEY_PREFIX}"
command_timeout = "{COMMAND_TIMEOUT}"

[daemon]
replica_id = "{name}"
lease = "{LEASE}"
heartbeat = "{HEARTBEAT}"
shutdown_grace = "{SHUTDOWN_GRACE}"
kill_grace = "{KILL_GRACE}"
state_dir = {state_dir}

[jobs.{JOB}]
schedule = "{SCHEDULE}"        # every 2 seconds: a fast-ticking copy of the noon draw
command = [{script}, "--winners", "{WINNERS}"]
env = {{ LOTTERY_REDIS_URL = {url} }}
timeout = "{JOB_TIMEOUT}"
"#,
        url = toml_string(url),
        state_dir = toml_string(&state_dir.to_string_lossy()),
        script = toml_string(&script.to_string_lossy()),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Runs `cronlease check` on a config so a bad one is reported before any
/// daemon starts.
fn check_config(binary: &Path, config: &Path) -> Result<()> {
    let output = Command::new(binary)
        .arg("check")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {} check", binary.display()))?;
    if !output.status.success() {
        bail!(
            "cronlease check rejected {} ({}):\n{}{}",
            config.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
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

fn runs_key() -> String {
    format!("{KEY_PREFIX}:{{{JOB}}}:runs")
}

/// One outcome record, as a replica wrote it to the job's stream.
struct Outcome {
    fields: BTreeMap<String, String>,
}

impl Outcome {
    fn get(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }

    /// A numeric field, `None` when missing or not a number.
    fn number(&self, name: &str) -> Option<i64> {
        self.get(name).parse().ok()
    }

    fn stale(&self) -> bool {
        self.get("stale") == "1"
    }

    /// How to name this outcome in a violation.
    fn describe(&self) -> String {
        format!(
            "{} by {} (fence {}, run {})",
            self.get("status"),
            self.get("replica"),
            self.get("fence"),
            self.get("run_id")
        )
    }
}

/// The job's outcome stream, oldest first.
fn read_outcomes(connection: &mut redis::Connection) -> Result<Vec<Outcome>> {
    let key = runs_key();
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query(connection)
        .with_context(|| format!("cannot read the outcome stream {key}"))?;
    Ok(entries
        .into_iter()
        .map(|(_id, flat)| Outcome {
            fields: flat
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        })
        .collect())
}

/// One `lottery:draw:<tick_ms>` key, as `lottery-draw.sh` (or
/// `embedded_lottery`, in the same shape) wrote it:
/// `"<fence> <replica> <winner>…"`.
struct Draw {
    fence: Option<i64>,
    replica: String,
    winners: String,
}

/// Every draw the job made, by tick.
fn read_draws(connection: &mut redis::Connection) -> Result<BTreeMap<i64, Draw>> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("lottery:draw:*")
        .query(connection)
        .context("cannot list the lottery:draw:* keys")?;
    let mut draws = BTreeMap::new();
    for key in keys {
        let Some(tick) = key
            .strip_prefix("lottery:draw:")
            .and_then(|t| t.parse().ok())
        else {
            continue;
        };
        let value: String = redis::cmd("GET")
            .arg(&key)
            .query(connection)
            .with_context(|| format!("cannot read {key}"))?;
        let mut words = value.splitn(3, ' ');
        let fence = words.next().and_then(|f| f.parse().ok());
        let replica = words.next().unwrap_or("").to_string();
        let winners = words.next().unwrap_or("").to_string();
        draws.insert(
            tick,
            Draw {
                fence,
                replica,
                winners,
            },
        );
    }
    Ok(draws)
}

fn format_tick(tick: Option<i64>) -> String {
    tick.and_then(DateTime::<Utc>::from_timestamp_millis)
        .map_or_else(
            || "?".to_string(),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
}

/// One row per outcome, oldest first, with the winners of the draw it made.
fn print_outcomes(outcomes: &[Outcome], draws: &BTreeMap<i64, Draw>) {
    println!("\noutcomes in {} ({}):", runs_key(), outcomes.len());
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|outcome| {
            let tick = outcome.number("tick");
            let fence = outcome.number("fence");
            let winners = tick
                .and_then(|t| draws.get(&t))
                .filter(|draw| draw.fence == fence)
                .map_or_else(|| "-".to_string(), |draw| draw.winners.clone());
            let mut status = outcome.get("status").to_string();
            if outcome.stale() {
                status.push_str(" (stale)");
            }
            vec![
                format_tick(tick),
                outcome.get("replica").to_string(),
                outcome.get("fence").to_string(),
                status,
                winners,
            ]
        })
        .collect();
    let header = [
        "tick (UTC)".to_string(),
        "replica".to_string(),
        "fence".to_string(),
        "status".to_string(),
        "winners".to_string(),
    ];
    print_table(&header, &rows);
}

/// How the ticks were shared out: with a working claim every replica wins
/// some, none wins the same tick twice.
fn print_share(outcomes: &[Outcome]) {
    let mut share: BTreeMap<&str, usize> = BTreeMap::new();
    for outcome in outcomes.iter().filter(|o| !o.stale()) {
        *share.entry(outcome.get("replica")).or_default() += 1;
    }
    let parts: Vec<String> = share
        .iter()
        .map(|(replica, n)| format!("{replica} {n}"))
        .collect();
    println!("\nticks won per replica: {}", parts.join(", "));
}

/// Checks the exactly-once promise on what Redis holds. Returns the number
/// of ticks and the violations found.
///
/// - every tick has exactly one current (non-stale) outcome, and it is `ok`;
/// - no tick between the first and the last is missing (at least once while
///   replicas are alive) and every tick is on the 2 s grid;
/// - each tick's draw key holds the fence of that tick's one outcome, and no
///   draw exists without an outcome (the job ran once, and was recorded);
/// - fences strictly increase with ticks, and `lottery:fence` is the highest.
fn verify(
    outcomes: &[Outcome],
    draws: &BTreeMap<i64, Draw>,
    highest_fence: Option<i64>,
) -> (usize, Vec<String>) {
    let mut violations = Vec::new();
    if outcomes.is_empty() {
        violations.push(format!(
            "no outcome was recorded in {}: no replica ran the job (see the logs)",
            runs_key()
        ));
    }
    let mut current: BTreeMap<i64, Vec<&Outcome>> = BTreeMap::new();
    let mut stale_ticks = Vec::new();
    for outcome in outcomes {
        let Some(tick) = outcome.number("tick") else {
            violations.push(format!(
                "an outcome has no valid tick: {:?}",
                outcome.fields
            ));
            continue;
        };
        if outcome.stale() {
            stale_ticks.push(tick);
        } else {
            current.entry(tick).or_default().push(outcome);
        }
    }
    for tick in stale_ticks {
        if !current.contains_key(&tick) {
            violations.push(format!(
                "tick {} has only a stale outcome",
                format_tick(Some(tick))
            ));
        }
    }
    for (&tick, records) in &current {
        let when = format_tick(Some(tick));
        if tick % TICK_MS != 0 {
            violations.push(format!("tick {when} ({tick} ms) is not on the 2 s grid"));
        }
        if records.len() > 1 {
            let who: Vec<String> = records.iter().map(|o| o.describe()).collect();
            violations.push(format!(
                "tick {when} has {} current outcomes: {}",
                records.len(),
                who.join("; ")
            ));
        }
        for outcome in records {
            if outcome.get("status") != "ok" {
                let output = outcome.get("output").trim();
                violations.push(format!(
                    "tick {when}: {} exit_code={} signal={}{}",
                    outcome.describe(),
                    outcome.fields.get("exit_code").map_or("-", String::as_str),
                    outcome.fields.get("signal").map_or("-", String::as_str),
                    if output.is_empty() {
                        String::new()
                    } else {
                        format!(", output:\n{}", indent(output))
                    }
                ));
            }
        }
        match draws.get(&tick) {
            None if records.iter().any(|o| o.get("status") == "ok") => violations.push(format!(
                "tick {when} ran ok but lottery:draw:{tick} does not exist"
            )),
            Some(draw) if !records.iter().any(|o| o.number("fence") == draw.fence) => violations
                .push(format!(
                    "lottery:draw:{tick} was drawn by {} with fence {:?}, which is not \
                     the fence of the tick's outcome",
                    draw.replica, draw.fence
                )),
            _ => {}
        }
    }
    for (&tick, draw) in draws {
        if !current.contains_key(&tick) {
            violations.push(format!(
                "lottery:draw:{tick} ({}) was drawn by {} with fence {:?} but the tick has no \
                 current outcome",
                format_tick(Some(tick)),
                draw.replica,
                draw.fence
            ));
        }
    }
    let ticks: Vec<i64> = current.keys().copied().collect();
    for pair in ticks.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b - a > TICK_MS {
            violations.push(format!(
                "{} tick(s) missing between {} and {}",
                (b - a) / TICK_MS - 1,
                format_tick(Some(a)),
                format_tick(Some(b))
            ));
        }
    }
    let fences: Vec<(i64, Option<i64>)> = current
        .iter()
        .map(|(&tick, records)| (tick, records[0].number("fence")))
        .collect();
    for pair in fences.windows(2) {
        let ((a, fa), (b, fb)) = (pair[0], pair[1]);
        match (fa, fb) {
            (Some(fa), Some(fb)) if fb > fa => {}
            _ => violations.push(format!(
                "fences do not increase with ticks: {} has fence {fa:?}, {} has {fb:?}",
                format_tick(Some(a)),
                format_tick(Some(b))
            )),
        }
    }
    let max_fence = fences.iter().filter_map(|&(_, f)| f).max();
    if max_fence.is_some() && highest_fence != max_fence {
        violations.push(format!(
            "lottery:fence is {highest_fence:?}, the highest outcome fence is {max_fence:?}"
        ));
    }
    (current.len(), violations)
}
