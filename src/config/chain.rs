//! Chains: a job's `after`, `after_on` and `after_all` ([`After`]), checked
//! per job, then across the table (every upstream a job of the table, no
//! cycle), and each upstream told its followers ([`link_chains`]), which
//! its outcomes start.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use serde::Deserialize;

use super::Job;
use super::checker::{Checker, Given, is_name};

/// Which outcomes of its upstreams start a run of a job (`after_on`).
///
/// A job's [`JobBuilder::after_on`](crate::JobBuilder::after_on), default
/// `Ok`. Only runs have outcomes that start followers: a tick skipped or
/// missed starts nothing.
///
/// ```
/// use cronlease::{AfterOn, JobBuilder};
///
/// let job = JobBuilder::after("alert", ["draw"]).after_on(AfterOn::Failed);
/// assert_eq!(AfterOn::default(), AfterOn::Ok);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AfterOn {
    /// Each run that ended `ok`.
    #[default]
    Ok,
    /// Each run that did not: `failed`, `timeout`, `lost_lease`,
    /// `interrupted`, `abandoned`, `killed`.
    Failed,
    /// Each run, whatever its end.
    Any,
}

impl AfterOn {
    /// As the config and the scripts spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AfterOn::Ok => "ok",
            AfterOn::Failed => "failed",
            AfterOn::Any => "any",
        }
    }
}

/// How a job with several upstreams waits for them (`after_all`).
///
/// A job's [`JobBuilder::join`](crate::JobBuilder::join), default `Each`.
///
/// ```
/// use cronlease::{Join, JobBuilder};
///
/// // One report once both extracts of the same tick have ended.
/// let job = JobBuilder::after("report", ["extract-eu", "extract-us"]).join(Join::All);
/// assert_eq!(Join::default(), Join::Each);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Join {
    /// A run for each matching outcome of any upstream.
    #[default]
    Each,
    /// One run once every upstream has a matching outcome for the same
    /// root tick (`after_all = true`).
    All,
}

/// What a follower's run is given for its parameters (`after_params`).
///
/// A job's [`JobBuilder::after_params`](crate::JobBuilder::after_params),
/// default `Defaults`.
///
/// ```
/// use cronlease::{AfterParams, JobBuilder};
///
/// let job = JobBuilder::after("publish", ["draw"]).after_params(AfterParams::Pass);
/// assert_eq!(AfterParams::default(), AfterParams::Defaults);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AfterParams {
    /// Its own defaults.
    #[default]
    Defaults,
    /// The upstream run's values of the parameters both jobs declare (with
    /// `after_all`, the first upstream's in the order of `after` that has
    /// one), its own defaults for the others; a value it does not allow
    /// gives way to its default, with a warning in the log.
    Pass,
}

/// A job's place in chains: the jobs whose outcomes start its runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct After {
    /// The upstream jobs, in the order given, each once.
    pub upstreams: Vec<String>,
    pub on: AfterOn,
    pub join: Join,
    pub params: AfterParams,
}

/// A job that follows this one: each of this job's outcomes that `on`
/// matches starts a run of it. Filled in from the table ([`link_chains`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follower {
    pub job: String,
    pub on: AfterOn,
}

/// The chain settings of a `[jobs.<name>]` table as given.
pub(super) struct RawAfter<'a> {
    pub(super) after: Option<&'a Given<Vec<Given<String>>>>,
    pub(super) after_on: Option<&'a Given<AfterOn>>,
    pub(super) after_all: Option<&'a Given<bool>>,
    pub(super) after_params: Option<&'a Given<AfterParams>>,
}

