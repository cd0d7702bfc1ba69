//! The validated types of the dashboard's and the API's tokens: where a
//! secret is read from ([`TokenSource`], also `[daemon]
//! dashboard_token_*`'s), `[dashboard]` and its `[[dashboard.tokens]]`
//! entries with their roles, and the job patterns a token's scope is made
//! of. `dashboard_tokens` validates them.

use std::path::PathBuf;

/// Where the dashboard's operator token is read from when the daemon
/// starts. The token itself is never part of the config, so it is never
/// printed with it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum TokenSource {
    /// `dashboard_token_env`: the name of an environment variable.
    Env(String),
    /// `dashboard_token_file`: a file holding the token (surrounding
    /// whitespace ignored).
    File(PathBuf),
}

/// `[dashboard]`: the dashboard's and the API's tokens, each with its
/// role and the jobs it sees (the guide, "Access").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DashboardConfig {
    /// The `[[dashboard.tokens]]` entries, in file order.
    pub tokens: Vec<DashboardTokenSpec>,
    /// `[dashboard.oidc]`: single sign-on, when configured.
    pub oidc: Option<OidcSpec>,
}

/// One `[[dashboard.tokens]]` entry: its secret is read where the
/// dashboard starts, never here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DashboardTokenSpec {
    /// What actions taken with it are recorded as (`token NAME`).
    pub name: String,
    /// What it may do.
    pub role: DashboardRole,
    /// The jobs it sees and acts on; `None`: every job.
    pub jobs: Option<Vec<JobPattern>>,
    /// Where its secret is (`token_file`, resolved against the config's
    /// directory, or `token_env`).
    pub source: TokenSource,
    /// The entry's line in the config file, for the problems found when
    /// its secret is read.
    pub line: usize,
}

/// The name the token of `[daemon] dashboard_token_env` or
/// `dashboard_token_file` has among the dashboard's tokens (an admin).
pub const LEGACY_TOKEN_NAME: &str = "dashboard";

/// What a dashboard token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DashboardRole {
    /// Reads only.
    Viewer,
    /// Reads and job actions (run now, pause, resume, kill) on its jobs.
    Operator,
    /// Everything, the replicas' drain and undrain too.
    Admin,
}

impl DashboardRole {
    /// The role named `text` in the config.
    pub fn parse(text: &str) -> Option<DashboardRole> {
        match text {
            "viewer" => Some(DashboardRole::Viewer),
            "operator" => Some(DashboardRole::Operator),
            "admin" => Some(DashboardRole::Admin),
            _ => None,
        }
    }

    /// The role's name, as written in the config.
    #[cfg(feature = "dashboard")]
    pub fn as_str(self) -> &'static str {
        match self {
            DashboardRole::Viewer => "viewer",
            DashboardRole::Operator => "operator",
            DashboardRole::Admin => "admin",
        }
    }
}

/// A pattern on job names (`jobs = ["billing-*"]`): `*` stands for any
/// characters (none too), `?` for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPattern(String);

impl JobPattern {
    /// A pattern from its text: not empty, no whitespace or control
    /// character.
    pub fn parse(text: &str) -> Option<JobPattern> {
        let ok = !text.is_empty()
            && text.len() <= 256
            && !text.chars().any(|c| c.is_whitespace() || c.is_control());
        ok.then(|| JobPattern(text.to_string()))
    }

    /// Whether job `name` matches.
    #[cfg(feature = "dashboard")]
    pub fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes())
    }
}

/// `*` and `?` matching with one backtracking point (linear in practice).
#[cfg(feature = "dashboard")]
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// `[dashboard.oidc]`: single sign-on through an OpenID provider
/// (authorization code with PKCE), its claim mapped to the roles and
/// scopes the tokens have (the guide, "Single sign-on").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcSpec {
    /// The provider's issuer URL, exactly as its ID tokens' `iss`.
    pub issuer: String,
    /// The dashboard's client id at the provider (the ID tokens' `aud`).
    pub client_id: String,
    /// Where the client secret is (`client_secret_file`, resolved
    /// against the config's directory, or `client_secret_env`).
    pub client_secret: TokenSource,
    /// The dashboard's address as browsers reach it (no trailing `/`): the
    /// redirect URI is this with `/sso/callback`.
    pub public_url: String,
    /// The scopes asked for (`openid` among them).
    pub scopes: Vec<String>,
    /// The claim whose value (a string or an array of strings) picks the
    /// role.
    pub role_claim: String,
    /// The claim an action is recorded under (`sso VALUE`); `None`:
    /// `email`, else `sub`.
    pub identity_claim: Option<String>,
    /// How long a sign-in lasts.
    pub lifetime: std::time::Duration,
    /// The `[[dashboard.oidc.roles]]` entries, in file order: the first
    /// whose value the claim holds decides.
    pub roles: Vec<OidcRoleSpec>,
    /// The section's line in the config file, for the problems found when
    /// its secret is read.
    pub line: usize,
}

/// One `[[dashboard.oidc.roles]]` entry: people whose role claim holds
/// `value` get `role`, on `jobs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcRoleSpec {
    /// The claim's value (or one of its values).
    pub value: String,
    /// What they may do.
    pub role: DashboardRole,
    /// The jobs they see and act on; `None`: every job.
    pub jobs: Option<Vec<JobPattern>>,
}
