//! A job's `params = { name = { default = "…", allowed = ["…"] } }`: the
//! inputs a run may be given ([`Params`]), the one check of a value given
//! for them ([`Params::resolve`], for the command line, the dashboard, the
//! library and the replica that takes a request), and the `{param.<name>}`
//! templates of an HTTP job's `url` and `body`.
//!
//! Every tick of a job's schedule runs with the defaults, so every
//! parameter has one; a manual run may give other values. Names are
//! `a-z 0-9 _` (a run's process sees `CRONLEASE_PARAM_<NAME>`), values
//! strings of at most [`MAX_PARAM_VALUE_BYTES`] without control
//! characters.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use super::HttpRequest;
use super::checker::{Checker, Given};

/// The longest value a parameter may have, in bytes.
pub const MAX_PARAM_VALUE_BYTES: usize = 1024;

/// The longest parameter name.
pub const MAX_PARAM_NAME_CHARS: usize = 64;

/// The most parameters a job may declare.
pub const MAX_PARAMS: usize = 32;

/// What the process of a run sees each parameter as: `PREFIX` and the
/// name in upper case.
pub const PARAM_ENV_PREFIX: &str = "CRONLEASE_PARAM_";

/// What the outcome stream's field of a parameter starts with
/// (`param.region`), and the trigger stream's.
pub const PARAM_FIELD_PREFIX: &str = "param.";

/// One parameter as written: `{ default = "…", allowed = ["…", …] }`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawParam {
    pub(crate) default: Option<Given<String>>,
    pub(crate) allowed: Option<Given<Vec<Given<String>>>>,
}

/// One parameter of a job, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// What a tick of the schedule, and a manual run that does not give
    /// the parameter, runs with.
    pub default: Option<String>,
    /// The only values the parameter may take, when given (the default
    /// is one of them); `None`: any value.
    pub allowed: Option<Vec<String>>,
}

/// A job's parameters by name, validated: what [`Params::resolve`]
/// checks a run's values against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params(pub BTreeMap<String, Param>);

/// The values of a run's parameters, by name: every parameter of its
/// job, checked.
pub type ParamValues = BTreeMap<String, String>;

/// Why the values given for a run do not fit its job's parameters.
///
/// From [`Scheduler::trigger`](crate::Scheduler::trigger) (in
/// [`SchedulerError::Params`](crate::SchedulerError::Params)), and what
/// `cronlease trigger --param` and the dashboard's form say.
///
/// ```
/// use cronlease::ParamError;
///
/// let error = ParamError::NotAllowed {
///     name: "region".into(),
///     value: "mars".into(),
///     allowed: vec!["eu".into(), "us".into()],
/// };
/// assert_eq!(
///     error.to_string(),
///     "\"mars\" is not an allowed value of parameter region: expected one of \"eu\", \"us\""
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParamError {
    /// The job declares no parameter of this name.
    #[error("{}", undeclared(name, declared))]
    Undeclared {
        /// The name given.
        name: String,
        /// The job's parameters.
        declared: Vec<String>,
    },
    /// The parameter has an `allowed` list without this value.
    #[error(
        "{value:?} is not an allowed value of parameter {name}: expected one of {}",
        quoted(allowed)
    )]
    NotAllowed {
        /// The parameter.
        name: String,
        /// The value given.
        value: String,
        /// Its `allowed` list.
        allowed: Vec<String>,
    },
    /// The value is too long or holds a control character.
    #[error("the value of parameter {name} {reason}")]
    Invalid {
        /// The parameter.
        name: String,
        /// What is wrong with the value.
        reason: String,
    },
    /// The parameter was given twice.
    #[error("parameter {name} is given twice: expected each once")]
    Repeated {
        /// The parameter.
        name: String,
    },
    /// The parameter has no default and was not given.
    #[error("parameter {name} has no default: expected a value for it")]
    Missing {
        /// The parameter.
        name: String,
    },
}

fn undeclared(name: &str, declared: &[String]) -> String {
    if declared.is_empty() {
        format!("no parameter {name:?}: the job declares no parameters")
    } else {
        format!(
            "no parameter {name:?}: expected one of {}",
            declared.join(", ")
        )
    }
}

