//! Where libfaketime is, for what skews a process's clock by preloading
//! it: the chaos suite (`examples/chaos`) and the integration tests
//! (`tests/it/support`, which include this file by its path: std only).

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
