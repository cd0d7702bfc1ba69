//! The demo's replicas: the program each kind runs, and one replica
//! process (started, polled, stopped, killed on drop).

use super::*;

/// The program the replicas run, and how each one is started: the only
/// thing in which the kinds differ.
pub(super) enum Program {
    /// `cronlease run --config FILE`, one config per replica, checked first.
    Daemon { cronlease: PathBuf, script: PathBuf },
    /// `embedded_lottery` with the settings as flags.
    Embedded { example: PathBuf },
}

impl Program {
    /// Finds what `kind` needs, built next to the demo.
    pub(super) fn find(kind: Kind) -> Result<Program> {
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

    pub(super) fn path(&self) -> &Path {
        match self {
            Program::Daemon { cronlease, .. } => cronlease,
            Program::Embedded { example } => example,
        }
    }

    /// The arguments of replica `name`, after writing what it needs in
    /// `dir`: its state directory (spools are per replica), and a daemon's
    /// config.
    pub(super) fn arguments(&self, dir: &Path, name: &str, url: &str) -> Result<Vec<OsString>> {
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
pub(super) struct Replica {
    pub(super) name: String,
    child: Child,
    pub(super) log: PathBuf,
    /// Set once the process has been reaped; its pid is never signalled
    /// after that, as it may belong to another process by then.
    pub(super) exit: Option<ExitStatus>,
}

impl Replica {
    pub(super) fn start(
        program: &Path,
        arguments: &[OsString],
        name: &str,
        dir: &Path,
    ) -> Result<Replica> {
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

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited, reaping it if so.
    pub(super) fn poll(&mut self) -> bool {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit.is_some()
    }

    pub(super) fn sigterm(&self) {
        if self.exit.is_none() {
            let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGTERM);
        }
    }

    pub(super) fn kill9(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    /// Waits for the process to exit until `deadline`.
    pub(super) fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        while !self.poll() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.exit
    }

    pub(super) fn log_tail(&self, lines: usize) -> String {
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
        r#"# Written by the cronlease demo (examples/demo/).
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
dashboard_listen = ""            # three replicas on one host: no shared port

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
