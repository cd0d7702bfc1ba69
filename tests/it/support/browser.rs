//! A real headless Chromium, driven over WebDriver: Debian's `chromedriver`
//! started on a free loopback port as a child process, and a `fantoccini`
//! client connected to it (plain HTTP on loopback, so no TLS connector).
//!
//! This file uses nothing else of the support module: the dashboard's
//! benchmark (`examples/dashboard_cost.rs`) includes it by path.

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

/// Where Debian's `chromium` package puts the browser.
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long chromedriver may take to listen, and Chromium to start, on a
/// loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How many log lines a browser dropped during a failing test prints.
const LOG_TAIL_ON_PANIC: usize = 60;

/// A headless Chromium session: the WebDriver client and the
/// `chromedriver` serving it. Dropping it kills chromedriver and the
/// Chromium it started (they share a process group of their own).
pub struct Browser {
    pub client: Client,
    driver: Driver,
}

impl Browser {
    /// Starts `chromedriver --port=FREE` and opens a session in a headless
    /// Chromium with a 1400×1000 window.
    ///
    /// Call it on the test's own thread (a current-thread runtime's
    /// `block_on`): chromedriver dies with the thread that started it.
    ///
    /// # Panics
    ///
    /// When chromedriver or Chromium is missing (scripts/install-deps
    /// installs them) or does not come up, with chromedriver's log.
    pub async fn start() -> Browser {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: scripts/install-deps installs Debian's chromium and chromium-driver"
        );
        let driver = Driver::start();
        let mut capabilities = fantoccini::wd::Capabilities::new();
        capabilities.insert(
            "goog:chromeOptions".to_string(),
            json!({
                "binary": CHROMIUM,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--window-size=1400,1000",
                    // Chromium talks to chromedriver over a pipe, so it
                    // exits when chromedriver does, however that ends.
                    "--remote-debugging-pipe",
                ],
            }),
        );
        let url = format!("http://127.0.0.1:{}", driver.port);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = tokio::time::timeout(
            START_TIMEOUT,
            ClientBuilder::new(connector)
                .capabilities(capabilities)
                .connect(&url),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no Chromium session within {START_TIMEOUT:?}\n--- chromedriver log\n{}",
                driver.log()
            )
        })
        .unwrap_or_else(|e| {
            panic!(
                "cannot open a Chromium session through {url}: {e}\n--- chromedriver log\n{}",
                driver.log()
            )
        });
        Browser { client, driver }
    }

    /// A PNG of the window, written to `path` (its directory created).
    pub async fn screenshot(&self, path: &Path) {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("cannot take a screenshot: {e}"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        }
        std::fs::write(path, png)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    /// Everything chromedriver has logged so far.
    pub fn driver_log(&self) -> String {
        self.driver.log()
    }
}

/// The `chromedriver` process: its port, its log, killed with its group on
/// drop.
struct Driver {
    child: Child,
    port: u16,
    log_path: PathBuf,
    /// Holds the log file.
    _dir: tempfile::TempDir,
}

impl Driver {
    /// Starts chromedriver on a free port and waits until it answers. A
    /// port that was free a moment ago can be taken before chromedriver
    /// binds it, so a few are tried.
    fn start() -> Driver {
        let mut failures = Vec::new();
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port();
            let mut driver = Driver::spawn(port);
            match driver.wait_listening() {
                Ok(()) => return driver,
                Err(e) => failures.push(format!("port {port}: {e}\n{}", driver.log())),
            }
        }
        panic!("chromedriver did not start:\n{}", failures.join("\n---\n"));
    }

    fn spawn(port: u16) -> Driver {
        let dir = tempfile::Builder::new()
            .prefix("cronlease-chromedriver-")
            .tempdir()
            .expect("a temporary directory for chromedriver's log");
        let log_path = dir.path().join("chromedriver.log");
        let log = File::create(&log_path).expect("chromedriver's log file");
        let log_err = log.try_clone().expect("chromedriver's log file, twice");
        let mut command = Command::new("chromedriver");
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own group, so that Drop kills Chromium with it.
            .process_group(0);
        // SAFETY: between fork and exec only async-signal-safe calls are
        // allowed; prctl(2) is one, and nothing here allocates.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start chromedriver: {e} (scripts/install-deps installs Debian's chromium-driver)"
            )
        });
        Driver {
            child,
            port,
            log_path,
            _dir: dir,
        }
    }

    fn wait_listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("chromedriver exited with {status}"));
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "chromedriver did not listen within {START_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group chromedriver leads: chromedriver and every Chromium
        // process it started.
        let _ = kill(Pid::from_raw(-(self.child.id() as i32)), Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_ON_PANIC)..];
            eprintln!(
                "--- last {} lines of chromedriver's log\n{}\n--- end of chromedriver's log",
                tail.len(),
                tail.join("\n")
            );
        }
    }
}
