//! This test binary started again as another process, running one hidden
//! test function: the way to put library code (an embedded scheduler, a
//! lock holder) in a process of its own that a test can `kill -9`, with no
//! extra binary to build.
//!
//! The parent runs `current_exe() --exact NAME --nocapture
//! --include-ignored` with the child's parameters in one environment
//! variable; the named test (ignored, so ordinary runs skip it) reads them
//! and plays its part. This is a libtest command line, and nextest runs
//! the same libtest binary, so it works under `cargo test` and `cargo
//! nextest run` alike.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How many log lines a child dropped during a failing test prints.
const LOG_TAIL_ON_PANIC: usize = 200;

/// A running copy of this test binary. Dropping it sends SIGKILL and
/// waits, so no child outlives its test; and it gets SIGKILL if the test's
/// thread dies first (`PR_SET_PDEATHSIG`), so not even a killed test
/// runner leaves one behind.
pub struct TestChild {
    name: String,
    child: Child,
    /// Set once `child` has been reaped, so it is never waited for twice
    /// and its pid is never signalled after it may have been reused.
    exit: Option<ExitStatus>,
    log_path: PathBuf,
    /// Holds the log file; removed when the child is dropped.
    _dir: tempfile::TempDir,
}

impl TestChild {
    /// Runs the test `test` (its full path, e.g. `module::child_entry`) in
    /// a new process with `env` set to `spec`. `name` names the log file
    /// and the messages about this child. Its stdout and stderr go to one
    /// log file ([`TestChild::log`]); `RUST_LOG` defaults to
    /// `cronlease=debug,info`.
    ///
    /// The spawning thread must live as long as the child should (the
    /// death signal follows the thread that forked): call it from the
    /// test's own thread, not from a runtime's worker.
    pub fn start(test: &str, env: &str, spec: &str, name: &str) -> TestChild {
        let exe = std::env::current_exe().expect("the test binary knows its own path");
        let dir = tempfile::Builder::new()
            .prefix("cronlease-child-")
            .tempdir()
            .expect("cannot create a temporary directory for a child's log");
        let log_path = dir.path().join(format!("{name}.log"));
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let log_err = log.try_clone().unwrap_or_else(|e| {
            panic!("cannot duplicate the handle of {}: {e}", log_path.display())
        });
        let mut command = Command::new(&exe);
        command
            .args(["--exact", test, "--nocapture", "--include-ignored"])
            .arg("--test-threads=1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .env(env, spec)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "cronlease=debug,info".into()),
            )
            .env("NO_COLOR", "1");
        super::die_with_this_thread(&mut command);
        let shown = format!("{command:?}");
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start child {name}: {e}: {shown}"));
        TestChild {
            name: name.to_string(),
            child,
            exit: None,
            log_path,
            _dir: dir,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Everything the child has written to stdout and stderr so far.
    pub fn log(&self) -> String {
        match std::fs::read(&self.log_path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => panic!("cannot read {}: {e}", self.log_path.display()),
        }
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Waits until a line of the log contains `needle` and returns that
    /// line.
    ///
    /// # Panics
    ///
    /// After `timeout`, or when the child exits first, with the log in the
    /// message.
    #[track_caller]
    pub fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log();
            if let Some(line) = log.lines().find(|l| l.contains(needle)) {
                return line.to_string();
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "child {} exited with {status} before printing {needle:?}\n--- log\n{log}",
                    self.name
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for a line with {needle:?} from child {}\n--- log\n{log}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks the child to finish, as systemd stops a service.
    #[track_caller]
    pub fn sigterm(&self) {
        if let Some(status) = self.exit {
            panic!(
                "cannot stop child {}: it already exited with {status}\n--- log\n{}",
                self.name,
                self.log()
            );
        }
        let pid = i32::try_from(self.pid()).expect("a pid fits in i32");
        kill(Pid::from_raw(pid), Signal::SIGTERM)
            .unwrap_or_else(|e| panic!("cannot send SIGTERM to child {}: {e}", self.name));
    }

    /// Kills the child with SIGKILL, as a crash or the OOM killer would,
    /// and waits for it. Does nothing if it has already exited.
    pub fn kill9(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            let status = self
                .child
                .wait()
                .unwrap_or_else(|e| panic!("cannot wait for child {}: {e}", self.name));
            self.exit = Some(status);
        }
    }

    /// Waits up to `timeout` for the child to exit and returns its status,
    /// or `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits up to `timeout` for the child to exit 0.
    ///
    /// # Panics
    ///
    /// When it does not, with its log.
    #[track_caller]
    pub fn stop(&mut self, timeout: Duration) {
        self.sigterm();
        let status = self.wait_exit(timeout);
        assert!(
            status.is_some_and(|s| s.success()),
            "child {} did not exit 0 after SIGTERM: {status:?}\n--- log\n{}",
            self.name,
            self.log()
        );
    }

    /// The exit status if the child has exited, reaping it.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self
                .child
                .try_wait()
                .unwrap_or_else(|e| panic!("cannot check child {}: {e}", self.name));
        }
        self.exit
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for TestChild {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_ON_PANIC)..];
            eprintln!(
                "--- last {} lines of child {} ({})\n{}\n--- end of child {}",
                tail.len(),
                self.name,
                self.log_path.display(),
                tail.join("\n"),
                self.name
            );
        }
    }
}
