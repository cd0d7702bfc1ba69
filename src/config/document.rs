//! The walk of one config document: its TOML syntax, its top-level
//! sections, and the jobs table, each section handed to its validator and
//! every problem collected on the way ([`Config::load`], [`Config::parse`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use toml::Spanned;
use toml::de::{DeTable, DeValue, Error as TomlError};

use super::calendars::{RawCalendar, read_calendars, validate_calendars};
use super::chain::check_chains;
use super::checker::{Checker, Secrets};
use super::daemon_section::{RawDaemon, validate_daemon};
use super::dashboard_tokens::{named_tokens, validate_dashboard};
use super::environment;
use super::groups::{RawGroup, read_groups, validate_groups};
use super::job::{JobContext, JobSpec, Source, validate_named_job};
use super::notify_channels::{RawChannel, validate_channels};
use super::outline::{self, Outline};
use super::redis_section::{RawRedis, validate_redis};
use super::{Config, ConfigError, Job, Problem, duplicates};

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_reading(path, Secrets::Read)
    }

    /// [`Config::load`] without reading the notification channels'
    /// secrets, which are left empty: for the operator's commands, which
    /// send no notification and may run where those secrets are not
    /// readable. Such a config cannot send.
    pub fn load_without_secrets(path: &Path) -> Result<Config, ConfigError> {
        Config::load_reading(path, Secrets::Skip)
    }

    fn load_reading(path: &Path, secrets: Secrets) -> Result<Config, ConfigError> {
        let text = environment::read_config_file(path).map_err(|message| ConfigError {
            file: path.to_path_buf(),
            problems: vec![Problem {
                line_col: None,
                section: None,
                field: None,
                message,
            }],
        })?;
        match secrets {
            Secrets::Read => Config::parse(&text, path),
            Secrets::Skip => Config::parse_in(&text, path, Source::File, secrets),
        }
    }

    /// Validates `text` as if read from `path` (relative `workdir`s resolve
    /// against its directory). Validity does not depend on today's date: a
    /// job whose last year has passed is valid (see [`Config::warnings`]).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Config::parse_with(text, path, Source::File)
    }

    /// [`Config::parse`] of a job table from `source`: a file, or an
    /// embedded scheduler's (which may be empty, and whose jobs run
    /// handlers).
    pub(crate) fn parse_with(
        text: &str,
        path: &Path,
        source: Source,
    ) -> Result<Config, ConfigError> {
        Config::parse_in(text, path, source, Secrets::Read)
    }

    fn parse_in(
        text: &str,
        path: &Path,
        source: Source,
        secrets: Secrets,
    ) -> Result<Config, ConfigError> {
        let mut checker = Checker::new(text, secrets);
        // A plain document is parsed a job at a time (`outline`); any other,
        // and one whose pieces do not all parse, whole.
        let config = match outline::outline(text) {
            Some(outline) => match parse_outline(&mut checker, outline, path, source) {
                Ok(config) => config,
                Err(ParseWhole) => {
                    checker = Checker::new(text, secrets);
                    parse_document(&mut checker, path, source)
                }
            },
            None => parse_document(&mut checker, path, source),
        };
        let mut problems = checker.problems;
        match config {
            Some(config) if problems.is_empty() => Ok(config),
            _ => {
                // In file order; problems without a place (missing keys) last.
                problems.sort_by_key(|p| (p.line_col.is_none(), p.line_col));
                Err(ConfigError {
                    file: path.to_path_buf(),
                    problems,
                })
            }
        }
    }
}

/// The whole document: syntax first (nothing else is checked in a file
/// that does not parse), then each section, then the jobs.
fn parse_document(checker: &mut Checker<'_>, path: &Path, source: Source) -> Option<Config> {
    let (root, errors) = DeTable::parse_recoverable(checker.text);
    if !errors.is_empty() {
        syntax_problems(checker, errors);
        return None;
    }
    let sections = read_sections(checker, root.into_inner());
    // Only pieces can fail to parse, and the whole document has none.
    validate_sections(checker, sections, path, source).unwrap_or(None)
}

/// A plain document ([`outline::outline`]), a piece at a time: the
/// sections first, then each job parsed when its turn comes. Err when a
/// piece does not parse: the whole document is then parsed instead, for
/// its problems.
fn parse_outline(
    checker: &mut Checker<'_>,
    outline: Outline<'_>,
    path: &Path,
    source: Source,
) -> Result<Option<Config>, ParseWhole> {
    let mut root = DeTable::new();
    for range in outline.sections {
        // Pieces of distinct sections: their keys never meet.
        root.extend(outline::parse_piece(checker.text, range).ok_or(ParseWhole)?);
    }
    let mut sections = read_sections(checker, root);
    if !outline.jobs.is_empty() {
        sections.saw_jobs = true;
        sections.jobs = Some(Jobs::Pieces(outline.jobs));
    }
    validate_sections(checker, sections, path, source)
}

