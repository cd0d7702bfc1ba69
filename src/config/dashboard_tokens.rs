//! `[dashboard]` and its `[[dashboard.tokens]]`: the dashboard's and the
//! API's tokens, each with a name, a role and the jobs it sees, validated
//! into [`DashboardConfig`], then held against `[daemon]
//! dashboard_token_*` (whose secret and name an entry may not take). The
//! secrets themselves are read where the dashboard starts (and again on a
//! reload), never here: `check` and `status` never need them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;
use toml::de::DeValue;

use super::checker::Checker;
use super::daemon_section::NamedTokens;
use super::{
    DashboardConfig, DashboardRole, DashboardTokenSpec, JobPattern, LEGACY_TOKEN_NAME, TokenSource,
};

/// The section's keys, as an unknown one's problem lists them.
const KEYS: &str = "`oidc`, `tokens`";

/// The longest token name taken.
const MAX_NAME: usize = 64;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: Spanned<String>,
    role: Spanned<String>,
    jobs: Option<Spanned<Vec<Spanned<String>>>>,
    token_file: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
}

/// Whether `[dashboard]` (when given) has `tokens` or `oidc`: `[daemon]`'s
/// `dashboard_read` then has a token to log in with.
pub(super) fn named_tokens(dashboard: Option<&Spanned<DeValue<'_>>>) -> NamedTokens {
    match dashboard.map(|d| d.get_ref()) {
        Some(DeValue::Table(t))
            if t.iter()
                .any(|(k, _)| matches!(k.get_ref().as_ref(), "tokens" | "oidc")) =>
        {
            NamedTokens::Some
        }
        _ => NamedTokens::None,
    }
}

/// `[dashboard]` (the default when absent), its entries then compared
/// with `[daemon] dashboard_token_*` (`legacy`, when set): an entry with
/// its secret or its name (`dashboard`) is a problem. `base` resolves a
/// relative `token_file`.
pub(super) fn validate_dashboard(
    checker: &mut Checker<'_>,
    value: Option<&Spanned<DeValue<'_>>>,
    base: &Path,
    legacy: Option<&TokenSource>,
) -> Option<DashboardConfig> {
    let dashboard = match value {
        None => Some(DashboardConfig::default()),
        Some(value) => read_dashboard(checker, value, base),
    };
    if let (Some(dashboard), Some(legacy)) = (&dashboard, legacy) {
        beside_daemon_token(checker, dashboard, legacy);
    }
    dashboard
}

/// The problems of the entries of `dashboard` that take the secret
/// (`legacy`) or the name of `[daemon] dashboard_token_*`'s token.
fn beside_daemon_token(
    checker: &mut Checker<'_>,
    dashboard: &DashboardConfig,
    legacy: &TokenSource,
) {
    for (i, token) in dashboard.tokens.iter().enumerate() {
        if &token.source == legacy {
            let field = match legacy {
                TokenSource::Env(_) => "token_env",
                TokenSource::File(_) => "token_file",
            };
            checker.problem(
                None,
                Some(&format!("[[dashboard.tokens]] #{} ({:?})", i + 1, token.name)),
                Some(field),
                format!(
                    "line {}: the same secret as [daemon] dashboard_token_*, the admin token named \"dashboard\": expected a secret of its own",
                    token.line
                ),
            );
        }
        if token.name == LEGACY_TOKEN_NAME {
            checker.problem(
                None,
                Some(&format!("[[dashboard.tokens]] #{} ({:?})", i + 1, token.name)),
                Some("name"),
                format!(
                    "line {}: the name \"dashboard\" is the token of [daemon] dashboard_token_*: expected another name",
                    token.line
                ),
            );
        }
    }
}

