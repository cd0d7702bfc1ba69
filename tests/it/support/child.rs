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

use std::ops::{Deref, DerefMut};
use std::process::Command;
use std::time::Duration;

use super::process::LoggedProcess;

/// A running copy of this test binary: a [`LoggedProcess`] (SIGKILL on
/// Drop and with the test's thread, so not even a killed test runner leaves
/// one behind).
pub struct TestChild(LoggedProcess);

impl TestChild {
    /// Runs the test `test` (its full path, e.g. `module::child_entry`) in
    /// a new process with `env` set to `spec`. `name` names the log file
    /// and the messages about this child. `RUST_LOG` defaults to
    /// `cronlease=debug,info`.
    ///
    /// The spawning thread must live as long as the child should (the
    /// death signal follows the thread that forked): call it from the
    /// test's own thread, not from a runtime's worker.
    pub fn start(test: &str, env: &str, spec: &str, name: &str) -> TestChild {
        let exe = std::env::current_exe().expect("the test binary knows its own path");
        let mut command = Command::new(&exe);
        command
            .args(["--exact", test, "--nocapture", "--include-ignored"])
            .arg("--test-threads=1")
            .env(env, spec)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "cronlease=debug,info".into()),
            )
            .env("NO_COLOR", "1");
        TestChild(LoggedProcess::start("child", name, command))
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
            self.name(),
            self.log()
        );
    }
}

impl Deref for TestChild {
    type Target = LoggedProcess;

    fn deref(&self) -> &LoggedProcess {
        &self.0
    }
}

impl DerefMut for TestChild {
    fn deref_mut(&mut self) -> &mut LoggedProcess {
        &mut self.0
    }
}
