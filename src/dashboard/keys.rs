//! The dashboard's tokens (its keyring): `[daemon] dashboard_token_*` as
//! the admin token named `dashboard`, and each `[[dashboard.tokens]]`
//! entry with its role and the jobs it sees. Every secret is read once
//! per load (start-up, and each SIGHUP reload); a reload replaces the
//! whole keyring or, when a secret cannot be read, keeps the old one.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::Arc;

use super::oidc::Provider;
use super::token::{Token, TokenError};
use crate::config::{
    DaemonConfig, DashboardConfig, DashboardRole, DashboardTokenSpec, JobPattern,
    LEGACY_TOKEN_NAME, TokenSource,
};

/// The shortest secret taken (as `Token::new` takes).
const MIN_SECRET_BYTES: usize = 16;

/// The largest token file read.
const MAX_TOKEN_FILE: u64 = 4096;

/// The tokens a dashboard accepts, by name.
#[derive(Debug, Default)]
pub struct Keyring {
    keys: Vec<Arc<Key>>,
    /// `[dashboard.oidc]`'s provider with its client secret, when single
    /// sign-on is configured.
    sso: Option<Arc<Provider>>,
}

/// One token: its name, role, scope and secret.
#[derive(Debug)]
pub(super) struct Key {
    pub(super) name: String,
    pub(super) role: DashboardRole,
    pub(super) scope: Scope,
    pub(super) kind: KeyKind,
    pub(super) token: Token,
}

/// Where a token comes from: the actions' record keeps the words each
/// has always been recorded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind {
    /// `[daemon] dashboard_token_*`: recorded as `api` with a bearer
    /// token, as the name given at login in the pages.
    Daemon,
    /// A `[[dashboard.tokens]]` entry: recorded as `token NAME`.
    Named,
    /// A person signed in through single sign-on (`[dashboard.oidc]`),
    /// named by the identity claim: recorded as `sso NAME`. Never in the
    /// keyring: each request's comes from its sign-in's record.
    Sso,
}

/// The jobs a token sees: the others are absent from its lists and 404
/// for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Scope {
    All,
    Jobs(Vec<JobPattern>),
}

impl Scope {
    /// Whether job `name` is in the scope.
    pub(super) fn sees(&self, name: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Jobs(patterns) => patterns.iter().any(|p| p.matches(name)),
        }
    }
}

impl Keyring {
    /// No token: the dashboard is read-only and public.
    pub fn empty() -> Keyring {
        Keyring::default()
    }

    /// Reads every secret `daemon` and `dashboard` name (each file once):
    /// the daemon's token, and each `[[dashboard.tokens]]` entry's (of the
    /// config file `file`). Fails on the first secret that cannot be read
    /// or is too short, and when two entries hold the same secret.
    pub fn load(
        daemon: &DaemonConfig,
        dashboard: &DashboardConfig,
        file: &Path,
    ) -> Result<Keyring, TokenError> {
        let mut keys: Vec<Arc<Key>> = Vec::new();
        if let Some(source) = &daemon.dashboard_token {
            keys.push(Arc::new(Key {
                name: LEGACY_TOKEN_NAME.to_string(),
                role: DashboardRole::Admin,
                scope: Scope::All,
                kind: KeyKind::Daemon,
                token: Token::load(source)?,
            }));
        }
        for (i, spec) in dashboard.tokens.iter().enumerate() {
            let what = format!(
                "{} line {}: [[dashboard.tokens]] #{} ({:?})",
                file.display(),
                spec.line,
                i + 1,
                spec.name
            );
            let token = read_named(spec, &what)?;
            if let Some(other) = keys.iter().find(|k| k.token.same_secret(&token)) {
                return Err(TokenError::SameSecret {
                    what,
                    other: other.name.clone(),
                });
            }
            keys.push(Arc::new(Key {
                name: spec.name.clone(),
                role: spec.role,
                scope: match &spec.jobs {
                    None => Scope::All,
                    Some(patterns) => Scope::Jobs(patterns.clone()),
                },
                kind: KeyKind::Named,
                token,
            }));
        }
        let sso = match &dashboard.oidc {
            Some(spec) => Some(Arc::new(load_provider(spec, file)?)),
            None => None,
        };
        Ok(Keyring { keys, sso })
    }

    /// A keyring of `keys` (the unit tests').
    #[cfg(test)]
    pub(super) fn of_keys(keys: Vec<Key>) -> Keyring {
        Keyring {
            keys: keys.into_iter().map(Arc::new).collect(),
            sso: None,
        }
    }