/// The job's `after` (None without one); `after_on` and `after_all` need
/// it. Names are checked here, that they are jobs of the table by
/// [`check_chains`].
pub(super) fn job_after(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    raw: RawAfter<'_>,
) -> Option<After> {
    let Some(after) = raw.after else {
        for (field, at) in [
            ("after_on", raw.after_on.map(Given::at)),
            ("after_all", raw.after_all.map(Given::at)),
            ("after_params", raw.after_params.map(Given::at)),
        ] {
            if let Some(at) = at {
                checker.problem(at, Some(section), Some(field), format!("`{field}` without `after`: expected `after = [\"upstream job\", …]` beside it"));
            }
        }
        return None;
    };
    let mut upstreams: Vec<String> = Vec::new();
    for upstream in after.get() {
        let text = upstream.get();
        if !is_name(text, 128) {
            checker.problem(
                upstream.at(),
                Some(section),
                Some("after"),
                format!(
                    "invalid job name {text:?} in `after`: expected the names of jobs of this table"
                ),
            );
        } else if text == name {
            checker.problem(
                upstream.at(),
                Some(section),
                Some("after"),
                format!(
                    "job {name:?} lists itself in `after`: a job cannot follow its own outcomes"
                ),
            );
        } else if upstreams.iter().any(|u| u == text) {
            checker.problem(
                upstream.at(),
                Some(section),
                Some("after"),
                format!("{text:?} is listed twice in `after`: expected each upstream once"),
            );
        } else {
            upstreams.push(text.clone());
        }
    }
    if after.get().is_empty() {
        checker.problem(after.at(), Some(section), Some("after"), "empty `after`: expected the jobs whose outcomes start this one, e.g. after = [\"extract\"]".into());
        return None;
    }
    let join = match raw.after_all.map(Given::get) {
        Some(true) => Join::All,
        _ => Join::Each,
    };
    Some(After {
        upstreams,
        on: raw.after_on.map(|on| *on.get()).unwrap_or_default(),
        join,
        params: raw.after_params.map(|p| *p.get()).unwrap_or_default(),
    })
}

/// Every job's `after` names a job of `jobs`, and following them leads
/// back to no job (a cycle would run forever); the problems name the job
/// and its `after` (`at`: where each job's `after` is, when read from a
/// document). Then each upstream is told its followers.
pub(super) fn check_chains(
    checker: &mut Checker<'_>,
    jobs: &mut BTreeMap<String, Job>,
    at: &BTreeMap<String, Range<usize>>,
) {
    check_chains_among(checker, jobs, at, &|_| false);
}

/// [`check_chains`], where an upstream may also be one of the table's
/// jobs not among `jobs` (`other` says which names are), which follow
/// none of them.
fn check_chains_among(
    checker: &mut Checker<'_>,
    jobs: &mut BTreeMap<String, Job>,
    at: &BTreeMap<String, Range<usize>>,
    other: &dyn Fn(&str) -> bool,
) {
    let mut broken = BTreeSet::new();
    for (name, job) in jobs.iter() {
        let Some(after) = &job.after else { continue };
        for upstream in &after.upstreams {
            if !jobs.contains_key(upstream) && !other(upstream) {
                let known: Vec<&str> = jobs.keys().map(String::as_str).collect();
                checker.problem(
                    at.get(name).cloned(),
                    Some(&format!("jobs.{name}")),
                    Some("after"),
                    format!(
                        "{upstream:?} in `after` is not a job of this table: expected one of {}",
                        known.join(", ")
                    ),
                );
                broken.insert(name.clone());
            } else if jobs
                .get(upstream)
                .is_some_and(|up| up.mode == super::Mode::EveryReplica)
            {
                checker.problem(
                    at.get(name).cloned(),
                    Some(&format!("jobs.{name}")),
                    Some("after"),
                    format!(
                        "{upstream:?} in `after` is a broadcast job (mode = \"every_replica\"), whose every tick ends once per replica: expected an upstream with mode = \"one\""
                    ),
                );
                broken.insert(name.clone());
            }
        }
    }
    if let Some(cycle) = find_cycle(jobs) {
        let first = cycle[0].clone();
        checker.problem(
            at.get(&first).cloned(),
            Some(&format!("jobs.{first}")),
            Some("after"),
            format!(
                "jobs follow each other in a cycle: {} (each would start the next forever): expected chains that end",
                cycle.join(" → ")
            ),
        );
        broken.extend(cycle);
    }
    for name in broken {
        jobs.remove(&name);
    }
    link_chains(jobs.values_mut());
}

