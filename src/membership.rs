//! Who is in the cluster: the heartbeat record every replica writes to
//! `<prefix>:replicas`, and the one rule that says whether a replica is
//! alive.
//!
//! The daemon writes its record each heartbeat and reads everyone's (to
//! rank live replicas for claims, and to sweep the runs of dead ones); the
//! operator commands read them for `status`. Both go through [`Heartbeat`],
//! so the record's fields and the liveness rule exist once. A record that
//! does not parse is named and skipped by its reader, never taken as a live
//! replica with made-up fields.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// What a replica's heartbeat says about it (the JSON in `<prefix>:replicas`).
///
/// The definition hashes of a replica's jobs are not in the record it
/// writes at every heartbeat but in `Keys::replica_jobs`, written when its
/// job table changes ([`parse_job_hashes`]): every replica reads every
/// record at every heartbeat, and with 100,000 jobs the hashes are ~2.8 MB
/// per replica. Records of older releases carry them in `config_hash`;
/// ours leave it empty. `H` is what a reader keeps of it:
/// the map (`BTreeMap<String, String>`, for `status` and the dashboard),
/// or nothing ([`IgnoredAny`], [`Heartbeat::parse_without_hashes`]) for
/// the daemon, which needs only liveness and runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat<H = BTreeMap<String, String>> {
    pub host: String,
    pub pid: u64,
    pub version: String,
    /// Redis time the replica started.
    pub started_ms: i64,
    /// Redis time of this heartbeat.
    pub last_seen_ms: i64,
    /// The replica's heartbeat period: how often a new record is due.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: i64,
    /// The replica's lease: how long its runs stay claimed unrenewed.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: i64,
    /// Per job: the hash of its definition on that replica (drift), in
    /// records of replicas that kept them here (see above); else empty.
    #[serde(default)]
    pub config_hash: H,
    /// Its runs in flight.
    #[serde(default)]
    pub runs: Vec<RunInFlight>,
    /// How it keeps each run's processes together: `cgroup` or
    /// `process_group` (none yet: it has run no process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
    /// The id of the cluster's pause record (`cronlease pause --all`, a
    /// resume) the replica holds: its claims follow that record. `pause
    /// --all` waits until every live replica names the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_pause: Option<String>,
    /// Whether the replica is out of the rendezvous (`cronlease drain`, or
    /// its shutdown): it claims nothing and the others rank without it.
    /// Absent: it claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainState>,
    /// The replica's `[daemon] tags`, sorted: which jobs' `run_on` it
    /// matches. Absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The most runs it keeps in flight at once (`[daemon] max_runs`).
    /// Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
}

/// A replica out of the rendezvous, as its heartbeat tells it.
///
/// ```
/// use cronlease::membership::DrainState;
/// assert_eq!(serde_json::to_string(&DrainState::Drained).unwrap(), "\"drained\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DrainState {
    /// It claims nothing, and still has runs in flight.
    Draining,
    /// It claims nothing and has no run in flight.
    Drained,
}

impl DrainState {
    /// How `status` and the dashboard name it.
    pub fn as_str(self) -> &'static str {
        match self {
            DrainState::Draining => "draining",
            DrainState::Drained => "drained",
        }
    }
}

/// A run in flight, as a heartbeat reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct RunInFlight {
    pub job: String,
    pub run_id: String,
    pub tick_ms: i64,
    pub fence: u64,
}

/// The defaults of `[daemon]`, for records written before the fields
/// existed.
fn default_heartbeat_ms() -> i64 {
    5_000
}

fn default_lease_ms() -> i64 {
    30_000
}

impl Heartbeat {
    /// Reads a record from its JSON.
    pub fn parse(raw: &str) -> Result<Heartbeat, serde_json::Error> {
        serde_json::from_str(raw)
    }

    /// The record as stored.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a heartbeat is strings, numbers and maps of them")
    }
}

/// A replica's definition hashes (JSON: job → hash), as stored in
/// `Keys::replica_jobs`.
pub fn parse_job_hashes(raw: &str) -> Result<BTreeMap<String, String>, serde_json::Error> {
    serde_json::from_str(raw)
}

impl Heartbeat<IgnoredAny> {
    /// Reads a record from its JSON, skipping its definition hashes.
    pub fn parse_without_hashes(raw: &str) -> Result<Heartbeat<IgnoredAny>, serde_json::Error> {
        serde_json::from_str(raw)
    }
}

impl<H> Heartbeat<H> {
    /// How long the replica may be silent and still count as alive: three
    /// heartbeats, or its lease if that is longer (a run it holds is valid
    /// for that long). Saturating: a record is read from Redis, where any
    /// writer may have put any number.
    pub fn dead_after_ms(&self) -> i64 {
        self.heartbeat_ms.saturating_mul(3).max(self.lease_ms)
    }

