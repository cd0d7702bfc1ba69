//! `[dashboard.oidc]` and its `[[dashboard.oidc.roles]]`: single sign-on
//! through an OpenID provider, validated into [`OidcSpec`]. The client
//! secret is read where the dashboard starts (and again on a reload),
//! never here; the provider is asked nothing until a browser signs in.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde::de::IgnoredAny;
use toml::Spanned;
use toml::de::DeValue;

use super::checker::Checker;
use super::dashboard_tokens::validate_role;
use super::{OidcRoleSpec, OidcSpec, TokenSource};

const SECTION: &str = "[dashboard.oidc]";

/// A sign-in's lifetime unless `lifetime` says otherwise.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// The longest `lifetime` taken.
const MAX_LIFETIME: Duration = Duration::from_secs(30 * 86_400);
/// The longest claim name, client id, scope or claim value taken.
const MAX_TEXT: usize = 256;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOidc {
    issuer: Spanned<String>,
    client_id: Spanned<String>,
    client_secret_file: Option<Spanned<String>>,
    client_secret_env: Option<Spanned<String>>,
    public_url: Spanned<String>,
    scopes: Option<Spanned<Vec<String>>>,
    role_claim: Option<Spanned<String>>,
    identity_claim: Option<Spanned<String>>,
    lifetime: Option<Spanned<String>>,
    /// Read entry by entry below (`[[dashboard.oidc.roles]]`), so that each
    /// entry's problems name it.
    #[allow(dead_code)]
    roles: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRole {
    value: Spanned<String>,
    role: Spanned<String>,
    jobs: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[dashboard.oidc]`, every problem recorded; `None` when one was.
/// `base` resolves a relative `client_secret_file`.
pub(super) fn read_oidc(
    checker: &mut Checker<'_>,
    value: &Spanned<DeValue<'_>>,
    base: &Path,
) -> Option<OidcSpec> {
    let line = super::checker::line_col(checker.text, value.span().start).0;
    let raw = checker.deserialize_table::<RawOidc>(SECTION, value)?;
    let roles = match value.get_ref() {
        DeValue::Table(table) => table
            .iter()
            .find(|(k, _)| k.get_ref() == "roles")
            .map(|(_, v)| v),
        _ => None,
    };
    let roles = read_roles(checker, roles);
    let issuer = url_field(checker, "issuer", &raw.issuer);
    let public_url = url_field(checker, "public_url", &raw.public_url);
    let client_id = text_field(checker, "client_id", &raw.client_id);
    let client_secret = secret_source(checker, raw.client_secret_env, raw.client_secret_file, base);
    let scopes = scopes(checker, raw.scopes);
    let role_claim = match &raw.role_claim {
        Some(claim) => text_field(checker, "role_claim", claim),
        None => Some("groups".to_string()),
    };
    let identity_claim = match &raw.identity_claim {
        Some(claim) => text_field(checker, "identity_claim", claim).map(Some),
        None => Some(None),
    };
    let lifetime = lifetime(checker, raw.lifetime.as_ref());
    Some(OidcSpec {
        issuer: issuer?,
        client_id: client_id?,
        client_secret: client_secret?,
        public_url: public_url?,
        scopes: scopes?,
        role_claim: role_claim?,
        identity_claim: identity_claim?,
        lifetime: lifetime?,
        roles: roles?,
        line,
    })
}

/// `lifetime`: a duration from 1s to 30 days (8h when absent).
fn lifetime(checker: &mut Checker<'_>, value: Option<&Spanned<String>>) -> Option<Duration> {
    let Some(value) = value else {
        return Some(DEFAULT_LIFETIME);
    };
    match super::checker::parse_duration(value.get_ref(), MAX_LIFETIME) {
        Ok(d) if d >= Duration::from_secs(1) => Some(d),
        Ok(_) => {
            checker.problem(
                Some(value.span()),
                Some(SECTION),
                Some("lifetime"),
                format!(
                    "{:?} is shorter than a second: expected a duration such as \"8h\"",
                    value.get_ref()
                ),
            );
            None
        }
        Err(message) => {
            checker.problem(Some(value.span()), Some(SECTION), Some("lifetime"), message);
            None
        }
    }
}

/// A URL field: `https://…`, or `http://` on a loopback host (a provider
/// or a dashboard on the same machine), without a query, fragment or
/// trailing `/`... the trailing `/` is dropped.
fn url_field(checker: &mut Checker<'_>, field: &str, value: &Spanned<String>) -> Option<String> {
    let text = value.get_ref().trim_end_matches('/');
    let rest = text
        .strip_prefix("https://")
        .or_else(|| {
            text.strip_prefix("http://").filter(|rest| {
                let host = rest.split(['/', ':']).next().unwrap_or_default();
                host == "localhost" || host.starts_with("127.") || rest.starts_with("[::1]")
            })
        })
        .filter(|rest| {
            !rest.is_empty()
                && text.len() <= 2048
                && !rest.starts_with('/')
                && !rest.contains(['?', '#', '\\'])
                && !rest.chars().any(|c| c.is_whitespace() || c.is_control())
        });
    if rest.is_none() {
        checker.problem(
            Some(value.span()),
            Some(SECTION),
            Some(field),
            format!(
                "invalid URL {:?}: expected an https:// URL without query or fragment, such as \"https://id.example.com/realms/main\" (http:// only on a loopback host)",
                value.get_ref()
            ),
        );
        return None;
    }
    Some(text.to_string())
}

/// A name or id: 1 to 256 printable characters without whitespace.
fn text_field(checker: &mut Checker<'_>, field: &str, value: &Spanned<String>) -> Option<String> {
    let text = value.get_ref();
    if valid_text(text) {
        return Some(text.clone());
    }
    checker.problem(
        Some(value.span()),
        Some(SECTION),
        Some(field),
        format!(
            "invalid value {text:?}: expected 1 to {MAX_TEXT} characters, no whitespace or control character"
        ),
    );
    None
}

fn valid_text(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_TEXT
        && !text.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `scopes`: names without whitespace, `openid` among them
/// (`["openid", "email", "profile"]` when absent).
fn scopes(checker: &mut Checker<'_>, value: Option<Spanned<Vec<String>>>) -> Option<Vec<String>> {
    let Some(value) = value else {
        return Some(["openid", "email", "profile"].map(str::to_string).to_vec());
    };
    let span = value.span();
    let scopes = value.into_inner();
    let problem = if !scopes.iter().any(|s| s == "openid") {
        Some("`openid` is missing: expected a list with it, such as [\"openid\", \"email\", \"groups\"]".to_string())
    } else {
        scopes.iter().find(|s| !valid_text(s)).map(|s| {
            format!("invalid scope {s:?}: expected names without whitespace, such as \"groups\"")
        })
    };
    match problem {
        Some(message) => {
            checker.problem(Some(span), Some(SECTION), Some("scopes"), message);
            None
        }
        None => Some(scopes),
    }
}

/// The client secret: exactly one of `client_secret_env` (a variable
/// name) and `client_secret_file` (a path, relative ones under `base`).
fn secret_source(
    checker: &mut Checker<'_>,
    env: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
    base: &Path,
) -> Option<TokenSource> {
    let (message, span, field) = match (env, file) {
        (None, None) => (
            "no client secret: expected client_secret_file (a file holding it) or client_secret_env (a variable holding it)".to_string(),
            None,
            "client_secret_file",
        ),
        (Some(_), Some(file)) => (
            "both client_secret_env and client_secret_file are set: expected one of them".to_string(),
            Some(file.span()),
            "client_secret_file",
        ),
        (Some(name), None) => {
            let text = name.get_ref();
            if super::is_env_name(text) {
                return Some(TokenSource::Env(name.into_inner()));
            }
            (
                format!(
                    "invalid environment variable name {text:?}: expected letters, digits and _ not starting with a digit, such as \"CRONLEASE_OIDC_SECRET\""
                ),
                Some(name.span()),
                "client_secret_env",
            )
        }
        (None, Some(path)) => {
            if !path.get_ref().trim().is_empty() {
                return Some(TokenSource::File(base.join(path.get_ref())));
            }
            (
                "empty path: expected a file such as \"/etc/cronlease/oidc.secret\"".to_string(),
                Some(path.span()),
                "client_secret_file",
            )
        }
    };
    checker.problem(span, Some(SECTION), Some(field), message);
    None
}

/// The section name of roles entry `index` (from 1), as problems show it.
fn role_section(index: usize) -> String {
    format!("[[dashboard.oidc.roles]] #{index}")
}

/// `roles`: at least one `[[dashboard.oidc.roles]]` entry, each with a
/// claim value given once, a role and (not for an admin) job patterns.
fn read_roles(
    checker: &mut Checker<'_>,
    value: Option<&Spanned<DeValue<'_>>>,
) -> Option<Vec<OidcRoleSpec>> {
    let entries = match value.map(|v| (v, v.get_ref())) {
        Some((_, DeValue::Array(entries))) if !entries.is_empty() => entries,
        other => {
            checker.problem(
                other.map(|(v, _)| v.span()),
                Some(SECTION),
                Some("roles"),
                "no [[dashboard.oidc.roles]] entry: expected at least one, such as value = \"cron-admins\", role = \"admin\" (a person whose claim matches none is refused)".into(),
            );
            return None;
        }
    };
    let mut roles: Vec<OidcRoleSpec> = Vec::new();
    // Every entry's value, valid or not, for the next ones' check.
    let mut values: Vec<String> = Vec::new();
    let mut valid = true;
    for (i, entry) in entries.iter().enumerate() {
        let section = role_section(i + 1);
        let Some(raw) = checker.deserialize_table::<RawRole>(&section, entry) else {
            valid = false;
            continue;
        };
        let value = raw.value.get_ref().clone();
        let checked = read_role(checker, &section, raw, &values);
        values.push(value);
        match checked {
            Some(role) => roles.push(role),
            None => valid = false,
        }
    }
    valid.then_some(roles)
}

/// One roles entry, checked against those before it (`earlier`).
fn read_role(
    checker: &mut Checker<'_>,
    section: &str,
    raw: RawRole,
    earlier: &[String],
) -> Option<OidcRoleSpec> {
    let value_ok = valid_value(raw.value.get_ref());
    if !value_ok {
        checker.problem(
            Some(raw.value.span()),
            Some(section),
            Some("value"),
            format!(
                "invalid value {:?}: expected the claim's value, 1 to {MAX_TEXT} characters without control characters, such as \"cron-admins\"",
                raw.value.get_ref()
            ),
        );
    }
    if let Some(first) = earlier.iter().position(|v| v == raw.value.get_ref()) {
        checker.problem(
            Some(raw.value.span()),
            Some(section),
            Some("value"),
            format!(
                "the value {:?} is also entry #{}'s: expected each value once (the first entry that matches decides)",
                raw.value.get_ref(),
                first + 1
            ),
        );
        return None;
    }
    let (role, jobs) = validate_role(checker, section, &raw.role, raw.jobs);
    let (true, Some(role), Some(jobs)) = (value_ok, role, jobs) else {
        return None;
    };
    Some(OidcRoleSpec {
        value: raw.value.into_inner(),
        role,
        jobs,
    })
}

fn valid_value(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_TEXT && !text.chars().any(char::is_control)
}
