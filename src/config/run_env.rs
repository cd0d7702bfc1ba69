//! What a run's environment is made of, validated: `inherit_env` (which of
//! the replica's variables a run may inherit, widening
//! [`DEFAULT_INHERITED_ENV`]), and a job's `env_files` and
//! `env_credentials` (secrets for the job, read at each run). The replica's
//! own secrets (the variables `password_env` and `dashboard_token_env`
//! name, and `CRONLEASE_REDIS_URL`) never reach a run: listing one is a
//! problem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::checker::{Checker, Given};
use super::{EnvPattern, RESERVED_ENV_PREFIX};

/// The variables a run inherits from the replica unless `inherit_env`
/// widens the list: a `*` at the end matches any rest of the name.
pub const DEFAULT_INHERITED_ENV: &[&str] = &[
    "PATH", "LANG", "LC_*", "TZ", "HOME", "USER", "LOGNAME", "TMPDIR",
];

/// The replica's variables that may hold its own secrets whatever the
/// config says: the operator commands' Redis URL.
pub const ALWAYS_SECRET_ENV: &[&str] = &["CRONLEASE_REDIS_URL"];

impl EnvPattern {
    /// `text` as a pattern, if it is one: a variable name (letters, digits,
    /// `_`, not starting with a digit), optionally ending in `*`, or `*`.
    pub fn parse(text: &str) -> Option<EnvPattern> {
        let name = text.strip_suffix('*').unwrap_or(text);
        let valid = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && (!name.is_empty() || text == "*");
        valid.then(|| EnvPattern(text.to_string()))
    }

    /// Whether the variable `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        pattern_matches(&self.0, name)
    }
}

/// Whether the variable `name` matches `pattern` (a name, or a prefix
/// ending in `*`): what [`EnvPattern::matches`] does, for the default list
/// too, without making a pattern of each entry.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// `inherit_env` of `section` (`daemon` or a job's): patterns, none of them
/// naming one of `secrets` outright.
pub(super) fn inherit_env(
    checker: &mut Checker<'_>,
    section: &str,
    raw: Option<Given<Vec<Given<String>>>>,
    secrets: &[String],
) -> Vec<EnvPattern> {
    let Some(raw) = raw else {
        return Vec::new();
    };
    let mut patterns = Vec::new();
    for entry in raw.into_inner() {
        let text = entry.get();
        match EnvPattern::parse(text) {
            None => checker.problem(
                entry.at(),
                Some(section),
                Some("inherit_env"),
                format!("invalid variable name {text:?}: expected a name of letters, digits and _ (not starting with a digit), optionally ending in * (\"LC_*\"), or \"*\""),
            ),
            Some(_) if secrets.iter().any(|s| s == text) => checker.problem(
                entry.at(),
                Some(section),
                Some("inherit_env"),
                format!("{text} holds a secret of the replica's (its Redis password, dashboard token or Redis URL): it never reaches a run; give a job a secret of its own with env_files or env_credentials"),
            ),
            Some(pattern) => patterns.push(pattern),
        }
    }
    patterns
}

/// A job's `env_files`: paths, relative ones resolved against the config
/// file's directory. Read at each run, not now (a file may be deployed
/// after the table).
pub(super) fn env_files(
    checker: &mut Checker<'_>,
    section: &str,
    raw: Option<Given<Vec<Given<String>>>>,
    base_dir: &Path,
) -> Vec<PathBuf> {
    let Some(raw) = raw else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for entry in raw.into_inner() {
        if entry.get().is_empty() || entry.get().contains('\0') {
            checker.problem(
                entry.at(),
                Some(section),
                Some("env_files"),
                "empty path or NUL byte: expected a file of NAME=value lines, absolute or relative to the config file".into(),
            );
        } else {
            files.push(base_dir.join(entry.get()));
        }
    }
    files
}

/// A job's `env_credentials`: variable → systemd credential name (a file
/// in `$CREDENTIALS_DIRECTORY`, read at each run).
pub(super) fn env_credentials(
    checker: &mut Checker<'_>,
    section: &str,
    raw: BTreeMap<Given<String>, Given<String>>,
) -> BTreeMap<String, String> {
    let mut credentials = BTreeMap::new();
    for (var, credential) in raw {
        let (name, id) = (var.get(), credential.get());
        if let Some(problem) = variable_problem(name) {
            checker.problem(var.at(), Some(section), Some("env_credentials"), problem);
        } else if !is_credential_name(id) {
            checker.problem(
                credential.at(),
                Some(section),
                Some("env_credentials"),
                format!("invalid credential name {id:?}: expected the name given to LoadCredential= (1 to 255 characters, no '/', not \".\" or \"..\")"),
            );
        } else {
            credentials.insert(var.into_inner(), credential.into_inner());
        }
    }
    credentials
}

/// Why `name` cannot be a variable a job sets, if it cannot.
pub(super) fn variable_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        Some(format!(
            "invalid variable name {name:?}: expected a non-empty name without '=' or NUL"
        ))
    } else if name.starts_with(RESERVED_ENV_PREFIX) {
        Some(format!(
            "{name} is reserved: cronlease sets the {RESERVED_ENV_PREFIX}* variables of every run"
        ))
    } else {
        None
    }
}

/// A systemd credential name: a file name in `$CREDENTIALS_DIRECTORY`.
fn is_credential_name(id: &str) -> bool {
    !id.is_empty() && id.len() <= 255 && !id.contains(['/', '\0']) && id != "." && id != ".."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_names_and_prefixes() {
        let check = |pattern: &str, name: &str| {
            EnvPattern::parse(pattern)
                .unwrap_or_else(|| panic!("{pattern} is a pattern"))
                .matches(name)
        };
        assert!(check("PATH", "PATH"));
        assert!(!check("PATH", "PATHS"));
        assert!(check("LC_*", "LC_ALL"));
        assert!(!check("LC_*", "LANG"));
        assert!(check("*", "ANYTHING"));
        for bad in ["", "1X", "A-B", "A*B", "**", "A B"] {
            assert!(EnvPattern::parse(bad).is_none(), "{bad:?}");
        }
    }
}