    /// Whether there is no token at all and no single sign-on
    /// (read-only, public dashboard).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.sso.is_none()
    }

    /// Whether there is a token to log in with on the token form.
    pub(super) fn has_tokens(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The issuer of single sign-on, when configured (the start-up log).
    pub fn sso_issuer(&self) -> Option<String> {
        self.sso.as_ref().map(|p| p.spec.issuer.clone())
    }

    /// Single sign-on's provider, when configured.
    pub(super) fn sso(&self) -> Option<&Arc<Provider>> {
        self.sso.as_ref()
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Every secret, for the redaction of runs' output.
    pub fn secrets(&self) -> Vec<Vec<u8>> {
        let tokens = self.keys.iter().map(|k| k.token.secret_bytes().to_vec());
        let client = self.sso.iter().map(|p| p.secret_bytes().to_vec());
        tokens.chain(client).collect()
    }

    /// The token `presented` is, compared with every token in constant
    /// time (all of them, whichever matches).
    pub(super) fn bearer(&self, presented: &str) -> Option<Arc<Key>> {
        let mut found = None;
        for key in &self.keys {
            if key.token.matches(presented) && found.is_none() {
                found = Some(key.clone());
            }
        }
        found
    }

    /// The token named `name`.
    pub(super) fn named(&self, name: &str) -> Option<Arc<Key>> {
        self.keys.iter().find(|k| k.name == name).cloned()
    }
}

/// `[dashboard.oidc]`'s provider, its client secret read from its
/// variable or file (as a token's).
fn load_provider(spec: &crate::config::OidcSpec, file: &Path) -> Result<Provider, TokenError> {
    let what = format!("{} line {}: [dashboard.oidc]", file.display(), spec.line);
    let (field, text) = match &spec.client_secret {
        TokenSource::Env(name) => (
            "client_secret_env",
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| format!("the environment variable {name} is not set or empty")),
        ),
        TokenSource::File(path) => ("client_secret_file", read_token_file(path)),
    };
    let unreadable = |why: String| TokenError::Unreadable {
        what: what.clone(),
        why: format!("{field}: {why}"),
    };
    let text = text.map_err(unreadable)?;
    let secret = Token::new(text.trim()).map_err(|e| unreadable(e.to_string()))?;
    Provider::new(spec.clone(), secret).map_err(unreadable)
}

/// A `[[dashboard.tokens]]` entry's secret: its variable, or its file
/// (a regular file that only its owner, root or this replica's user, may
/// change and that others may not read).
fn read_named(spec: &DashboardTokenSpec, what: &str) -> Result<Token, TokenError> {
    let text = match &spec.source {
        TokenSource::Env(name) => std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| TokenError::Unreadable {
                what: what.to_string(),
                why: format!("token_env: the environment variable {name} is not set or empty"),
            })?,
        TokenSource::File(path) => read_token_file(path).map_err(|why| TokenError::Unreadable {
            what: what.to_string(),
            why: format!("token_file: {why}"),
        })?,
    };
    let text = text.trim();
    if text.len() < MIN_SECRET_BYTES {
        return Err(TokenError::Unreadable {
            what: what.to_string(),
            why: format!(
                "the token is {} bytes long; expected at least {MIN_SECRET_BYTES} (generate one with `openssl rand -hex 32`)",
                text.len()
            ),
        });
    }
    Token::new(text).map_err(|e| TokenError::Unreadable {
        what: what.to_string(),
        why: e.to_string(),
    })
}

fn read_token_file(path: &Path) -> Result<String, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 || mode & 0o004 != 0 {
        return Err(format!(
            "{} is writable by its group or others, or readable by others (mode {mode:o}): refused; make it readable by its owner and group only and writable by its owner (chmod 600 or 640)",
            path.display()
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { nix::libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "{} belongs to uid {}, neither root nor this replica's user (uid {me}): refused",
            path.display(),
            meta.uid()
        ));
    }
    let bytes = crate::config::read_bounded(path, MAX_TOKEN_FILE)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    if text.trim().is_empty() {
        return Err(format!(
            "{} is empty (it should hold the token)",
            path.display()
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_sees_the_jobs_its_patterns_match() {
        let scope = Scope::Jobs(vec![
            JobPattern::parse("billing-*").expect("a pattern"),
            JobPattern::parse("report-??").expect("a pattern"),
        ]);
        assert!(scope.sees("billing-eu"));
        assert!(scope.sees("billing-"));
        assert!(scope.sees("report-01"));
        assert!(!scope.sees("report-1"));
        assert!(!scope.sees("nightly-billing-eu"));
        assert!(Scope::All.sees("anything"));
        let star = JobPattern::parse("*a*b*").expect("a pattern");
        assert!(star.matches("xxaxxbxx"));
        assert!(!star.matches("xxbxxaxx"));
    }
}
