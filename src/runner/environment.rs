//! A run's environment, built at each run: the replica's variables that an
//! allowlist names (never the replica's secrets), the job's `env`, its
//! `env_files` and `env_credentials`, and the run's `CRONLEASE_*`, in that
//! order (a later one wins); and the [`Redactor`] that keeps the secret
//! values among them, and the replica's own, out of the run's output.

use std::borrow::Cow;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{Config, DEFAULT_INHERITED_ENV, EnvPattern, RESERVED_ENV_PREFIX};

/// What replaces a secret's value in a run's output.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not looked for in output: a value of a
/// few bytes would blank out ordinary words and numbers.
pub const MIN_REDACTED_LEN: usize = 4;

/// Largest env file read: secrets, not data.
const MAX_ENV_FILE: u64 = 1024 * 1024;

/// The replica's environment as its runs may see it, taken once at start.
#[derive(Debug, Clone, Default)]
pub struct ReplicaEnv {
    /// The replica's variables with a name a run can be given, its secret
    /// variables left out.
    vars: Arc<[(String, OsString)]>,
    /// The values of the replica's own secrets (its Redis password, its
    /// dashboard token, the secret variables' values): redacted from every
    /// run's output.
    secrets: Arc<[Vec<u8>]>,
    /// `$CREDENTIALS_DIRECTORY` (systemd's `LoadCredential=`).
    credentials_dir: Option<PathBuf>,
}

impl ReplicaEnv {
    /// The process's environment now, for runs: the variables
    /// `secret_names` (the replica's secrets: [`Config::secret_env_names`])
    /// left out and their values kept for redaction beside
    /// `secret_values`, those read elsewhere (the Redis password, the
    /// dashboard token).
    pub fn capture(secret_names: &[String], secret_values: Vec<Vec<u8>>) -> ReplicaEnv {
        ReplicaEnv::from_vars(std::env::vars_os(), secret_names, secret_values)
    }

    /// [`ReplicaEnv::capture`] for the daemon's `config`, `extra` its
    /// secrets read outside the config (the dashboard tokens).
    pub fn for_config(config: &Config, extra: Vec<Vec<u8>>) -> ReplicaEnv {
        ReplicaEnv::for_reload(config, config, extra)
    }

    /// [`ReplicaEnv::capture`] after a reload: the secrets of the config
    /// the replica started with (its Redis password stays in use until a
    /// restart) and of the `reloaded` one (tokens and channels a reload
    /// added), `extra` the secrets read outside the config (the dashboard
    /// tokens as reloaded).
    pub fn for_reload(running: &Config, reloaded: &Config, extra: Vec<Vec<u8>>) -> ReplicaEnv {
        let values = running
            .redis
            .password
            .iter()
            .map(|p| p.expose().as_bytes().to_vec())
            .chain(extra)
            .collect();
        let mut names = running.secret_env_names();
        names.extend(reloaded.secret_env_names());
        ReplicaEnv::capture(&names, values)
    }

    fn from_vars(
        vars: impl Iterator<Item = (OsString, OsString)>,
        secret_names: &[String],
        secret_values: Vec<Vec<u8>>,
    ) -> ReplicaEnv {
        let mut secrets = secret_values;
        let mut kept = Vec::new();
        let mut credentials_dir = None;
        for (name, value) in vars {
            let Ok(name) = name.into_string() else {
                continue;
            };
            if name == "CREDENTIALS_DIRECTORY" {
                credentials_dir = Some(PathBuf::from(&value));
            }
            if secret_names.contains(&name) {
                secrets.push(value.into_vec());
            } else {
                kept.push((name, value));
            }
        }
        ReplicaEnv {
            vars: kept.into(),
            secrets: secrets.into(),
            credentials_dir,
        }
    }

    /// The values of the replica's secrets, for a run's redactor.
    pub fn secrets(&self) -> Arc<[Vec<u8>]> {
        self.secrets.clone()
    }