/// `[dashboard]`: its `tokens` array of tables, each entry validated on
/// its own (every problem recorded), then names and secrets compared
/// across entries. `base` resolves a relative `token_file`.
pub(super) fn read_dashboard(
    checker: &mut Checker<'_>,
    value: &Spanned<DeValue<'_>>,
    base: &Path,
) -> Option<DashboardConfig> {
    let DeValue::Table(table) = value.get_ref() else {
        checker.problem(
            Some(value.span()),
            Some("dashboard"),
            None,
            "expected a table: [dashboard] with [[dashboard.tokens]] entries".into(),
        );
        return None;
    };
    let mut config = Some(DashboardConfig::default());
    for (key, value) in table {
        match key.get_ref().as_ref() {
            "tokens" => {
                let DeValue::Array(entries) = value.get_ref() else {
                    checker.problem(
                        Some(value.span()),
                        Some("dashboard"),
                        Some("tokens"),
                        "expected an array of tables: [[dashboard.tokens]] entries".into(),
                    );
                    config = None;
                    continue;
                };
                match read_tokens(checker, entries, base) {
                    Some(tokens) => {
                        if let Some(config) = config.as_mut() {
                            config.tokens = tokens;
                        }
                    }
                    None => config = None,
                }
            }
            "oidc" => match super::dashboard_oidc::read_oidc(checker, value, base) {
                Some(oidc) => {
                    if let Some(config) = config.as_mut() {
                        config.oidc = Some(oidc);
                    }
                }
                None => config = None,
            },
            other => {
                checker.problem(
                    Some(key.span()),
                    Some("dashboard"),
                    Some(other),
                    format!("unknown field `{other}`, expected one of {KEYS}"),
                );
                config = None;
            }
        }
    }
    config
}

/// The section name of entry `index` (from 1), as problems show it.
fn entry_section(index: usize, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("[[dashboard.tokens]] #{index} ({name:?})"),
        None => format!("[[dashboard.tokens]] #{index}"),
    }
}

fn read_tokens(
    checker: &mut Checker<'_>,
    entries: &[Spanned<DeValue<'_>>],
    base: &Path,
) -> Option<Vec<DashboardTokenSpec>> {
    let mut tokens = Vec::new();
    let mut valid = true;
    // Where each name and secret was first given, for the second's problem.
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut secrets: BTreeMap<TokenSource, usize> = BTreeMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let index = i + 1;
        let Some(raw) = checker.deserialize_table::<RawToken>(&entry_section(index, None), entry)
        else {
            valid = false;
            continue;
        };
        let line = super::checker::line_col(checker.text, entry.span().start).0;
        let name = raw.name.get_ref().clone();
        let first = names.get(&name).copied();
        if first.is_none() {
            names.insert(name.clone(), index);
        }
        let Some(token) = validate_token(checker, index, raw, base, line) else {
            valid = false;
            continue;
        };
        let section = entry_section(index, Some(&token.name));
        if let Some(first) = first {
            checker.problem(
                Some(entry.span()),
                Some(&section),
                Some("name"),
                format!(
                    "the name {name:?} is also entry #{first}'s: expected a name of its own (actions are recorded under it)"
                ),
            );
            valid = false;
        }
        if let Some(first) = secrets.get(&token.source) {
            let field = match token.source {
                TokenSource::Env(_) => "token_env",
                TokenSource::File(_) => "token_file",
            };
            checker.problem(
                Some(entry.span()),
                Some(&section),
                Some(field),
                format!(
                    "the same secret as entry #{first}'s: expected a secret of its own (a token is told apart by its secret)"
                ),
            );
            valid = false;
        } else {
            secrets.insert(token.source.clone(), index);
        }
        tokens.push(token);
    }
    valid.then_some(tokens)
}

