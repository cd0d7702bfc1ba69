//! Outcomes that could not reach Redis, kept on disk until they can.
//!
//! One file per outcome in `<state_dir>/spool/`, written to a temporary name,
//! fsync'd, renamed, and the directory fsync'd: after `save` returns, the
//! outcome survives a crash. Delivery goes through the finish script, whose
//! per-run done marker makes a second delivery a no-op, so a file is removed
//! only after Redis has the outcome and a crash between the two is harmless.
//!
//! The spool is a trust boundary: whatever is in the directory is read by
//! the replica and sent to Redis. So the directory is the replica's alone
//! (0700, tightened when found wider; never a symbolic link), its files are
//! 0600, and no file in it is opened through a symbolic link (`O_NOFOLLOW`)
//! or read unless it is a regular file of at most [`MAX_FILE_BYTES`]; what
//! is not is refused like a file cut short, and moved aside by
//! [`Spool::quarantine`].
//!
//! What the spool holds (files and bytes) is counted in memory: from one
//! listing when it is opened, kept up to date by `save`, `remove` and
//! `quarantine`, and taken again from the directory by each listing for
//! delivery ([`Spool::listing`]). So saving an outcome costs the same
//! whatever the spool holds, and the size cap (`[daemon] spool_max_bytes`)
//! is checked without reading the directory.
//!
//! Every function here blocks (file system calls, fsync): the daemon calls
//! them from `spawn_blocking`, never on an async worker.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::{info, warn};

use crate::outcome::Outcome;

/// One spooled file and what it holds (or why it could not be read).
#[cfg_attr(
    not(feature = "internals"),
    allow(dead_code, reason = "for the tests, fuzz targets and benchmarks")
)]
pub type Spooled = (PathBuf, Result<Outcome, SpoolError>);

/// The default of `[daemon] spool_max_bytes`: 256 MiB, some 50,000
/// outcomes with the default output tail.
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The largest spool file read: an outcome holds at most a 1 MiB output
/// tail (`output_tail_bytes`), which JSON may write six times longer. A
/// larger file is no outcome of ours and is refused, not read into memory.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The mode of the spool directory: the replica's alone.
const DIR_MODE: u32 = 0o700;

/// The mode of every file the spool (and [`write_durably`]) writes.
const FILE_MODE: u32 = 0o600;

/// A spool directory. Clones share one count of what it holds.
#[derive(Debug, Clone)]
pub struct Spool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    /// `[daemon] spool_max_bytes`: the most the spooled files may hold.
    max_bytes: u64,
    /// What the spool holds. A `std` mutex: held for a few map operations,
    /// never across a file system call or an `.await`.
    ledger: Mutex<Ledger>,
}

/// What the spool holds, kept in memory.
#[derive(Debug, Default)]
struct Ledger {
    /// Spooled files by name and their sizes in bytes (0 for an entry
    /// that is not a regular file: it waits to be moved aside).
    files: HashMap<OsString, u64>,
    /// Outcomes being written (name, bytes reserved for them), counted
    /// before they are on disk so that concurrent saves share the cap.
    writing: Vec<(OsString, u64)>,
    /// The sizes of `files` and `writing` together.
    bytes: u64,
}

/// A spool operation that failed, naming the path.
#[derive(Debug, thiserror::Error)]
#[error("spool {path}: {source}")]
pub struct SpoolError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Why an outcome was not saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Saving it would take the spool past `[daemon] spool_max_bytes`:
    /// nothing was written.
    #[error(
        "the spool is full: {held} bytes spooled, and this outcome's {needed} bytes would pass spool_max_bytes = {max_bytes}"
    )]
    Full {
        held: u64,
        needed: u64,
        max_bytes: u64,
    },
    /// The disk refused it (full, failing, read-only); no temporary file
    /// is left behind.
    #[error(transparent)]
    Write(#[from] SpoolError),
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError {
        path: path.to_path_buf(),
        source,
    }
}

/// An error of `path` that is no system call's (`kind`, and why).
fn refused(path: &Path, kind: std::io::ErrorKind, why: &str) -> SpoolError {
    SpoolError {
        path: path.to_path_buf(),
        source: std::io::Error::new(kind, why.to_string()),
    }
}

