//! Shared helpers: running the `cronlease` binary and reporting everything
//! about a run that did not go as expected.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What one run of the binary did.
pub struct Run {
    pub command: String,
    pub output: Output,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "command: {}\nstatus: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.command,
            self.output.status,
            self.stdout(),
            self.stderr()
        )
    }

    /// Asserts the exit code and returns self for further checks.
    #[track_caller]
    pub fn expect_code(self, code: i32) -> Self {
        assert_eq!(
            self.code(),
            Some(code),
            "unexpected exit status\n{}",
            self.describe()
        );
        self
    }
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cronlease"))
}

/// Runs `cronlease ARGS…` to completion with no standard input.
pub fn cronlease<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(binary());
    command.args(args).stdin(std::process::Stdio::null());
    command.env_remove("CRONLEASE_CONFIG");
    let shown = format!("{command:?}");
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    Run {
        command: shown,
        output,
    }
}

/// A temporary directory holding one config file.
pub struct ConfigFile {
    /// Held so the directory lives as long as the file.
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl ConfigFile {
    pub fn new(text: &str) -> ConfigFile {
        let dir = tempfile::tempdir().expect("cannot create a temporary directory");
        let path = dir.path().join("jobs.toml");
        std::fs::write(&path, text).expect("cannot write the config file");
        ConfigFile { _dir: dir, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The top of a valid config; tests append jobs to it.
pub const REDIS_SECTION: &str = "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n";