fn quoted(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    quoted.join(", ")
}

impl Params {
    /// Whether the job declares no parameter.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values a tick of the schedule runs with: every default.
    pub fn defaults(&self) -> ParamValues {
        self.0
            .iter()
            .filter_map(|(name, param)| Some((name.clone(), param.default.clone()?)))
            .collect()
    }

    /// The values of a run given `given` (name, value; any order): each
    /// name declared and given once, each value valid and allowed, and
    /// the defaults of the parameters not given.
    pub fn resolve(
        &self,
        given: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ParamValues, ParamError> {
        let mut values = ParamValues::new();
        for (name, value) in given {
            let Some(param) = self.0.get(&name) else {
                return Err(ParamError::Undeclared {
                    name,
                    declared: self.0.keys().cloned().collect(),
                });
            };
            if let Some(reason) = value_problem(&value) {
                return Err(ParamError::Invalid {
                    name,
                    reason: reason.to_string(),
                });
            }
            if let Some(allowed) = &param.allowed
                && !allowed.contains(&value)
            {
                return Err(ParamError::NotAllowed {
                    name,
                    value,
                    allowed: allowed.clone(),
                });
            }
            if values.contains_key(&name) {
                return Err(ParamError::Repeated { name });
            }
            values.insert(name, value);
        }
        for (name, param) in &self.0 {
            if !values.contains_key(name) {
                let Some(default) = &param.default else {
                    return Err(ParamError::Missing { name: name.clone() });
                };
                values.insert(name.clone(), default.clone());
            }
        }
        Ok(values)
    }
}

/// `a-z 0-9 _`, 1 to [`MAX_PARAM_NAME_CHARS`] characters.
pub fn is_param_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PARAM_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// What is wrong with a parameter's value, if anything: longer than
/// [`MAX_PARAM_VALUE_BYTES`], or a control character in it.
pub fn value_problem(value: &str) -> Option<&'static str> {
    if value.len() > MAX_PARAM_VALUE_BYTES {
        Some("is longer than 1024 bytes")
    } else if value.chars().any(char::is_control) {
        Some("holds a control character (a line break?)")
    } else {
        None
    }
}

/// The variable a run's process sees parameter `name` as.
pub fn env_name(name: &str) -> String {
    format!("{PARAM_ENV_PREFIX}{}", name.to_ascii_uppercase())
}

/// `params`, each name and setting checked; the invalid ones are left
/// out (their problems recorded under the field `params.<name>`).
pub(super) fn job_params(
    checker: &mut Checker<'_>,
    section: &str,
    raw: BTreeMap<Given<String>, Given<RawParam>>,
) -> Params {
    if raw.len() > MAX_PARAMS {
        let at = raw.keys().nth(MAX_PARAMS).and_then(Given::at);
        checker.problem(
            at,
            Some(section),
            Some("params"),
            format!("{} parameters: expected at most {MAX_PARAMS}", raw.len()),
        );
    }
    let mut params = BTreeMap::new();
    for (name, raw) in raw {
        let field = format!("params.{}", name.get());
        if !is_param_name(name.get()) {
            checker.problem(
                name.at(),
                Some(section),
                Some("params"),
                format!(
                    "invalid parameter name {:?}: expected 1 to {MAX_PARAM_NAME_CHARS} characters from a-z 0-9 _ (a run sees it as {PARAM_ENV_PREFIX}<NAME>)",
                    name.get()
                ),
            );
            continue;
        }
        let at = raw.at();
        if let Some(param) = job_param(checker, section, &field, at, raw.into_inner()) {
            params.insert(name.into_inner(), param);
        }
    }
    Params(params)
}