impl Spool {
    /// Opens (creating if needed) `<state_dir>/spool`, which may hold at
    /// most `max_bytes` of outcomes. The directory is made 0700 (a wider
    /// one is tightened and logged); temporary files a crash left
    /// mid-write are removed, spooled files readable by others are made
    /// 0600, and what the spool holds is counted.
    pub fn open(state_dir: &Path, max_bytes: u64) -> Result<Spool, SpoolError> {
        let dir = state_dir.join("spool");
        private_dir(&dir)?;
        let spool = Spool {
            shared: Arc::new(Shared {
                dir,
                max_bytes,
                ledger: Mutex::default(),
            }),
        };
        spool.tidy()?;
        spool.listing()?;
        Ok(spool)
    }

    /// The spool's directory.
    #[cfg_attr(
        not(feature = "internals"),
        allow(dead_code, reason = "for the tests, fuzz targets and benchmarks")
    )]
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// How many outcome files the spool holds, as counted in memory (no
    /// file system call).
    pub fn len(&self) -> usize {
        self.ledger().files.len()
    }

    /// Whether the spool holds no outcome file, as counted in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes the spool's files hold (and those being written), as
    /// counted in memory.
    #[cfg_attr(
        not(feature = "internals"),
        allow(dead_code, reason = "for the tests, fuzz targets and benchmarks")
    )]
    pub fn bytes(&self) -> u64 {
        self.ledger().bytes
    }

    /// Writes `outcome` durably, unless that would take the spool past its
    /// cap ([`SaveError::Full`]: nothing is written). Saving the same run
    /// twice keeps one file. A write that fails leaves no file behind.
    /// Costs the same whatever the spool holds: the directory is not read.
    pub fn save(&self, outcome: &Outcome) -> Result<PathBuf, SaveError> {
        let name = OsString::from(file_name(&outcome.run_id));
        let path = self.shared.dir.join(&name);
        let json = serde_json::to_vec(outcome).map_err(|e| SpoolError {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        let needed = u64::try_from(json.len()).unwrap_or(u64::MAX);
        self.reserve(&name, needed)?;
        let written = write_durably(&path, &json);
        self.settle(&name, needed, &written);
        written?;
        Ok(path)
    }

    /// Counts `needed` bytes for `name` before it is written, or refuses
    /// them when they would pass the cap.
    fn reserve(&self, name: &OsStr, needed: u64) -> Result<(), SaveError> {
        let mut ledger = self.ledger();
        let held = ledger.bytes;
        if held.saturating_add(needed) > self.shared.max_bytes {
            return Err(SaveError::Full {
                held,
                needed,
                max_bytes: self.shared.max_bytes,
            });
        }
        ledger.writing.push((name.to_os_string(), needed));
        ledger.bytes = held + needed;
        Ok(())
    }

    /// Ends the reservation of [`Spool::reserve`]: the file is counted if
    /// it was written.
    fn settle(&self, name: &OsStr, needed: u64, written: &Result<(), SpoolError>) {
        let mut ledger = self.ledger();
        if let Some(i) = ledger
            .writing
            .iter()
            .position(|(n, size)| n == name && *size == needed)
        {
            ledger.writing.swap_remove(i);
            ledger.bytes = ledger.bytes.saturating_sub(needed);
        }
        if written.is_ok() {
            let replaced = ledger.files.insert(name.to_os_string(), needed);
            ledger.bytes = (ledger.bytes + needed).saturating_sub(replaced.unwrap_or(0));
        }
    }

    /// Forgets the file `path` in the count (removed or moved aside).
    fn forget(&self, path: &Path) {
        let Some(name) = path.file_name() else { return };
        let mut ledger = self.ledger();
        if let Some(size) = ledger.files.remove(name) {
            ledger.bytes = ledger.bytes.saturating_sub(size);
        }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        // A panic cannot leave the ledger half-updated in a way that
        // matters: at worst a count is off until the next listing.
        self.shared
            .ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The spooled files, oldest name first, read from the directory (what
    /// is in memory is counted again from it). Every name is listed,
    /// whatever it is (a symbolic link, a directory, a FIFO): reading it
    /// ([`Spool::read`]) refuses what is not a regular file.
    pub fn listing(&self) -> Result<Vec<PathBuf>, SpoolError> {
        let dir = &self.shared.dir;
        let mut files = HashMap::new();
        for entry in fs::read_dir(dir).map_err(at(dir))?.flatten() {
            let name = entry.file_name();
            if !is_outcome_name(&name) {
                continue;
            }
            // The entry's own type and size: a symbolic link is not followed.
            let size = match entry.metadata() {
                Ok(meta) if meta.file_type().is_file() => meta.len(),
                _ => 0,
            };
            files.insert(name, size);
        }
        let mut paths: Vec<PathBuf> = files.keys().map(|name| dir.join(name)).collect();
        paths.sort();
        let mut ledger = self.ledger();
        let writing: u64 = ledger.writing.iter().map(|(_, size)| size).sum();
        ledger.bytes = files.values().sum::<u64>().saturating_add(writing);
        ledger.files = files;
        Ok(paths)
    }

    /// The outcome in the spooled file `path`. Refused, unread: a symbolic
    /// link (never followed), anything but a regular file, a file larger
    /// than [`MAX_FILE_BYTES`]; and a file that is not an outcome.
    pub fn read(&self, path: &Path) -> Result<Outcome, SpoolError> {
        let bytes = read_regular(path)?;
        serde_json::from_slice(&bytes).map_err(|e| SpoolError {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    /// Every spooled outcome, oldest file name first ([`Spool::listing`],
    /// each file [`Spool::read`]). A file that cannot be read comes with
    /// its error (see [`Spool::quarantine`]).
    #[cfg_attr(
        not(feature = "internals"),
        allow(dead_code, reason = "for the tests, fuzz targets and benchmarks")
    )]
    pub fn pending(&self) -> Result<Vec<Spooled>, SpoolError> {
        Ok(self
            .listing()?
            .into_iter()
            .map(|path| {
                let outcome = self.read(&path);
                (path, outcome)
            })
            .collect())
    }

    /// Moves a spooled file that cannot be read (cut short by a power loss
    /// mid-write on a file system that does not order the rename after the
    /// data, a disk error, another writer, a symbolic link: the link itself
    /// is moved, not what it names) to `spool/quarantine/`, where it is
    /// kept for an operator and no longer read; returns its new path.
    pub fn quarantine(&self, path: &Path) -> Result<PathBuf, SpoolError> {
        let dir = self.shared.dir.join("quarantine");
        private_dir(&dir)?;
        let to = dir.join(path.file_name().unwrap_or_default());
        fs::rename(path, &to).map_err(at(path))?;
        self.forget(path);
        Ok(to)
    }

    /// Removes a delivered outcome.
    pub fn remove(&self, path: &Path) -> Result<(), SpoolError> {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(at(path)(e)),
        }
        self.forget(path);
        Ok(())
    }

    /// Removes the temporary files of writes a crash cut short (never
    /// renamed, so never an outcome), and makes spooled files that others
    /// could read 0600.
    fn tidy(&self) -> Result<(), SpoolError> {
        let dir = &self.shared.dir;
        let (mut removed, mut tightened) = (0usize, 0usize);
        for entry in fs::read_dir(dir).map_err(at(dir))?.flatten() {
            let name = entry.file_name();
            let path = entry.path();
            if is_temporary_name(&name) {
                match fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(e) => {
                        warn!(path = %path.display(), error = %e, "cannot remove a temporary spool file")
                    }
                }
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if is_outcome_name(&name)
                && meta.file_type().is_file()
                && meta.permissions().mode() & 0o077 != 0
            {
                match tighten(&path) {
                    Ok(()) => tightened += 1,
                    Err(e) => warn!(error = %e, "cannot make a spooled file 0600"),
                }
            }
        }
        if removed > 0 {
            info!(dir = %dir.display(), removed, "temporary files of interrupted spool writes removed");
        }
        if tightened > 0 {
            warn!(dir = %dir.display(), files = tightened, "spooled files were readable by other users; their mode is now 0600");
        }
        Ok(())
    }
}

/// Whether `name` is a spooled outcome's: `*.json`, not hidden (the
/// writer's temporary files are).
fn is_outcome_name(name: &OsStr) -> bool {
    let name = name.as_encoded_bytes();
    name.ends_with(b".json") && !name.starts_with(b".")
}

/// Whether `name` is one of [`write_durably`]'s temporary files.
fn is_temporary_name(name: &OsStr) -> bool {
    let name = name.as_encoded_bytes();
    name.starts_with(b".") && name.ends_with(b".tmp")
}

/// Makes the directory `dir` (and its parents) if needed, the replica's
/// alone: created 0700, tightened to 0700 (and logged) when others could
/// use it, refused when it is a symbolic link or not a directory.
fn private_dir(dir: &Path) -> Result<(), SpoolError> {
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent).map_err(at(parent))?;
    }
    match fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(at(dir)(e)),
    }
    let meta = fs::symlink_metadata(dir).map_err(at(dir))?;
    if meta.file_type().is_symlink() {
        return Err(refused(
            dir,
            std::io::ErrorKind::InvalidInput,
            "a symbolic link, not followed: expected a directory of the replica's own",
        ));
    }
    if !meta.is_dir() {
        return Err(refused(
            dir,
            std::io::ErrorKind::InvalidInput,
            "not a directory",
        ));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        let handle = OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
            .open(dir)
            .map_err(at(dir))?;
        handle
            .set_permissions(fs::Permissions::from_mode(DIR_MODE))
            .map_err(at(dir))?;
        warn!(
            dir = %dir.display(), mode = %format!("{mode:04o}"),
            "the spool directory was open to other users; its mode is now 0700"
        );
    }
    Ok(())
}

