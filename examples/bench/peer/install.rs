//! The BullMQ peer's Node project: `examples/bench/bullmq/` (compiled into
//! the bench), written to `bench-bullmq/` in the cargo target directory and
//! installed there with `npm ci` when its lockfile changed. Only the bench
//! does this, and only where `node` and `npm` are on `PATH`.
//!
//! `npm ci --ignore-scripts`: the one install script in the tree is
//! `msgpackr-extract`'s, which looks for a prebuilt binary that `msgpackr`
//! also finds at load time without it; nothing is compiled. The lockfile
//! lists `msgpackr-extract`'s packages for other platforms without an
//! integrity hash (the registry this was locked against serves only the
//! Linux ones; npm never fetches the others on Linux).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cluster::check_interrupted;
use crate::common::{cronlease_binary, detach_and_tie_to_parent, indent, on_path, tail};

/// The project's files, as committed.
const FILES: [(&str, &str); 4] = [
    ("package.json", include_str!("../bullmq/package.json")),
    (
        "package-lock.json",
        include_str!("../bullmq/package-lock.json"),
    ),
    ("producer.js", include_str!("../bullmq/producer.js")),
    ("worker.js", include_str!("../bullmq/worker.js")),
];

/// Written into `node_modules` after `npm ci`: the lockfile it installed.
const INSTALLED_MARK: &str = "node_modules/.bench-installed-lock.json";

/// How long `npm ci` may take.
const NPM_TIMEOUT: Duration = Duration::from_secs(600);

/// The installed project: its directory and BullMQ's version.
pub struct Installed {
    pub dir: PathBuf,
    pub bullmq_version: String,
}

/// Whether the peer can run here: `node` and `npm` on `PATH`.
pub fn node_found() -> bool {
    on_path("node") && on_path("npm")
}

/// Writes the project to `<target>/bench-bullmq/` and runs `npm ci` there
/// unless what is installed came from the same lockfile.
pub fn install() -> Result<Installed> {
    let dir = cronlease_binary()?
        .parent()
        .and_then(Path::parent)
        .context("unexpected location of the cronlease binary")?
        .join("bench-bullmq");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, text) in FILES {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let lock = FILES[1].1;
    let mark = dir.join(INSTALLED_MARK);
    if std::fs::read_to_string(&mark).ok().as_deref() != Some(lock) {
        npm_ci(&dir)?;
        std::fs::write(&mark, lock).with_context(|| format!("cannot write {}", mark.display()))?;
    }
    let version = std::fs::read_to_string(dir.join("node_modules/bullmq/package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|json| json["version"].as_str().map(String::from))
        .unwrap_or_else(|| "?".to_string());
    Ok(Installed {
        dir,
        bullmq_version: version,
    })
}

fn npm_ci(dir: &Path) -> Result<()> {
    let log = dir.join("npm-ci.log");
    println!("  installing the BullMQ peer: npm ci in {}", dir.display());
    let out =
        std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut command = Command::new("npm");
    command
        .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    detach_and_tie_to_parent(&mut command);
    let mut child = command.spawn().context("cannot start npm")?;
    let deadline = Instant::now() + NPM_TIMEOUT;
    loop {
        if let Err(e) = check_interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        if let Some(status) = child.try_wait().context("cannot wait for npm")? {
            if status.success() {
                return Ok(());
            }
            bail!(
                "npm ci exited with {status}; {}:\n{}",
                log.display(),
                indent(&tail(&log, 15))
            );
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("npm ci did not finish within {NPM_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