    /// The names of the replica's variables that no run inherits under
    /// `daemon_patterns` and any of `job_patterns`: for the start-up log,
    /// names only.
    pub fn not_inherited<'a>(
        &self,
        daemon_patterns: &[EnvPattern],
        job_patterns: impl Iterator<Item = &'a [EnvPattern]> + Clone,
    ) -> Vec<&str> {
        self.vars
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| {
                !is_systemds(name)
                    && !inherits(name, daemon_patterns, &[])
                    && !job_patterns.clone().any(|job| inherits(name, &[], job))
            })
            .collect()
    }

    /// What a run of a job with `job_patterns` inherits: the default list,
    /// `[daemon] inherit_env` and the job's, never a secret nor systemd's
    /// channels to the replica.
    pub fn for_run(
        &self,
        daemon_patterns: &[EnvPattern],
        job_patterns: &[EnvPattern],
    ) -> Vec<(String, OsString)> {
        self.vars
            .iter()
            .filter(|(name, _)| inherits(name, daemon_patterns, job_patterns) && !is_systemds(name))
            .cloned()
            .collect()
    }
}

/// Whether `name` is in the default list or matches one of the patterns.
fn inherits(name: &str, daemon: &[EnvPattern], job: &[EnvPattern]) -> bool {
    DEFAULT_INHERITED_ENV
        .iter()
        .any(|pattern| crate::config::pattern_matches(pattern, name))
        || daemon.iter().chain(job).any(|p| p.matches(name))
}

/// systemd's channels to the service itself, never a run's.
fn is_systemds(name: &str) -> bool {
    matches!(
        name,
        "NOTIFY_SOCKET"
            | "WATCHDOG_USEC"
            | "WATCHDOG_PID"
            | "LISTEN_FDS"
            | "LISTEN_PID"
            | "LISTEN_FDNAMES"
            | "CREDENTIALS_DIRECTORY"
            | "INVOCATION_ID"
            | "JOURNAL_STREAM"
    )
}

/// What a run's process environment is made of, read into one at each
/// attempt ([`RunEnv::resolve`]).
#[derive(Debug, Clone, Default)]
pub struct RunEnv {
    /// From the replica ([`ReplicaEnv::for_run`]).
    pub inherited: Vec<(String, OsString)>,
    /// The job's `env`.
    pub job: Vec<(String, String)>,
    /// The job's `env_files`, in order.
    pub files: Vec<PathBuf>,
    /// The job's `env_credentials`: variable, credential name.
    pub credentials: Vec<(String, String)>,
    /// `$CREDENTIALS_DIRECTORY`, where the credentials are.
    pub credentials_dir: Option<PathBuf>,
    /// The run's `CRONLEASE_*` variables: set last, so nothing overrides them.
    pub run: Vec<(String, String)>,
    /// The replica's own secrets, redacted from the run's output.
    pub secrets: Arc<[Vec<u8>]>,
}

impl RunEnv {
    /// What `cronlease lock`'s command inherits of the caller's
    /// environment: the default list, the config's `[daemon] inherit_env`
    /// and `inherit` (`--inherit-env`), never a secret.
    pub fn for_lock(config: Option<&Config>, inherit: &[EnvPattern]) -> RunEnv {
        let replica = match config {
            Some(config) => ReplicaEnv::for_config(config, Vec::new()),
            None => ReplicaEnv::capture(&crate::config::secret_env_names(None, None), Vec::new()),
        };
        let daemon = config.map_or(&[][..], |c| &c.daemon.inherit_env[..]);
        RunEnv {
            inherited: replica.for_run(daemon, inherit),
            secrets: replica.secrets(),
            ..RunEnv::default()
        }
    }

    /// The environment of a run of a job with `job_patterns`, `files` and
    /// `credentials` on a replica whose environment is `replica`.
    pub fn new(
        replica: &ReplicaEnv,
        daemon_patterns: &[EnvPattern],
        job: &crate::config::Job,
        run: Vec<(String, String)>,
    ) -> RunEnv {
        RunEnv {
            inherited: replica.for_run(daemon_patterns, &job.inherit_env),
            job: job
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            files: job.env_files.clone(),
            credentials: job
                .env_credentials
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            credentials_dir: replica.credentials_dir.clone(),
            run,
            secrets: replica.secrets.clone(),
        }
    }

