//! A real OpenID provider per test: npm's `oidc-provider` (pinned in
//! tests/oidc/package.json, installed by `scripts/install-deps` into
//! tests/oidc/node_modules), run by tests/oidc/provider.mjs on a free
//! loopback port with its own login and consent pages, the users alice
//! (groups staff and cron-operators), victor (cron-viewers) and nora
//! (staff), and the clients `cronlease` and, whose ID tokens it alters,
//! `cronlease-wrong-aud`, `cronlease-expired` and `cronlease-tampered`.
//! Dropping it ends the process.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// How long node may take to start the provider on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// An `oidc-provider` process this test owns.
pub struct OidcProvider {
    issuer: String,
    process: Child,
    /// The process stops when this closes (and is killed on drop).
    _stdin: ChildStdin,
    log: tempfile::NamedTempFile,
}

impl OidcProvider {
    /// Starts the provider with client secret `secret`, each client
    /// allowed to come back to `/sso/callback` and `/login` under each of
    /// `bases` (`http://127.0.0.1:PORT`, the dashboards' addresses).
    ///
    /// # Panics
    ///
    /// When node or the npm packages are missing (run
    /// `scripts/install-deps`), or the provider does not listen within a
    /// minute (the message holds its output).
    pub fn start(secret: &str, bases: &[String]) -> OidcProvider {
        let dir = super::repository().join("tests/oidc");
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "{}/node_modules/oidc-provider is missing: run scripts/install-deps",
            dir.display()
        );
        let log = tempfile::NamedTempFile::new().expect("a log file for the provider");
        let mut command = Command::new("node");
        command
            .current_dir(&dir)
            .arg("provider.mjs")
            .arg(secret)
            .args(bases)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.reopen().expect("a second handle on the log"));
        super::die_with_this_thread(&mut command);
        let mut process = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run node (run scripts/install-deps): {e}"));
        let stdin = process.stdin.take().expect("a piped stdin");
        let stdout = process.stdout.take().expect("a piped stdout");
        let (sender, receiver) = std::sync::mpsc::channel();
        // Reads the first line; the thread ends when the process does.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = sender.send(line);
            }
            for _ in lines {}
        });
        let line = receiver.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
            panic!(
                "oidc-provider did not start within {START_TIMEOUT:?}: {}",
                std::fs::read_to_string(log.path()).unwrap_or_default()
            )
        });
        let issuer = line
            .strip_prefix("issuer ")
            .unwrap_or_else(|| panic!("unexpected first line from provider.mjs: {line:?}"))
            .to_string();
        OidcProvider {
            issuer,
            process,
            _stdin: stdin,
            log,
        }
    }

    /// The issuer URL (`http://127.0.0.1:PORT`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// What the provider printed on its standard error.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
