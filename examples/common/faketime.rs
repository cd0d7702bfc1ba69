//! A process's clock skewed by preloading libfaketime, for the chaos suite
//! (`examples/chaos`) and the integration tests (`tests/it/support`, which
//! include this file by its path: std only).

use std::path::{Path, PathBuf};

/// Where Debian's `libfaketime` package put `libfaketime.so.1`
/// (`/usr/lib/<multiarch>/faketime/`), if it is installed.
pub fn libfaketime() -> Option<PathBuf> {
    let lib = Path::new("/usr/lib");
    let dirs = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .chain([lib.to_path_buf(), PathBuf::from("/usr/lib64")]);
    dirs.map(|dir| dir.join("faketime/libfaketime.so.1"))
        .find(|path| path.is_file())
}

/// The environment that runs a process as on a host whose wall clock is
/// `offset` (`"+1.5s"`, `"-5s"`) off: `libfaketime` preloaded, its
/// monotonic clock left real as a host's is. Preloaded directly rather
/// than through the `faketime` wrapper, whose named semaphore
/// (`/dev/shm/sem.faketime_sem_PID`) outlives a killed wrapper and makes a
/// later wrapper with the same pid refuse to start.
pub fn skewed_clock(libfaketime: &Path, offset: &str) -> [(&'static str, String); 3] {
    [
        ("LD_PRELOAD", libfaketime.display().to_string()),
        ("FAKETIME", offset.to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
    ]
}