/// A piece of a plain document did not parse: parse the document whole.
struct ParseWhole;

/// The sections read from the document, each validated, then the jobs.
fn validate_sections(
    checker: &mut Checker<'_>,
    sections: Sections<'_>,
    path: &Path,
    source: Source,
) -> Result<Option<Config>, ParseWhole> {
    let redis = match sections.redis {
        None => {
            checker.problem(
                None,
                Some("redis"),
                Some("url"),
                "missing [redis] section: expected at least `url = \"redis://host:6379/0\"`".into(),
            );
            None
        }
        Some(raw) => raw.and_then(|raw| validate_redis(checker, raw)),
    };
    // References name every channel declared, valid or not: an invalid
    // one has its own problems, and "unknown channel" would mislead.
    let mut declared: Vec<String> = sections
        .notify
        .iter()
        .map(|(n, _)| n.get_ref().clone())
        .collect();
    declared.sort();
    let notify = validate_channels(checker, sections.notify);
    let channels = (&notify, declared.as_slice());
    let named = named_tokens(sections.dashboard.as_ref());
    let daemon = match sections.daemon {
        None => validate_daemon(checker, RawDaemon::default_raw(), &redis, channels, named),
        Some(raw) => raw.and_then(|raw| validate_daemon(checker, raw, &redis, channels, named)),
    };
    if !sections.saw_jobs && source == Source::File {
        checker.problem(
            None,
            Some("jobs"),
            None,
            "no jobs: expected at least one [jobs.<name>] table".into(),
        );
    }
    let calendars = validate_calendars(checker, sections.calendars, &environment::config_dir(path));
    let groups = validate_groups(checker, sections.groups);
    let dashboard = validate_dashboard(
        checker,
        sections.dashboard.as_ref(),
        &environment::config_dir(path),
        daemon.as_ref().and_then(|d| d.dashboard_token.as_ref()),
    );
    let context = JobContext::new(
        redis.as_ref(),
        daemon.as_ref().and_then(|d| d.dashboard_token.as_ref()),
        path,
        source,
    )
    .with_calendars(calendars)
    .with_groups(groups)
    .with_notify(
        &notify,
        declared,
        daemon
            .as_ref()
            .map(|d| d.notify.clone())
            .unwrap_or_default(),
    );
    let jobs = validate_jobs(checker, sections.jobs, &context)?;
    let (Some(redis), Some(daemon), Some(dashboard)) = (redis, daemon, dashboard) else {
        return Ok(None);
    };
    Ok(Some(Config {
        source: path.to_path_buf(),
        redis,
        daemon,
        jobs,
        notify,
        dashboard,
        replica_id_flag: None,
    }))
}

/// One problem per TOML syntax error; duplicate keys and tables explained
/// by [`duplicates::explain`] (each with where it was first defined).
fn syntax_problems(checker: &mut Checker<'_>, errors: Vec<TomlError>) {
    let mut duplicate_spans = Vec::new();
    for error in errors {
        let message = error.message().trim_end_matches('\n');
        match error.span() {
            Some(span) if message == "duplicate key" => duplicate_spans.push(span),
            span => checker.problem(span, None, None, format!("invalid TOML: {message}")),
        }
    }
    for duplicate in duplicates::explain(checker.text, &duplicate_spans) {
        let at = duplicate.offset;
        checker.problem(Some(at..at), None, None, duplicate.message);
    }
}

/// The document's top-level sections, deserialized one by one. A section
/// is `None` when the file lacks it, `Some(None)` when it did not
/// deserialize (its problems are recorded).
struct Sections<'i> {
    redis: Option<Option<RawRedis>>,
    daemon: Option<Option<RawDaemon>>,
    /// Each `[notify.<name>]`: its name, and its table if it deserialized.
    notify: Vec<(Spanned<String>, Option<RawChannel>)>,
    /// Each `[calendars.<name>]`: its name, and its table if it
    /// deserialized.
    calendars: Vec<(Spanned<String>, Option<RawCalendar>)>,
    /// Each `[groups.<name>]`: its name, and its table if it deserialized.
    groups: Vec<(Spanned<String>, Option<RawGroup>)>,
    /// `[dashboard]`, as it stands until validated.
    dashboard: Option<Spanned<DeValue<'i>>>,
    /// Whether the file has a `jobs` key at all (even an invalid one).
    saw_jobs: bool,
    /// The jobs, each read and validated in turn and its part of the
    /// document dropped, so a table of 100,000 jobs is never in memory
    /// three times over (document, raw, validated).
    jobs: Option<Jobs<'i>>,
}