    /// The whole environment, reading the env files and credentials now,
    /// and the redactor of the secrets among it. Err: why the run cannot
    /// start (a file unsafe or unreadable, a bad line), never a value.
    pub fn resolve(&self) -> Result<(Vec<(OsString, OsString)>, Redactor), String> {
        let mut vars: Vec<(OsString, OsString)> = Vec::new();
        let mut set = |name: &str, value: OsString| {
            vars.retain(|(n, _)| n.as_bytes() != name.as_bytes());
            vars.push((OsString::from(name), value));
        };
        for (name, value) in &self.inherited {
            set(name, value.clone());
        }
        for (name, value) in &self.job {
            set(name, OsString::from(value));
        }
        let mut secrets: Vec<Vec<u8>> = self.secrets.to_vec();
        for file in &self.files {
            for (name, value) in read_env_file(file)? {
                secrets.push(value.clone().into_vec());
                set(&name, value);
            }
        }
        for (name, credential) in &self.credentials {
            let value = read_credential(self.credentials_dir.as_deref(), credential)?;
            secrets.push(value.clone().into_vec());
            set(name, value);
        }
        for (name, value) in &self.run {
            set(name, OsString::from(value));
        }
        Ok((vars, Redactor::new(secrets)))
    }
}

/// Refuses a file anyone but its owner can change, or owned by someone
/// other than root or this process's user: whoever could write it could
/// give a run any environment.
fn check_owner_and_mode(path: &Path, what: &str) -> Result<(), String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "the {what} {} is not a regular file",
            path.display()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "the {what} {} is writable by its group or others (mode {:o}): refused; make it writable by its owner only (chmod go-w)",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { nix::libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "the {what} {} belongs to uid {}, neither root nor this replica's user (uid {me}): refused",
            path.display(),
            meta.uid()
        ));
    }
    Ok(())
}

/// `NAME=value` lines (an `export ` before the name, blank lines and `#`
/// comments allowed; a value in matching single or double quotes loses
/// them). Errors name the file and line, never a value.
fn read_env_file(path: &Path) -> Result<Vec<(String, OsString)>, String> {
    check_owner_and_mode(path, "env file")?;
    let bytes = crate::config::read_bounded(path, MAX_ENV_FILE)
        .map_err(|e| format!("cannot read the env file {}: {e}", path.display()))?;
    parse_env_file(&bytes)
        .map_err(|(line, why)| format!("env file {} line {line}: {why}", path.display()))
}

fn parse_env_file(bytes: &[u8]) -> Result<Vec<(String, OsString)>, (usize, String)> {
    let mut vars = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.trim_ascii_start();
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        let line = line.strip_prefix(b"export ").unwrap_or(line);
        let Some(eq) = line.iter().position(|&b| b == b'=') else {
            return Err((i + 1, "expected NAME=value".into()));
        };
        let name = std::str::from_utf8(line[..eq].trim_ascii())
            .ok()
            .filter(|n| EnvPattern::parse(n).is_some() && !n.ends_with('*'))
            .ok_or((
                i + 1,
                "expected a variable name (letters, digits, _) before '='".to_string(),
            ))?;
        if name.starts_with(RESERVED_ENV_PREFIX) {
            return Err((
                i + 1,
                format!(
                    "{name} is reserved: cronlease sets the {RESERVED_ENV_PREFIX}* variables of every run"
                ),
            ));
        }
        let mut value = line[eq + 1..].trim_ascii();
        for quote in [b'"', b'\''] {
            if value.len() >= 2 && value[0] == quote && value[value.len() - 1] == quote {
                value = &value[1..value.len() - 1];
                break;
            }
        }
        if value.contains(&0) {
            return Err((i + 1, format!("the value of {name} contains a NUL byte")));
        }
        vars.push((name.to_string(), OsString::from_vec(value.to_vec())));
    }
    Ok(vars)
}