/// Entry `index` (from 1, at `line`) validated field by field, every
/// problem recorded; `None` when one was.
fn validate_token(
    checker: &mut Checker<'_>,
    index: usize,
    raw: RawToken,
    base: &Path,
    line: usize,
) -> Option<DashboardTokenSpec> {
    let name_ok = {
        let name = raw.name.get_ref();
        !name.is_empty()
            && name.len() <= MAX_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let section = entry_section(index, name_ok.then_some(raw.name.get_ref().as_str()));
    if !name_ok {
        checker.problem(
            Some(raw.name.span()),
            Some(&section),
            Some("name"),
            format!(
                "invalid name {:?}: expected 1 to {MAX_NAME} letters, digits, '-', '_' or '.', such as \"deploy-bot\"",
                raw.name.get_ref()
            ),
        );
    }
    let (role, jobs) = validate_role(checker, &section, &raw.role, raw.jobs);
    let source = validate_source(checker, &section, raw.token_env, raw.token_file, base);
    let (true, Some(role), Some(jobs), Some(source)) = (name_ok, role, jobs, source) else {
        return None;
    };
    Some(DashboardTokenSpec {
        name: raw.name.into_inner(),
        role,
        jobs,
        source,
        line,
    })
}

/// An entry's `role` and its `jobs` (a token's, a single sign-on role
/// mapping's): each problem recorded under `section`; `None` for the one
/// that has one (`jobs`: `Some(None)` when not given).
pub(super) fn validate_role(
    checker: &mut Checker<'_>,
    section: &str,
    role: &Spanned<String>,
    jobs: Option<Spanned<Vec<Spanned<String>>>>,
) -> (Option<DashboardRole>, Option<Option<Vec<JobPattern>>>) {
    let parsed = DashboardRole::parse(role.get_ref());
    if parsed.is_none() {
        checker.problem(
            Some(role.span()),
            Some(section),
            Some("role"),
            format!(
                "unknown role {:?}: expected \"viewer\" (reads), \"operator\" (reads and job actions) or \"admin\" (everything)",
                role.get_ref()
            ),
        );
    }
    let jobs = match jobs {
        None => Some(None),
        Some(jobs) => validate_jobs(checker, section, jobs, parsed).map(Some),
    };
    (parsed, jobs)
}

/// An entry's `jobs`: a non-empty list of patterns, on a token that is
/// not an admin's (`role`); every problem recorded, `None` when one was.
pub(super) fn validate_jobs(
    checker: &mut Checker<'_>,
    section: &str,
    jobs: Spanned<Vec<Spanned<String>>>,
    role: Option<DashboardRole>,
) -> Option<Vec<JobPattern>> {
    let span = jobs.span();
    let patterns: Vec<Spanned<String>> = jobs.into_inner();
    let mut valid = true;
    if patterns.is_empty() {
        checker.problem(
            Some(span.clone()),
            Some(section),
            Some("jobs"),
            "an empty list: the token would see no job; expected patterns such as [\"billing-*\"], or no `jobs` for every job".into(),
        );
        valid = false;
    }
    if role == Some(DashboardRole::Admin) {
        checker.problem(
            Some(span),
            Some(section),
            Some("jobs"),
            "an admin acts on the whole cluster (replicas too), so it takes no `jobs`: expected role = \"operator\" or \"viewer\" for a token limited to some jobs".into(),
        );
        valid = false;
    }
    let mut taken = Vec::new();
    for pattern in patterns {
        match JobPattern::parse(pattern.get_ref()) {
            Some(p) => taken.push(p),
            None => {
                checker.problem(
                    Some(pattern.span()),
                    Some(section),
                    Some("jobs"),
                    format!(
                        "invalid pattern {:?}: expected a job name in which `*` stands for any characters and `?` for one, such as \"billing-*\"",
                        pattern.get_ref()
                    ),
                );
                valid = false;
            }
        }
    }
    valid.then_some(taken)
}

/// An entry's secret: exactly one of `token_env` (a valid variable name)
/// and `token_file` (a path, relative ones under `base`); the problem
/// recorded and `None` otherwise.
fn validate_source(
    checker: &mut Checker<'_>,
    section: &str,
    env: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
    base: &Path,
) -> Option<TokenSource> {
    match (env, file) {
        (None, None) => {
            checker.problem(
                None,
                Some(section),
                Some("token_file"),
                "no secret: expected token_file (a file holding the token) or token_env (a variable holding it)".into(),
            );
            None
        }
        (Some(_), Some(file)) => {
            checker.problem(
                Some(file.span()),
                Some(section),
                Some("token_file"),
                "both token_env and token_file are set: expected one of them".into(),
            );
            None
        }
        (Some(name), None) => {
            let text = name.get_ref();
            if super::is_env_name(text) {
                Some(TokenSource::Env(name.into_inner()))
            } else {
                checker.problem(
                    Some(name.span()),
                    Some(section),
                    Some("token_env"),
                    format!(
                        "invalid environment variable name {text:?}: expected letters, digits and _ not starting with a digit, such as \"CRONLEASE_DEPLOY_TOKEN\""
                    ),
                );
                None
            }
        }
        (None, Some(path)) => {
            if path.get_ref().trim().is_empty() {
                checker.problem(
                    Some(path.span()),
                    Some(section),
                    Some("token_file"),
                    "empty path: expected a file such as \"/etc/cronlease/deploy.token\"".into(),
                );
                None
            } else {
                Some(TokenSource::File(base.join(path.get_ref())))
            }
        }
    }
}
