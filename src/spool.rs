//! Outcomes that could not reach Redis, kept on disk until they can.
//!
//! One file per outcome in `<state_dir>/spool/`, written to a temporary name,
//! fsync'd, renamed, and the directory fsync'd: after `save` returns, the
//! outcome survives a crash. Delivery goes through the finish script, whose
//! per-run done marker makes a second delivery a no-op, so a file is removed
//! only after Redis has the outcome and a crash between the two is harmless.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::outcome::Outcome;

/// One spooled file and what it holds (or why it could not be read).
pub type Spooled = (PathBuf, Result<Outcome, SpoolError>);

/// A spool directory.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
}

/// A spool operation that failed, naming the path.
#[derive(Debug, thiserror::Error)]
#[error("spool {path}: {source}")]
pub struct SpoolError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError {
        path: path.to_path_buf(),
        source,
    }
}

impl Spool {
    /// Opens (creating if needed) `<state_dir>/spool`.
    pub fn open(state_dir: &Path) -> Result<Spool, SpoolError> {
        let dir = state_dir.join("spool");
        fs::create_dir_all(&dir).map_err(at(&dir))?;
        Ok(Spool { dir })
    }

    /// Writes `outcome` durably. Saving the same run twice keeps one file.
    pub fn save(&self, outcome: &Outcome) -> Result<PathBuf, SpoolError> {
        let path = self.dir.join(file_name(&outcome.run_id));
        let json = serde_json::to_vec(outcome).map_err(|e| SpoolError {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        write_durably(&path, &json)?;
        Ok(path)
    }

    /// Every spooled outcome, oldest file name first. A file that cannot be
    /// read or parsed comes with its error (see [`Spool::quarantine`]).
    pub fn pending(&self) -> Result<Vec<Spooled>, SpoolError> {
        let mut paths: Vec<PathBuf> = fs::read_dir(&self.dir)
            .map_err(at(&self.dir))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        paths.sort();
        Ok(paths
            .into_iter()
            .map(|path| {
                let outcome = fs::read(&path).map_err(at(&path)).and_then(|bytes| {
                    serde_json::from_slice(&bytes).map_err(|e| SpoolError {
                        path: path.clone(),
                        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                    })
                });
                (path, outcome)
            })
            .collect())
    }

    /// Moves a spooled file that cannot be read (cut short by a power loss
    /// mid-write on a file system that does not order the rename after the
    /// data, a disk error, another writer) to `spool/quarantine/`, where it
    /// is kept for an operator and no longer read; returns its new path.
    pub fn quarantine(&self, path: &Path) -> Result<PathBuf, SpoolError> {
        let dir = self.dir.join("quarantine");
        fs::create_dir_all(&dir).map_err(at(&dir))?;
        let to = dir.join(path.file_name().unwrap_or_default());
        fs::rename(path, &to).map_err(at(path))?;
        Ok(to)
    }

    /// Removes a delivered outcome.
    pub fn remove(&self, path: &Path) -> Result<(), SpoolError> {
        match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(at(path)(e)),
        }
    }
}

/// The spool file of run `run_id`: the id itself when it is letters,
/// digits, `-` and `_` (a replica's run ids, UUIDs), else with every other
/// byte written `%XX`. A run id comes from Redis for a manual run (the
/// triggers stream, which anyone with write access can fill): one such as
/// `../../etc/x` or `/etc/x` must name a file in the spool, not elsewhere.
/// A name that would be too long for the file system (255 bytes, with the
/// writer's `.` and `.tmp`) keeps its first [`NAME_KEPT`] bytes and ends
/// with a hash of the whole id. The empty id is `%`. One run id, one name.
fn file_name(run_id: &str) -> String {
    if run_id.is_empty() {
        // Not `.json`: the reader skips hidden files (the writer's temporary
        // ones). No encoded id is a lone `%`.
        return "%.json".to_string();
    }
    let mut name = String::with_capacity(run_id.len() + 5);
    for byte in run_id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    if name.len() > NAME_KEPT + 17 {
        // FNV-1a: the same on every host and release.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in run_id.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        name.truncate(NAME_KEPT);
        name.push_str(&format!("~{hash:016x}"));
    }
    name.push_str(".json");
    name
}

/// How much of a long run id's file name is kept before its hash (ASCII:
/// any cut is at a character boundary).
const NAME_KEPT: usize = 160;

/// Replaces `path` with `bytes` so that after return the new content
/// survives a crash and a reader never sees half of it: a temporary file,
/// fsync, rename, fsync of the directory.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), SpoolError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = File::create(&tmp).map_err(at(&tmp))?;
    file.write_all(bytes).map_err(at(&tmp))?;
    file.sync_all().map_err(at(&tmp))?;
    fs::rename(&tmp, path).map_err(at(path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(at(dir))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Status, Trigger};

    fn outcome() -> Outcome {
        Outcome {
            job: "j".into(),
            tick_ms: 1,
            fence: 2,
            run_id: "run-1".into(),
            replica: "r".into(),
            host: "h".into(),
            started_ms: 1,
            finished_ms: 2,
            status: Status::Ok,
            exit_code: Some(0),
            signal: None,
            attempts: 1,
            output: "out\n".into(),
            trigger: Trigger::Schedule,
            lease_key: "k".into(),
            cpu_ms: None,
            peak_memory_kb: None,
            oom_kills: None,
        }
    }

    #[test]
    fn save_pending_remove() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let outcome = outcome();
        let path = spool.save(&outcome).unwrap();
        spool.save(&outcome).unwrap();
        let pending = spool.pending().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].1.as_ref().unwrap(), &outcome);
        spool.remove(&path).unwrap();
        spool.remove(&path).unwrap();
        assert!(spool.pending().unwrap().is_empty());
    }

    #[test]
    fn a_run_id_names_a_file_in_the_spool_whatever_it_holds() {
        // Found writing the `spool` fuzz target: a run id is a file name.
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let in_spool = dir.path().join("spool");
        let mut saved = Vec::new();
        for run_id in [
            "0b4c4c52-8f8e-4b8e-9a53-2f6c1d7e0a11",
            "../../escaped",
            "/tmp/absolute",
            "..",
            ".hidden",
            "a/b",
            "a%2Fb",
            "",
            "\u{e9}t\u{e9}",
            "\u{1d53d}".repeat(100).as_str(),
            "x".repeat(300).as_str(),
            format!("{}y", "x".repeat(299)).as_str(),
        ] {
            let outcome = Outcome {
                run_id: run_id.to_string(),
                ..outcome()
            };
            let path = spool.save(&outcome).unwrap();
            assert_eq!(
                path.parent(),
                Some(in_spool.as_path()),
                "{run_id:?}: {path:?}"
            );
            saved.push(path);
        }
        assert_eq!(
            saved[0],
            in_spool.join("0b4c4c52-8f8e-4b8e-9a53-2f6c1d7e0a11.json")
        );
        let pending = spool.pending().unwrap();
        assert_eq!(pending.len(), saved.len(), "one file per run id");
        assert!(pending.iter().all(|(_, read)| read.is_ok()));
        assert!(!dir.path().join("escaped.json").exists());
    }
}