/// A systemd credential's value (one trailing newline dropped).
fn read_credential(dir: Option<&Path>, credential: &str) -> Result<OsString, String> {
    let Some(dir) = dir else {
        return Err(format!(
            "credential {credential:?}: $CREDENTIALS_DIRECTORY is not set (give the unit `LoadCredential={credential}:/path/to/file`)"
        ));
    };
    let path = dir.join(credential);
    let mut bytes = crate::config::read_bounded(&path, MAX_ENV_FILE).map_err(|e| {
        format!(
            "cannot read credential {credential:?} ({}): {e}",
            path.display()
        )
    })?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
    }
    if bytes.contains(&0) {
        return Err(format!("credential {credential:?} contains a NUL byte"));
    }
    Ok(OsString::from_vec(bytes))
}

/// Replaces secret values in a run's output with [`REDACTED`].
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret that contains another goes whole.
    secrets: Vec<Vec<u8>>,
}

impl Redactor {
    /// A redactor of `secrets` (those shorter than [`MIN_REDACTED_LEN`]
    /// left out).
    pub fn new(mut secrets: Vec<Vec<u8>>) -> Redactor {
        secrets.retain(|s| s.len() >= MIN_REDACTED_LEN);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `line` with every secret in it replaced.
    pub fn redact<'a>(&self, line: &'a [u8]) -> Cow<'a, [u8]> {
        let mut line = Cow::Borrowed(line);
        for secret in &self.secrets {
            if let Some(replaced) = replace_all(&line, secret) {
                line = Cow::Owned(replaced);
            }
        }
        line
    }
}

/// `text` with each `needle` replaced, or None when it has none.
fn replace_all(text: &[u8], needle: &[u8]) -> Option<Vec<u8>> {
    let first = find(text, needle)?;
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    let mut at = Some(first);
    while let Some(i) = at {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(REDACTED.as_bytes());
        rest = &rest[i + needle.len()..];
        at = find(rest, needle);
    }
    out.extend_from_slice(rest);
    Some(out)
}

fn find(text: &[u8], needle: &[u8]) -> Option<usize> {
    text.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_longest_first_and_short_ones_left() {
        let redactor = Redactor::new(vec![
            b"hunter2".to_vec(),
            b"hunter2hunter2x".to_vec(),
            b"ab".to_vec(),
        ]);
        let check = |line: &str, expected: &str| {
            assert_eq!(
                redactor.redact(line.as_bytes()).as_ref(),
                expected.as_bytes(),
                "{line}"
            );
        };
        check("pw=hunter2 and hunter2", "pw=[redacted] and [redacted]");
        check("hunter2hunter2x!", "[redacted]!");
        check("ab cd", "ab cd");
        check("nothing here", "nothing here");
    }

    #[test]
    fn env_files_read_names_values_comments_and_quotes() {
        let text = b"# comment\n\nexport A=1\nB = \"two words\"\nC='x=y'\r\nD=\n";
        let vars = parse_env_file(text).expect("valid");
        let got: Vec<(String, String)> = vars
            .into_iter()
            .map(|(k, v)| (k, v.into_string().expect("utf-8")))
            .collect();
        let expected = [("A", "1"), ("B", "two words"), ("C", "x=y"), ("D", "")];
        assert_eq!(got, expected.map(|(k, v)| (k.to_string(), v.to_string())));
        for (bad, line) in [
            (&b"A=1\nnovalue\n"[..], 2),
            (b"1A=s3cr3t", 1),
            (b"CRONLEASE_JOB=s3cr3t", 1),
        ] {
            let (at, why) = parse_env_file(bad).expect_err("invalid");
            assert_eq!(at, line, "{why}");
            assert!(!why.contains("s3cr3t"), "no value in the message: {why}");
        }
    }
}