/// One parameter: values valid, a default (every tick of the schedule
/// runs with it), in `allowed` when that is given.
fn job_param(
    checker: &mut Checker<'_>,
    section: &str,
    field: &str,
    at: Option<std::ops::Range<usize>>,
    raw: RawParam,
) -> Option<Param> {
    let before = checker.problems.len();
    let value_ok = |checker: &mut Checker<'_>, value: &Given<String>, what: &str| {
        if let Some(reason) = value_problem(value.get()) {
            checker.problem(
                value.at(),
                Some(section),
                Some(field),
                format!("{what} {reason}: expected at most {MAX_PARAM_VALUE_BYTES} bytes without control characters"),
            );
        }
    };
    if let Some(default) = &raw.default {
        value_ok(checker, default, "the default");
    }
    let allowed = raw.allowed.map(|allowed| {
        let list_at = allowed.at();
        let list = allowed.into_inner();
        if list.is_empty() {
            checker.problem(
                list_at,
                Some(section),
                Some(field),
                "empty `allowed`: expected at least one value, or no `allowed` (any value)".into(),
            );
        }
        for value in &list {
            value_ok(checker, value, "an allowed value");
        }
        list.into_iter().map(Given::into_inner).collect::<Vec<_>>()
    });
    match (&raw.default, &allowed) {
        (None, _) => checker.problem(
            at,
            Some(section),
            Some(field),
            format!(
                "no `default`: every tick of the job's schedule runs with the defaults, so each parameter needs one; expected e.g. {} = {{ default = \"…\" }}",
                field.trim_start_matches("params.")
            ),
        ),
        (Some(default), Some(allowed))
            if !allowed.is_empty() && !allowed.contains(default.get()) =>
        {
            checker.problem(
                default.at(),
                Some(section),
                Some(field),
                format!(
                    "the default {:?} is not in `allowed`: expected one of {}",
                    default.get(),
                    quoted(allowed)
                ),
            );
        }
        _ => {}
    }
    (checker.problems.len() == before).then(|| Param {
        default: raw.default.map(Given::into_inner),
        allowed,
    })
}

/// The `{param.<name>}` templates of `text`, each name as written, or
/// what is wrong: a `{param.` without its `}`.
fn template_names(text: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{param.") {
        let after = &rest[start + "{param.".len()..];
        let Some(end) = after.find('}') else {
            return Err("a `{param.` without its closing `}`: expected {param.<name>}".into());
        };
        names.push(&after[..end]);
        rest = &after[end + 1..];
    }
    Ok(names)
}

/// An HTTP job's `url` and `body`: every `{param.<name>}` names a declared
/// parameter, and none is in the URL's scheme or host (a parameter may
/// not send the request elsewhere).
pub(super) fn check_http_templates(
    checker: &mut Checker<'_>,
    section: &str,
    request: &HttpRequest,
    params: &Params,
) {
    let texts = [
        ("http.url", Some(request.url.as_str())),
        ("http.body", request.body.as_deref()),
    ];
    for (field, text) in texts {
        let Some(text) = text else { continue };
        let names = match template_names(text) {
            Ok(names) => names,
            Err(message) => {
                checker.problem(None, Some(section), Some(field), message);
                continue;
            }
        };
        for name in names {
            if !params.0.contains_key(name) {
                let declared: Vec<&str> = params.0.keys().map(String::as_str).collect();
                let expected = if declared.is_empty() {
                    "the job declares no parameters (add `params`)".to_string()
                } else {
                    format!("expected one of {}", declared.join(", "))
                };
                checker.problem(
                    None,
                    Some(section),
                    Some(field),
                    format!("{{param.{name}}} names no parameter of the job: {expected}"),
                );
            }
        }
    }
    let authority = request.url.split_once("://").map_or("", |(_, rest)| {
        rest.split(['/', '?', '#']).next().unwrap_or("")
    });
    if authority.contains("{param.") {
        checker.problem(
            None,
            Some(section),
            Some("http.url"),
            "a {param.<name>} in the URL's host: expected parameters in its path, query or fragment only (a parameter may not send the request to another host)".into(),
        );
    }
}

/// How a value goes into a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Percent-encoded: every byte but `A-Z a-z 0-9 - . _ ~` (a URL).
    Percent,
    /// As it is (a body).
    Verbatim,
}

