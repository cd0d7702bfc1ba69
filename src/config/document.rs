//! The walk of one config document: its TOML syntax, its top-level
//! sections, and the jobs table, each section handed to its validator and
//! every problem collected on the way ([`Config::load`], [`Config::parse`]).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use toml::Spanned;
use toml::de::{DeTable, DeValue, Error as TomlError};

use super::checker::{Checker, is_name};
use super::daemon_section::{RawDaemon, validate_daemon};
use super::environment;
use super::job::{RawJob, validate_job};
use super::redis_section::{RawRedis, validate_redis};
use super::{Config, ConfigError, Job, OnHolderLost, Problem, RedisConfig, Topology, duplicates};

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = environment::read_config_file(path).map_err(|message| ConfigError {
            file: path.to_path_buf(),
            problems: vec![Problem {
                line_col: None,
                section: None,
                field: None,
                message,
            }],
        })?;
        Config::parse(&text, path)
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
        let mut checker = Checker {
            text,
            problems: Vec::new(),
            schedules: HashMap::new(),
        };
        let config = parse_document(&mut checker, path, source);
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
    let daemon = match sections.daemon {
        None => validate_daemon(checker, RawDaemon::default_raw(), &redis),
        Some(raw) => raw.and_then(|raw| validate_daemon(checker, raw, &redis)),
    };
    if !sections.saw_jobs && source == Source::File {
        checker.problem(
            None,
            Some("jobs"),
            None,
            "no jobs: expected at least one [jobs.<name>] table".into(),
        );
    }
    let base_dir = environment::config_dir(path);
    let jobs = validate_jobs(checker, sections.jobs, redis.as_ref(), &base_dir, source);
    Some(Config {
        source: path.to_path_buf(),
        redis: redis?,
        daemon: daemon?,
        jobs,
    })
}

/// Where a job table comes from, which says what its jobs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A file on disk: at least one job, each running a `command` or a
    /// `shell` script.
    File,
    /// An embedded scheduler (`crate::embed`): any number of jobs (they may
    /// come later), each running a handler registered in the program.
    Embedded,
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
    /// Whether the file has a `jobs` key at all (even an invalid one).
    saw_jobs: bool,
    /// The `jobs` table as parsed: each job is read and validated in turn
    /// and its part of the document dropped, so a table of 100,000 jobs
    /// is never in memory three times over (document, raw, validated).
    jobs: Option<Spanned<DeValue<'i>>>,
}

/// Deserializes `[redis]`, `[daemon]` and each `[jobs.<name>]` on its own;
/// any other top-level key is a problem.
fn read_sections<'i>(checker: &mut Checker<'_>, root: DeTable<'i>) -> Sections<'i> {
    let mut sections = Sections {
        redis: None,
        daemon: None,
        saw_jobs: false,
        jobs: None,
    };
    for (key, value) in root {
        match key.get_ref().as_ref() {
            "redis" => {
                sections.redis = Some(checker.deserialize_table::<RawRedis>("redis", &value));
            }
            "daemon" => {
                sections.daemon = Some(checker.deserialize_table::<RawDaemon>("daemon", &value));
            }
            "jobs" => {
                sections.saw_jobs = true;
                sections.jobs = Some(value);
            }
            other => checker.problem(
                Some(key.span()),
                None,
                None,
                format!("unknown section `{other}`: expected `redis`, `daemon` or `jobs`"),
            ),
        }
    }
    sections
}

/// Each job's name and definition, and what the deployment rules out for
/// it (`on_holder_lost = "rerun"` with a quorum). Invalid jobs are left
/// out (their problems are recorded).
fn validate_jobs(
    checker: &mut Checker<'_>,
    table: Option<Spanned<DeValue<'_>>>,
    redis: Option<&RedisConfig>,
    base_dir: &Path,
    source: Source,
) -> BTreeMap<String, Job> {
    let quorum = matches!(redis.map(|r| &r.topology), Some(Topology::Quorum(_)));
    let mut jobs = BTreeMap::new();
    let Some(table) = table else {
        return jobs;
    };
    let span = table.span();
    let DeValue::Table(table) = table.into_inner() else {
        checker.problem(
            Some(span),
            Some("jobs"),
            None,
            "expected a table of jobs: [jobs.<name>]".into(),
        );
        return jobs;
    };
    for (name, raw) in table {
        let (name_span, name) = (name.span(), name.into_inner().into_owned());
        let section = format!("jobs.{name}");
        let raw = checker.deserialize_table::<RawJob>(&section, &raw);
        if !is_name(&name, 128) {
            checker.problem(
                Some(name_span.clone()),
                Some(&section),
                None,
                format!(
                    "invalid job name {name:?}: expected 1 to 128 characters from A-Z a-z 0-9 _ . -"
                ),
            );
        }
        if let Some(job) =
            raw.and_then(|raw| validate_job(checker, &section, &name, raw, base_dir, source))
        {
            if quorum && job.on_holder_lost == OnHolderLost::Rerun {
                checker.problem(
                    Some(name_span),
                    Some(&section),
                    Some("on_holder_lost"),
                    "on_holder_lost = \"rerun\" is not available with `[redis] quorum` (a rerun would need its own quorum claim): expected \"record\"".into(),
                );
            }
            jobs.insert(name, job);
        }
    }
    jobs
}
