//! `[groups.<name>]`: concurrency groups, each with its `max` (how many
//! runs of its jobs may be in flight at once across the cluster), and a
//! job's `group`, which names one. The slots are taken in Redis by the
//! claim (`claim.lua`), so a group is refused where one script cannot
//! reach both the job's keys and the group's: `[redis] cluster` and
//! `[redis] quorum`.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;
use toml::de::DeValue;

use super::checker::{Checker, Given, is_name};

/// The largest `max` of a group.
const MAX_GROUP_SLOTS: i64 = 100_000;

/// One `[groups.<name>]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    max: Option<Spanned<i64>>,
}

/// A job's concurrency group: its name and how many runs of the group's
/// jobs may be in flight at once across the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobGroup {
    /// The group's name (`[groups.<name>]`), also a Redis key part.
    pub name: String,
    /// How many runs of the group's jobs may be in flight at once.
    pub max: u32,
}

/// The groups of a table: the valid ones by name with their `max`, and
/// the names of every one declared (a job naming an invalid one is not
/// told again that it does not exist).
#[derive(Debug, Clone, Default)]
pub(crate) struct Groups {
    pub(crate) valid: BTreeMap<String, u32>,
    pub(crate) declared: Vec<String>,
}

/// Each `[groups.<name>]` of the `groups` table, deserialized on its own.
pub(super) fn read_groups(
    checker: &mut Checker<'_>,
    value: &Spanned<DeValue<'_>>,
) -> Vec<(Spanned<String>, Option<RawGroup>)> {
    let DeValue::Table(table) = value.get_ref() else {
        checker.problem(
            Some(value.span()),
            Some("groups"),
            None,
            "expected a table of groups: [groups.<name>] with `max = 2`".into(),
        );
        return Vec::new();
    };
    table
        .iter()
        .map(|(name, raw)| {
            let section = format!("groups.{}", name.get_ref());
            let group = checker.deserialize_table::<RawGroup>(&section, raw);
            let name = Spanned::new(name.span(), name.get_ref().to_string());
            (name, group)
        })
        .collect()
}

/// Every group checked: its name, and a `max` from 1 to 100000.
pub(super) fn validate_groups(
    checker: &mut Checker<'_>,
    raw: Vec<(Spanned<String>, Option<RawGroup>)>,
) -> Groups {
    let mut groups = Groups::default();
    for (name, raw) in raw {
        let (at, name) = (name.span(), name.into_inner());
        groups.declared.push(name.clone());
        let section = format!("groups.{name}");
        if !is_name(&name, 128) {
            checker.problem(
                Some(at),
                Some(&section),
                None,
                format!("invalid group name {name:?}: expected 1 to 128 characters from A-Z a-z 0-9 _ . -"),
            );
            continue;
        }
        let Some(raw) = raw else { continue };
        let Some(max) = raw.max else {
            checker.problem(
                Some(at),
                Some(&section),
                Some("max"),
                "missing `max`: expected how many runs of the group's jobs may be in flight at once, e.g. `max = 2`".into(),
            );
            continue;
        };
        let before = checker.problems.len();
        let max = checker.integer(&section, "max", Some(&max), 1, 1..MAX_GROUP_SLOTS + 1);
        if checker.problems.len() == before {
            let max = u32::try_from(max).expect("max was checked to be within 1..=100000");
            groups.valid.insert(name, max);
        }
    }
    groups.declared.sort();
    groups
}

/// What a job's `group` is checked against: the table's groups, and
/// whether the deployment can hold one (`refused`: why not).
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupContext {
    pub(crate) groups: Groups,
    pub(crate) refused: Option<&'static str>,
}

/// A job's `group`: one of the table's groups, on a deployment where a
/// claim can take the group's slot in the same script.
pub(super) fn job_group(
    checker: &mut Checker<'_>,
    section: &str,
    group: Option<&Given<String>>,
    context: &GroupContext,
) -> Option<JobGroup> {
    let group = group?;
    let name = group.get();
    if let Some(why) = context.refused {
        checker.problem(
            group.at(),
            Some(section),
            Some("group"),
            format!("concurrency groups are not available with `[redis] {why}` (a group's slots are not in the job's hash slot, so the claim cannot take one in the same script): expected no `group`"),
        );
        return None;
    }
    if let Some(max) = context.groups.valid.get(name) {
        return Some(JobGroup {
            name: name.clone(),
            max: *max,
        });
    }
    if !context.groups.declared.contains(name) {
        let known = if context.groups.declared.is_empty() {
            "none is declared: add a [groups.<name>] table with `max`".to_string()
        } else {
            format!("expected one of {}", context.groups.declared.join(", "))
        };
        checker.problem(
            group.at(),
            Some(section),
            Some("group"),
            format!("unknown group {name:?}: {known}"),
        );
    }
    None
}