/// `text` with each `{param.<name>}` of a parameter in `values` replaced
/// by its value, encoded; other text as it is.
pub fn substitute(text: &str, values: &ParamValues, encoding: Encoding) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{param.") {
        let after = &rest[start + "{param.".len()..];
        let Some((name, tail)) = after.split_once('}') else {
            break;
        };
        out.push_str(&rest[..start]);
        match values.get(name) {
            Some(value) => encode(&mut out, value, encoding),
            None => {
                out.push_str("{param.");
                out.push_str(name);
                out.push('}');
            }
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

fn encode(out: &mut String, value: &str, encoding: Encoding) {
    match encoding {
        Encoding::Verbatim => out.push_str(value),
        Encoding::Percent => {
            for byte in value.bytes() {
                if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                    out.push(char::from(byte));
                } else {
                    let _ = write!(out, "%{byte:02X}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        let region = Param {
            default: Some("eu".into()),
            allowed: Some(vec!["eu".into(), "us".into()]),
        };
        let note = Param {
            default: Some(String::new()),
            allowed: None,
        };
        Params([("region".into(), region), ("note".into(), note)].into())
    }

    fn given(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn values_are_checked_and_defaults_filled_in() {
        let check = |pairs: &[(&str, &str)], expected: Result<&[(&str, &str)], &str>| {
            let got = params().resolve(given(pairs));
            match (got, expected) {
                (Ok(values), Ok(want)) => {
                    let want: ParamValues = given(want).into_iter().collect();
                    assert_eq!(values, want, "{pairs:?}");
                }
                (Err(e), Err(fragment)) => {
                    assert!(e.to_string().contains(fragment), "{pairs:?}: {e}")
                }
                (got, want) => panic!("{pairs:?}: got {got:?}, want {want:?}"),
            }
        };
        check(&[], Ok(&[("note", ""), ("region", "eu")]));
        check(
            &[("region", "us"), ("note", "a b/c")],
            Ok(&[("note", "a b/c"), ("region", "us")]),
        );
        check(&[("region", "mars")], Err("not an allowed value"));
        check(&[("zone", "a")], Err("expected one of note, region"));
        check(&[("note", "a\nb")], Err("control character"));
        check(&[("note", &"x".repeat(1025))], Err("longer than 1024"));
        check(&[("note", "a"), ("note", "b")], Err("given twice"));
        let required = Params(
            [(
                "x".into(),
                Param {
                    default: None,
                    allowed: None,
                },
            )]
            .into(),
        );
        assert_eq!(
            required.resolve(Vec::new()),
            Err(ParamError::Missing { name: "x".into() })
        );
        assert!(
            Params::default()
                .resolve(given(&[("a", "b")]))
                .unwrap_err()
                .to_string()
                .contains("declares no parameters")
        );
    }

    #[test]
    fn names_are_lowercase_letters_digits_and_underscores() {
        for name in ["region", "a1", "_x", "batch_size"] {
            assert!(is_param_name(name), "{name}");
        }
        for name in ["", "Region", "a-b", "a.b", "é", &"a".repeat(65)] {
            assert!(!is_param_name(name), "{name}");
        }
        assert_eq!(env_name("batch_size"), "CRONLEASE_PARAM_BATCH_SIZE");
    }

    #[test]
    fn templates_take_values_percent_encoded_in_urls() {
        let values: ParamValues = given(&[("region", "us east/1?&"), ("n", "5")])
            .into_iter()
            .collect();
        let check = |text: &str, encoding: Encoding, expected: &str| {
            assert_eq!(substitute(text, &values, encoding), expected, "{text}");
        };
        check(
            "https://h/r/{param.region}?n={param.n}",
            Encoding::Percent,
            "https://h/r/us%20east%2F1%3F%26?n=5",
        );
        check(
            "{\"region\": \"{param.region}\"}",
            Encoding::Verbatim,
            "{\"region\": \"us east/1?&\"}",
        );
        check(
            "{param.other} {param.",
            Encoding::Verbatim,
            "{param.other} {param.",
        );
        check("no templates", Encoding::Percent, "no templates");
        assert_eq!(template_names("a{param.x}b{param.y}"), Ok(vec!["x", "y"]));
        assert!(template_names("a{param.x").is_err());
    }
}