    /// How long it has been silent at Redis time `now_ms` (saturating, as
    /// [`Heartbeat::dead_after_ms`]).
    pub fn silent_for_ms(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.last_seen_ms)
    }

    /// How long a silent replica's runs are still swept after its last
    /// heartbeat: from [`Heartbeat::dead_after_ms`] until two more of its
    /// leases and heartbeats and two of ours (`own_heartbeat_ms`) have
    /// passed. Saturating, as [`Heartbeat::dead_after_ms`].
    pub fn sweep_until_ms(&self, own_heartbeat_ms: i64) -> i64 {
        self.dead_after_ms()
            .saturating_add(
                self.lease_ms
                    .saturating_add(self.heartbeat_ms)
                    .saturating_mul(2),
            )
            .saturating_add(own_heartbeat_ms.saturating_mul(2))
    }

    /// Heard from within [`Heartbeat::dead_after_ms`] of `now_ms`.
    pub fn is_alive(&self, now_ms: i64) -> bool {
        self.silent_for_ms(now_ms) <= self.dead_after_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_read_without_hashes_keeps_everything_else() {
        let record = Heartbeat {
            host: "h".into(),
            pid: 7,
            version: "0.1.0".into(),
            started_ms: 1,
            last_seen_ms: 2,
            heartbeat_ms: 3,
            lease_ms: 4,
            config_hash: BTreeMap::from([("draw".to_string(), "abc".to_string())]),
            runs: vec![RunInFlight {
                job: "draw".into(),
                run_id: "r".into(),
                tick_ms: 5,
                fence: 6,
            }],
            containment: Some("cgroup".into()),
            cluster_pause: Some("p1".into()),
            drain: Some(DrainState::Draining),
            tags: vec!["gpu".into()],
            max_runs: Some(2),
        };
        let json = record.to_json();
        let full = Heartbeat::parse(&json).expect("a record");
        let light = Heartbeat::parse_without_hashes(&json).expect("a record");
        assert_eq!(full, record);
        let Heartbeat {
            config_hash: IgnoredAny,
            host,
            pid,
            version,
            started_ms,
            last_seen_ms,
            heartbeat_ms,
            lease_ms,
            runs,
            containment,
            cluster_pause,
            drain,
            tags,
            max_runs,
        } = light;
        assert_eq!(
            Heartbeat {
                host,
                pid,
                version,
                started_ms,
                last_seen_ms,
                heartbeat_ms,
                lease_ms,
                config_hash: record.config_hash.clone(),
                runs,
                containment,
                cluster_pause,
                drain,
                tags,
                max_runs,
            },
            record
        );
    }

    #[test]
    fn liveness_is_three_heartbeats_or_the_lease() {
        let beat = |heartbeat_ms, lease_ms| Heartbeat::<BTreeMap<String, String>> {
            host: "h".into(),
            pid: 1,
            version: "0".into(),
            started_ms: 0,
            last_seen_ms: 1_000_000,
            heartbeat_ms,
            lease_ms,
            config_hash: BTreeMap::new(),
            runs: Vec::new(),
            containment: None,
            cluster_pause: None,
            drain: None,
            tags: Vec::new(),
            max_runs: None,
        };
        let check = |heartbeat_ms: i64, lease_ms: i64, silent_ms: i64, alive: bool| {
            let record = beat(heartbeat_ms, lease_ms);
            assert_eq!(
                record.is_alive(1_000_000 + silent_ms),
                alive,
                "heartbeat {heartbeat_ms} ms, lease {lease_ms} ms, silent {silent_ms} ms"
            );
        };
        check(5_000, 30_000, 30_000, true);
        check(5_000, 30_000, 30_001, false);
        check(20_000, 30_000, 60_000, true);
        check(20_000, 30_000, 60_001, false);
    }

    #[test]
    fn records_with_extreme_numbers_are_judged_without_overflow() {
        // Found by the `heartbeat` fuzz target: a record is read from Redis,
        // where any writer may have put any number.
        let old = r#"{"host":"old","pid":1,"version":"0.0.9","started_ms":0,"last_seen_ms":1000}"#;
        let record = Heartbeat::parse(old).unwrap();
        assert_eq!(record.silent_for_ms(i64::MIN), i64::MIN);
        assert!(record.is_alive(i64::MIN));
        let extreme = Heartbeat {
            last_seen_ms: i64::MIN,
            heartbeat_ms: i64::MAX,
            lease_ms: i64::MAX,
            ..record
        };
        assert_eq!(extreme.dead_after_ms(), i64::MAX);
        assert_eq!(extreme.sweep_until_ms(i64::MAX), i64::MAX);
        assert_eq!(extreme.silent_for_ms(1_767_225_600_000), i64::MAX);
        assert!(extreme.is_alive(1_767_225_600_000));
    }

    #[test]
    fn old_records_and_corrupt_ones() {
        let old = r#"{"host":"h","pid":7,"version":"0.1.0","started_ms":1,"last_seen_ms":2}"#;
        let record = Heartbeat::parse(old).unwrap();
        assert_eq!((record.heartbeat_ms, record.lease_ms), (5_000, 30_000));
        assert!(record.runs.is_empty());
        assert_eq!(Heartbeat::parse(&record.to_json()).unwrap(), record);
        assert!(Heartbeat::parse("{\"host\": 3}").is_err());
        assert!(Heartbeat::parse("not json").is_err());
    }
}