/// Opens `path` for reading only if it is a regular file, never through a
/// symbolic link and never blocking (a FIFO).
fn open_regular(path: &Path) -> Result<File, SpoolError> {
    // Looked at before it is opened: opening a device or a FIFO can have
    // effects of its own.
    let meta = fs::symlink_metadata(path).map_err(at(path))?;
    not_followed(path, &meta)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                symbolic_link(path)
            } else {
                at(path)(e)
            }
        })?;
    // And again on what was opened, in case the name changed meanwhile.
    let meta = file.metadata().map_err(at(path))?;
    not_followed(path, &meta)?;
    Ok(file)
}

/// Refuses what is not a regular file.
fn not_followed(path: &Path, meta: &fs::Metadata) -> Result<(), SpoolError> {
    if meta.file_type().is_symlink() {
        Err(symbolic_link(path))
    } else if !meta.file_type().is_file() {
        Err(refused(
            path,
            std::io::ErrorKind::InvalidData,
            "not a regular file, not read",
        ))
    } else {
        Ok(())
    }
}

fn symbolic_link(path: &Path) -> SpoolError {
    refused(
        path,
        std::io::ErrorKind::InvalidData,
        "a symbolic link, not followed",
    )
}

/// The bytes of the regular file `path`, at most [`MAX_FILE_BYTES`].
fn read_regular(path: &Path) -> Result<Vec<u8>, SpoolError> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(at(path))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(refused(
            path,
            std::io::ErrorKind::InvalidData,
            "larger than any outcome (16 MiB), not read",
        ));
    }
    Ok(bytes)
}