/// The `jobs` of a document.
enum Jobs<'i> {
    /// As the whole document's parse has it.
    Parsed(Spanned<DeValue<'i>>),
    /// Each job's name and piece of the document, by name (see
    /// [`outline`]), parsed only when validated.
    Pieces(Vec<(&'i str, Range<usize>)>),
}

/// Deserializes `[redis]`, `[daemon]` and each `[jobs.<name>]` on its own;
/// any other top-level key is a problem.
fn read_sections<'i>(checker: &mut Checker<'_>, root: DeTable<'i>) -> Sections<'i> {
    let mut sections = Sections {
        redis: None,
        daemon: None,
        notify: Vec::new(),
        calendars: Vec::new(),
        groups: Vec::new(),
        dashboard: None,
        saw_jobs: false,
        jobs: None,
    };
    for (key, value) in root {
        match key.get_ref().as_ref() {
            "redis" => {
                sections.redis = Some(checker.deserialize_table::<RawRedis>("redis", &value));
            }
            "daemon" => {
                sections.daemon = Some(super::daemon_section::read_daemon(checker, &value));
            }
            "notify" => sections.notify = read_channels(checker, &value),
            "calendars" => sections.calendars = read_calendars(checker, &value),
            "groups" => sections.groups = read_groups(checker, &value),
            "dashboard" => sections.dashboard = Some(value),
            "jobs" => {
                sections.saw_jobs = true;
                sections.jobs = Some(Jobs::Parsed(value));
            }
            other => checker.problem(
                Some(key.span()),
                None,
                None,
                format!(
                    "unknown section `{other}`: expected `redis`, `daemon`, `dashboard`, `notify`, `calendars`, `groups` or `jobs`"
                ),
            ),
        }
    }
    sections
}

/// Each `[notify.<name>]` of the `notify` table, deserialized on its own.
fn read_channels(
    checker: &mut Checker<'_>,
    value: &Spanned<DeValue<'_>>,
) -> Vec<(Spanned<String>, Option<RawChannel>)> {
    let DeValue::Table(table) = value.get_ref() else {
        checker.problem(
            Some(value.span()),
            Some("notify"),
            None,
            "expected a table of channels: [notify.<name>]".into(),
        );
        return Vec::new();
    };
    table
        .iter()
        .map(|(name, raw)| {
            let section = format!("notify.{}", name.get_ref());
            let channel = checker.deserialize_table::<RawChannel>(&section, raw);
            let name = Spanned::new(name.span(), name.get_ref().to_string());
            (name, channel)
        })
        .collect()
}

/// Each job's name and definition, validated against `context`. Invalid
/// jobs are left out (their problems are recorded). Err when a job's piece
/// does not parse.
fn validate_jobs(
    checker: &mut Checker<'_>,
    jobs: Option<Jobs<'_>>,
    context: &JobContext,
) -> Result<BTreeMap<String, Job>, ParseWhole> {
    let mut validated = BTreeMap::new();
    // Where each job's `after` is, for the problems of the table's chains.
    let mut after_at = BTreeMap::new();
    let mut each = |checker: &mut Checker<'_>, table: DeTable<'_>| {
        for (name, raw) in table {
            if let Some((name, job, at)) = validate_entry(checker, name, &raw, context) {
                if let Some(at) = at {
                    after_at.insert(name.clone(), at);
                }
                validated.insert(name, job);
            }
        }
    };
    match jobs {
        None => {}
        Some(Jobs::Parsed(table)) => {
            let span = table.span();
            match table.into_inner() {
                DeValue::Table(table) => each(checker, table),
                _ => checker.problem(
                    Some(span),
                    Some("jobs"),
                    None,
                    "expected a table of jobs: [jobs.<name>]".into(),
                ),
            }
        }
        Some(Jobs::Pieces(pieces)) => {
            let text = checker.text;
            for (_, range) in pieces {
                let piece = outline::parse_piece(text, range).ok_or(ParseWhole)?;
                for (_, jobs) in piece {
                    // A job's piece holds `jobs`, a table of that one job.
                    let DeValue::Table(table) = jobs.into_inner() else {
                        return Err(ParseWhole);
                    };
                    each(checker, table);
                }
            }
        }
    }
    check_chains(checker, &mut validated, &after_at);
    Ok(validated)
}

/// One `[jobs.<name>]`: its table read into a [`JobSpec`], then its name
/// and definition validated; with where its `after` is, if it has one.
fn validate_entry(
    checker: &mut Checker<'_>,
    name: Spanned<Cow<'_, str>>,
    raw: &Spanned<DeValue<'_>>,
    context: &JobContext,
) -> Option<(String, Job, Option<Range<usize>>)> {
    let (name_span, name) = (name.span(), name.into_inner().into_owned());
    let spec = checker.deserialize_table::<JobSpec>(&format!("jobs.{name}"), raw);
    let after_at = spec.as_ref().and_then(|s| s.after.as_ref()?.at());
    let job = validate_named_job(checker, &name, Some(name_span), spec, context)?;
    Some((name, job, after_at))
}
