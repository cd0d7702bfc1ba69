//! What the daemon recorded: the outcome stream of a job, read straight from
//! Redis so tests check the contract (DESIGN.md, "Nothing lost") and not the
//! daemon's own view of it.

use std::collections::BTreeMap;

/// One entry of `<prefix>:{<job>}:runs`.
///
/// Fields: `tick` (ms since the epoch, UTC), `fence`, `run_id`, `replica`,
/// `host`, `started_ms`, `finished_ms`, `duration_ms`, `status` (`ok`,
/// `failed`, `timeout`, `lost_lease`, `interrupted`, `abandoned`,
/// `skipped_overlap`), `exit_code` and `signal` (each may be absent),
/// `attempts`, `output` (a tail, may be empty), `stale` (`"0"`/`"1"`),
/// `trigger` (`schedule`, `misfire`, `rerun`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The stream entry id (`<ms>-<seq>`), which orders outcomes by when
    /// they were written.
    pub id: String,
    pub fields: BTreeMap<String, String>,
}

impl Outcome {
    /// A field, if present.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// The scheduled instant this outcome is for, in ms since the epoch.
    #[track_caller]
    pub fn tick(&self) -> i64 {
        self.number("tick")
    }

    /// The fencing token the run was claimed with.
    #[track_caller]
    pub fn fence(&self) -> i64 {
        self.number("fence")
    }

    #[track_caller]
    pub fn status(&self) -> &str {
        self.required("status")
    }

    #[track_caller]
    pub fn replica(&self) -> &str {
        self.required("replica")
    }

    #[track_caller]
    pub fn run_id(&self) -> &str {
        self.required("run_id")
    }

    /// Whether this is a late record from a holder whose run had already
    /// been declared abandoned (never the tick's current outcome).
    #[track_caller]
    pub fn stale(&self) -> bool {
        self.required("stale") == "1"
    }

    #[track_caller]
    fn required(&self, name: &str) -> &str {
        self.field(name)
            .unwrap_or_else(|| panic!("outcome lacks field `{name}`: {self:?}"))
    }

    #[track_caller]
    fn number(&self, name: &str) -> i64 {
        let text = self.required(name);
        text.parse().unwrap_or_else(|e| {
            panic!("outcome field `{name}` = {text:?} is not an integer ({e}): {self:?}")
        })
    }
}

/// Every outcome of `job` under `prefix`, oldest first (`XRANGE - +` on
/// `<prefix>:{<job>}:runs`); empty when the stream does not exist.
#[track_caller]
pub fn read_outcomes(redis: &mut redis::Connection, prefix: &str, job: &str) -> Vec<Outcome> {
    let key = format!("{prefix}:{{{job}}}:runs");
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query(redis)
        .unwrap_or_else(|e| panic!("XRANGE {key} - + failed: {e}"));
    entries
        .into_iter()
        .map(|(id, flat)| {
            assert!(
                flat.len() % 2 == 0,
                "stream entry {id} of {key} has an odd number of items: {flat:?}"
            );
            let fields = flat
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect();
            Outcome { id, fields }
        })
        .collect()
}