/// Makes the regular file `path` 0600, through a descriptor opened without
/// following a symbolic link.
fn tighten(path: &Path) -> Result<(), SpoolError> {
    open_regular(path)?
        .set_permissions(fs::Permissions::from_mode(FILE_MODE))
        .map_err(at(path))
}

/// The spool file of run `run_id`: the id itself when it is letters,
/// digits, `-` and `_` (a replica's run ids, UUIDs), else with every other
/// byte written `%XX`. A run id comes from Redis for a manual run (the
/// triggers stream, which anyone with write access can fill): one such as
/// `../../etc/x` or `/etc/x` must name a file in the spool, not elsewhere.
/// A name that would be too long for the file system (255 bytes, with the
/// writer's `.`, number and `.tmp`) keeps its first [`NAME_KEPT`] bytes and ends
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
/// survives a crash and a reader never sees half of it: a temporary file
/// (0600, a name of its own, created new: never an existing file or a
/// symbolic link), fsync, rename, fsync of the directory. A write that
/// fails (a full disk, a file size limit) removes its temporary file.
/// Blocks: call it off the async workers.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), SpoolError> {
    /// Numbers the temporary files, so that two writers never share one.
    static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{n}.tmp"));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(at(&tmp))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(at(&tmp))
        .and_then(|()| fs::rename(&tmp, path).map_err(at(path)));
    drop(file);
    if let Err(e) = written {
        // The temporary file is ours alone (created new): nothing else
        // can be removed by this.
        if let Err(removal) = fs::remove_file(&tmp)
            && removal.kind() != std::io::ErrorKind::NotFound
        {
            warn!(path = %tmp.display(), error = %removal, "cannot remove the temporary file of a failed write");
        }
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(at(dir))?;
    Ok(())
}

#[cfg(test)]
mod tests;
