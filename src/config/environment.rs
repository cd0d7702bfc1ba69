//! Everything the config loader reads from outside the text it checks: the
//! config file itself, the working directory (relative config paths), the
//! environment (`password_env`, systemd's `STATE_DIRECTORY`) and the files
//! `[redis]` names (`password_file`, the TLS PEM files).
//!
//! The validators call these and turn what they return into problems; no
//! other file of the loader touches the process's environment or the file
//! system. The loader never reads the clock: [`Config::warnings`](super::Config::warnings)
//! takes `now` from its caller.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::MAX_CONFIG_BYTES;

/// The text of the config file at `path`, refused if it is larger than
/// [`MAX_CONFIG_BYTES`] or not UTF-8. The error is the problem's message.
pub(super) fn read_config_file(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open config file: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read config file: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "config file is larger than {MAX_CONFIG_BYTES} bytes (64 MiB): is this the right file?"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "config file is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// The directory relative paths in the file at `path` resolve against: the
/// file's own directory, made absolute against the working directory (left
/// as it is if that cannot be read).
pub(super) fn config_dir(path: &Path) -> PathBuf {
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let base_dir = if base_dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        base_dir
    };
    std::path::absolute(&base_dir).unwrap_or(base_dir)
}

/// systemd's `StateDirectory=` (`$STATE_DIRECTORY`, the first if it lists
/// several), if set and not empty.
pub(super) fn systemd_state_directory() -> Option<PathBuf> {
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|dirs| std::env::split_paths(&dirs).next())
        .filter(|dir| !dir.as_os_str().is_empty())
}

/// The value of the environment variable `name`, if it is set, valid
/// Unicode and not empty (`password_env`).
pub(super) fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The most a password file may hold: a bigger one (or `/dev/zero`) is
/// not a password, and is refused before it fills the memory.
const MAX_PASSWORD_FILE: u64 = 64 * 1024;
/// The most a TLS PEM file may hold.
pub(crate) const MAX_PEM_FILE: u64 = 1024 * 1024;

/// The bytes of the file at `path`, or an error (`InvalidData`) when it
/// holds more than `limit`: read at most `limit + 1` bytes, whatever the
/// file is.
pub(crate) fn read_bounded(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(bytes)
}

/// The password in the file at `path` (`password_file`): its text without
/// trailing line ends; `Ok(None)` when nothing else is left.
pub(super) fn read_password_file(path: &str) -> std::io::Result<Option<String>> {
    let bytes = read_bounded(std::path::Path::new(path), MAX_PASSWORD_FILE)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let password = text.trim_end_matches(['\r', '\n']);
    Ok((!password.is_empty()).then(|| password.to_string()))
}

/// Whether the file at `path` can be read (a TLS PEM file: read again, and
/// parsed, when the connection is made).
pub(super) fn check_readable(path: &str) -> std::io::Result<()> {
    read_bounded(std::path::Path::new(path), MAX_PEM_FILE).map(drop)
}
