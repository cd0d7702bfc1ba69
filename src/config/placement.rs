//! Where a job runs: a replica's `[daemon] tags`, a job's `run_on` (the
//! tags a replica must have to start its runs) and `mode` (one run per
//! tick, or one on every matching replica), and the one rule that says
//! whether a replica's tags match a job ([`tags_match`]).

use serde::Deserialize;

use super::checker::{Checker, Given, is_name};

/// The longest tag, in bytes.
pub(crate) const MAX_TAG_LEN: usize = 64;

/// How many runs a tick of a job makes: one in the cluster, or one on
/// every live replica whose tags match the job's `run_on` (a job's
/// `mode`, default `One`).
///
/// ```
/// use cronlease::{JobBuilder, Mode};
///
/// let job = JobBuilder::new("clean-cache", "*/10 * * * *").mode(Mode::EveryReplica);
/// assert_eq!(Mode::EveryReplica.to_string(), "every_replica");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Mode {
    /// One replica runs each tick (the claim's rendezvous picks it).
    #[default]
    One,
    /// Each live matching replica runs each tick once (a broadcast job:
    /// a local cache's clean-up, a host's own files).
    EveryReplica,
}

impl Mode {
    /// As written in a job table.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::One => "one",
            Mode::EveryReplica => "every_replica",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a replica with `tags` may start runs of a job that needs
/// `run_on`: it has every one of them (a job without `run_on` runs
/// anywhere).
pub fn tags_match(tags: &[String], run_on: &[String]) -> bool {
    run_on.iter().all(|needed| tags.contains(needed))
}

/// Whether `tag` is a valid tag: 1 to [`MAX_TAG_LEN`] characters from
/// `A-Z a-z 0-9 _ . -`.
pub(crate) fn is_tag(tag: &str) -> bool {
    is_name(tag, MAX_TAG_LEN)
}

/// A list of tags (`[daemon] tags` or a job's `run_on`), each checked,
/// sorted and without repeats; a bad one is a problem at its place.
pub(super) fn tag_list(
    checker: &mut Checker<'_>,
    section: &str,
    field: &str,
    raw: Option<Given<Vec<Given<String>>>>,
) -> Vec<String> {
    let Some(raw) = raw else {
        return Vec::new();
    };
    let mut tags = Vec::new();
    for entry in raw.into_inner() {
        let text = entry.get();
        if is_tag(text) {
            tags.push(text.clone());
        } else {
            checker.problem(
                entry.at(),
                Some(section),
                Some(field),
                format!(
                    "invalid tag {text:?}: expected 1 to {MAX_TAG_LEN} characters from A-Z a-z 0-9 _ . - (e.g. \"gpu\", \"eu-west\")"
                ),
            );
        }
    }
    tags.sort();
    tags.dedup();
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_matches_when_it_has_every_tag_asked_for() {
        let tags = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert!(tags_match(&tags(&[]), &tags(&[])));
        assert!(tags_match(&tags(&["gpu"]), &tags(&[])));
        assert!(tags_match(&tags(&["eu", "gpu"]), &tags(&["gpu", "eu"])));
        assert!(!tags_match(&tags(&["gpu"]), &tags(&["gpu", "eu"])));
        assert!(!tags_match(&tags(&[]), &tags(&["gpu"])));
    }

    #[test]
    fn tags_are_names() {
        assert!(is_tag("gpu") && is_tag("eu-west.1_a"));
        assert!(!is_tag("") && !is_tag("g p u") && !is_tag("gpu,eu"));
        assert!(!is_tag(&"a".repeat(MAX_TAG_LEN + 1)));
    }
}
