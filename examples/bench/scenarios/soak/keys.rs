//! The soak's names for Redis keys, and the key count the data model
//! allows.

use crate::cluster::KEY_PREFIX;

use super::sample::SoakSample;

/// What follows a job's hash tag in the names of its keys
/// (`bench:{j00001}:state`), in the order of the soak's columns.
const JOB_KEY_KINDS: [&str; 7] = [
    "state", "runs", "running", "lease", "reruns", "done", "done_at",
];

/// The kind of `…:{J}:done:<run id>`: the per-run done marker of older
/// releases, one string per recorded run.
const PER_RUN_DONE: &str = "done:<run id>";

/// The keys of the deployment, outside every job's hash tag.
const DEPLOYMENT_KEY_KINDS: [&str; 3] = ["replicas", "epoch", "triggers"];

/// A key the soak has no name for: a new key of the data model shows here.
const OTHER_KEY_KIND: &str = "other";

/// The kinds that remember which runs are recorded (so a second delivery
/// of an outcome is a no-op): the dedup window (`done` hash, `done_at`
/// sorted set) and the per-run markers of older releases.
pub const DEDUP_KEY_KINDS: [&str; 3] = ["done", "done_at", PER_RUN_DONE];

/// The soak's columns, in order.
pub fn key_kinds() -> Vec<&'static str> {
    let mut kinds = JOB_KEY_KINDS.to_vec();
    kinds.push(PER_RUN_DONE);
    kinds.extend(DEPLOYMENT_KEY_KINDS);
    kinds.push(OTHER_KEY_KIND);
    kinds
}

/// The kind of a key: for a job's key, what follows its hash tag
/// (`bench:{j00001}:state` is `state`; `lease:<run id>`, a lease under
/// `overlap = "allow"`, is `lease`; `done:<run id>` is [`PER_RUN_DONE`]);
/// for the deployment's keys their name; anything else
/// [`OTHER_KEY_KIND`].
pub fn key_kind(key: &str) -> &'static str {
    let Some(rest) = key
        .strip_prefix(KEY_PREFIX)
        .and_then(|rest| rest.strip_prefix(':'))
    else {
        return OTHER_KEY_KIND;
    };
    let known = |kinds: &[&'static str], name: &str| {
        kinds
            .iter()
            .copied()
            .find(|&kind| kind == name)
            .unwrap_or(OTHER_KEY_KIND)
    };
    match job_key_part(rest) {
        Some((_, part)) => match part.split_once(':') {
            Some(("lease", _)) => "lease",
            Some(("done", _)) => PER_RUN_DONE,
            Some(_) => OTHER_KEY_KIND,
            None => known(&JOB_KEY_KINDS, part),
        },
        None => known(&DEPLOYMENT_KEY_KINDS, rest),
    }
}

/// `{job}:part` → (job, part): a job's key without the prefix, split at
/// its hash tag.
pub fn job_key_part(rest: &str) -> Option<(&str, &str)> {
    let (job, after) = rest.strip_prefix('{')?.split_once('}')?;
    Some((job, after.strip_prefix(':')?))
}

/// The most keys the soak's Redis should hold if memory is bounded by the
/// job table and the history kept, from the data model in
/// `src/store.rs`. Per job, the two keys under its hash tag that live as
/// long as the job: `state` (hash) and `runs` (the outcome stream, trimmed
/// to `history`); plus its `dedup_keys_per_job` keys that remember which
/// runs are recorded (the dedup window: at most `done`, a hash, and
/// `done_at`, a sorted set; in older releases, one `done:<run id>`
/// string per run, kept 7 days, so a count that grows with the runs).
/// Per run in flight, two: its job's `running` hash and its lease (with
/// `overlap = "skip"`, the soak's, at most one run per job). And the three
/// keys of the deployment: `replicas` (heartbeats), `epoch` and `triggers`
/// (the manual-run stream). Not counted: `reruns` (only while an abandoned
/// tick waits for its rerun) and locks' keys; the soak has neither.
pub fn soak_key_bound(jobs: u64, dedup_keys_per_job: u64, runs_in_flight: u64) -> u64 {
    jobs * (2 + dedup_keys_per_job) + 2 * runs_in_flight + 3
}

/// How the binary under test remembers which runs are recorded, read from
/// the keys it wrote: the dedup term of [`soak_key_bound`].
#[derive(Debug, Clone, Copy)]
pub enum DedupKeys {
    /// The dedup window: per job a `done` hash and a `done_at`
    /// sorted set, whatever the number of runs.
    Window,
    /// One `done:<run id>` string per recorded run, kept 7 days;
    /// `most_per_job` is the most one job had at the sample.
    PerRun { most_per_job: u64 },
    /// No dedup key at all: nothing was recorded.
    Absent,
}

impl DedupKeys {
    pub fn of(sample: &SoakSample) -> DedupKeys {
        if sample.kind(PER_RUN_DONE) > 0 {
            DedupKeys::PerRun {
                most_per_job: sample.dedup_keys_most_per_job,
            }
        } else if sample.kind("done") + sample.kind("done_at") > 0 {
            DedupKeys::Window
        } else {
            DedupKeys::Absent
        }
    }

    pub fn per_job(self) -> u64 {
        match self {
            DedupKeys::Window => 2,
            DedupKeys::PerRun { most_per_job } => most_per_job,
            DedupKeys::Absent => 0,
        }
    }

    pub fn describe(self) -> String {
        match self {
            DedupKeys::Window => "2: a window (`done`, `done_at`)".to_string(),
            DedupKeys::PerRun { most_per_job } => format!(
                "{most_per_job} (the most of one job): one `done:<run id>` per run, for 7 days"
            ),
            DedupKeys::Absent => "0: none written".to_string(),
        }
    }
}