/// Jobs given by code (an embedded scheduler's) checked as
/// [`check_chains`] checks a table's, `other` saying which names are the
/// table's other jobs; the valid ones, in the order given, and the
/// problems.
pub(crate) fn check_given_chains(
    jobs: Vec<Job>,
    other: &dyn Fn(&str) -> bool,
) -> (Vec<Job>, Vec<super::Problem>) {
    if jobs.iter().all(|job| job.after.is_none()) {
        return (jobs, Vec::new());
    }
    let order: Vec<String> = jobs.iter().map(|job| job.name.clone()).collect();
    let mut table: BTreeMap<String, Job> = jobs
        .into_iter()
        .map(|job| (job.name.clone(), job))
        .collect();
    let mut checker = Checker::new("", super::checker::Secrets::Read);
    check_chains_among(&mut checker, &mut table, &BTreeMap::new(), other);
    let valid = order.iter().filter_map(|name| table.remove(name)).collect();
    (valid, checker.problems)
}

/// A cycle of `after` among `jobs`, as the jobs in the order each follows
/// the one before, the first again at the end; None when there is none.
fn find_cycle(jobs: &BTreeMap<String, Job>) -> Option<Vec<String>> {
    // Depth-first over "follows" edges, the jobs in name order.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = jobs.keys().map(|k| (k.as_str(), Mark::New)).collect();
    for start in jobs.keys() {
        if marks[start.as_str()] != Mark::New {
            continue;
        }
        // The path from `start`, each with the index of its next upstream.
        let mut path: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        marks.insert(start.as_str(), Mark::Open);
        while let Some((job, next)) = path.last_mut() {
            let upstreams = jobs[*job].after.as_ref().map_or(&[][..], |a| &a.upstreams);
            let Some(upstream) = upstreams.get(*next) else {
                marks.insert(job, Mark::Done);
                path.pop();
                continue;
            };
            *next += 1;
            match marks.get(upstream.as_str()) {
                Some(Mark::New) => {
                    marks.insert(upstream.as_str(), Mark::Open);
                    path.push((upstream.as_str(), 0));
                }
                Some(Mark::Open) => {
                    // `upstream` is on the path: the cycle is from there on,
                    // read in the direction work flows (upstream first).
                    let from = path.iter().position(|(j, _)| *j == upstream)?;
                    let mut cycle: Vec<String> = path[from..]
                        .iter()
                        .rev()
                        .map(|(j, _)| j.to_string())
                        .collect();
                    // From its first name, whichever job the search began at.
                    let first = (0..cycle.len()).min_by_key(|&i| &cycle[i]).unwrap_or(0);
                    cycle.rotate_left(first);
                    cycle.push(cycle[0].clone());
                    return Some(cycle);
                }
                _ => {}
            }
        }
    }
    None
}

/// Tells each job of `jobs` which of them follow it (every `after` names a
/// job among them, or names one that is not there, which starts nothing).
fn link_chains<'a>(jobs: impl IntoIterator<Item = &'a mut Job>) {
    let mut jobs: Vec<&mut Job> = jobs.into_iter().collect();
    let mut followers = followers_of(jobs.iter().map(|job| &**job));
    for job in &mut jobs {
        job.followers = followers.remove(&job.name).unwrap_or_default();
    }
}

/// The followers of each job that has some, by the `after` of `jobs`.
pub(crate) fn followers_of<'a>(
    jobs: impl IntoIterator<Item = &'a Job>,
) -> BTreeMap<String, Vec<Follower>> {
    let mut followers: BTreeMap<String, Vec<Follower>> = BTreeMap::new();
    for job in jobs {
        if let Some(after) = &job.after {
            for upstream in &after.upstreams {
                followers
                    .entry(upstream.clone())
                    .or_default()
                    .push(Follower {
                        job: job.name.clone(),
                        on: after.on,
                    });
            }
        }
    }
    followers
}
