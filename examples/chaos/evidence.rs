//! What a run leaves in its output directory for the checker, and reads
//! back for `--recheck DIR`: `effects.log`, `notifications.jsonl`, the
//! replicas' logs and spools, `faults.jsonl`, `records.jsonl` and
//! `meta.json`.

use crate::ReplicaKind;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::faults::Fault;
use crate::harness::Harness;
use crate::records::{Record, Source};

/// What a run left behind for the checker.
pub struct Meta {
    pub seed: u64,
    pub duration: Duration,
    pub replicas: usize,
    /// When every replica was first ready, and when the shutdown began.
    pub ready_ms: i64,
    pub shutdown_ms: i64,
    /// When the wait for notifications to settle began (the shutdown's
    /// start when an older `meta.json` says nothing).
    pub settle_from_ms: i64,
    /// Replicas that died by themselves, did not exit 0 on SIGTERM, or
    /// did not take a reload.
    pub exit_problems: Vec<String>,
    /// What the replicas were (daemon when an older `meta.json` says
    /// nothing).
    pub replica_kind: ReplicaKind,
}

impl Meta {
    fn to_json(&self) -> Value {
        json!({
            "seed": self.seed,
            "duration_ms": self.duration.as_millis() as u64,
            "replicas": self.replicas,
            "ready_ms": self.ready_ms,
            "shutdown_ms": self.shutdown_ms,
            "settle_from_ms": self.settle_from_ms,
            "exit_problems": self.exit_problems,
            "replica_kind": self.replica_kind.name(),
        })
    }

    fn from_json(value: &Value) -> Result<Meta> {
        let number = |name: &str| {
            value[name]
                .as_i64()
                .with_context(|| format!("meta.json has no number {name:?}"))
        };
        Ok(Meta {
            seed: number("seed")? as u64,
            duration: Duration::from_millis(number("duration_ms")? as u64),
            replicas: number("replicas")? as usize,
            ready_ms: number("ready_ms")?,
            shutdown_ms: number("shutdown_ms")?,
            settle_from_ms: value["settle_from_ms"]
                .as_i64()
                .map_or_else(|| number("shutdown_ms"), Ok)?,
            exit_problems: value["exit_problems"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect(),
            replica_kind: match value["replica_kind"].as_str() {
                Some("embedded") => ReplicaKind::Embedded,
                _ => ReplicaKind::Daemon,
            },
        })
    }
}

/// Everything the checker reads.
pub struct Evidence {
    pub out: PathBuf,
    pub meta: Meta,
    pub faults: Vec<Fault>,
    pub records: Vec<Record>,
    pub effects_text: String,
    /// `notifications.jsonl`, when the run had a webhook sink.
    pub notifications_text: Option<String>,
    /// (replica, its whole log).
    pub logs: Vec<(String, String)>,
    /// Outcomes still in a replica's spool at the end.
    pub spooled: Vec<String>,
}

impl Evidence {
    /// Reads the outcome streams (merged with the snapshots taken before
    /// wipes) and writes `records.jsonl` and `meta.json`, so that the check
    /// can be repeated from the output directory alone (`--recheck DIR`).
    pub fn collect(
        harness: &Harness,
        seed: u64,
        duration: Duration,
        replica_kind: ReplicaKind,
    ) -> Result<Evidence> {
        let mut records = harness.snapshots.clone();
        let mut seen: BTreeSet<(String, BTreeMap<String, String>)> = records
            .iter()
            .map(|r| (r.job.clone(), r.fields.clone()))
            .collect();
        for record in harness.read_streams(Source::Final)? {
            if seen.insert((record.job.clone(), record.fields.clone())) {
                records.push(record);
            }
        }
        let out = &harness.out;
        let mut file =
            File::create(out.join("records.jsonl")).context("cannot create records.jsonl")?;
        for record in &records {
            writeln!(
                file,
                "{}",
                json!({"job": record.job, "id": record.id, "source": record.source.name(),
                       "fields": record.fields})
            )?;
        }
        let meta = Meta {
            seed,
            duration,
            replicas: harness.replicas.len(),
            ready_ms: harness.ready_ms,
            shutdown_ms: harness.shutdown_ms,
            settle_from_ms: harness.settle_from_ms,
            exit_problems: harness.exit_problems.clone(),
            replica_kind,
        };
        std::fs::write(
            out.join("meta.json"),
            serde_json::to_string_pretty(&meta.to_json())? + "\n",
        )
        .context("cannot write meta.json")?;
        let mut evidence = Evidence::load_files(out, meta)?;
        evidence.records = records;
        evidence.faults = harness.faults.clone();
        Ok(evidence)
    }

    /// The files every run writes as it goes: effects, notifications,
    /// logs, spools.
    fn load_files(out: &Path, meta: Meta) -> Result<Evidence> {
        let effects_text =
            std::fs::read_to_string(out.join("effects.log")).context("cannot read effects.log")?;
        let notifications_text = std::fs::read_to_string(out.join("notifications.jsonl")).ok();
        let names: Vec<String> = (1..=meta.replicas).map(|n| format!("r{n}")).collect();
        let logs = names
            .iter()
            .map(|name| {
                let log = std::fs::read_to_string(out.join(format!("{name}.log")));
                (name.clone(), log.unwrap_or_default())
            })
            .collect();
        let spooled = names
            .iter()
            .flat_map(|name| {
                std::fs::read_dir(out.join(name).join("state").join("spool"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path().display().to_string())
            })
            .collect();
        Ok(Evidence {
            out: out.to_path_buf(),
            meta,
            faults: Vec::new(),
            records: Vec::new(),
            effects_text,
            notifications_text,
            logs,
            spooled,
        })
    }

    /// Everything from an output directory, for `--recheck`.
    pub fn load(out: &Path) -> Result<Evidence> {
        let meta_text = std::fs::read_to_string(out.join("meta.json"))
            .with_context(|| format!("cannot read {}/meta.json", out.display()))?;
        let meta = Meta::from_json(&serde_json::from_str(&meta_text)?)?;
        let mut evidence = Evidence::load_files(out, meta)?;
        let faults_text = std::fs::read_to_string(out.join("faults.jsonl"))
            .context("cannot read faults.jsonl")?;
        for line in faults_text.lines().filter(|l| !l.trim().is_empty()) {
            let value: Value = serde_json::from_str(line)
                .with_context(|| format!("bad line in faults.jsonl: {line}"))?;
            let fault = Fault::from_json(&value)
                .with_context(|| format!("bad line in faults.jsonl: {line}"))?;
            evidence.faults.push(fault);
        }
        let records_text = std::fs::read_to_string(out.join("records.jsonl"))
            .context("cannot read records.jsonl")?;
        for line in records_text.lines().filter(|l| !l.trim().is_empty()) {
            let value: Value = serde_json::from_str(line)
                .with_context(|| format!("bad line in records.jsonl: {line}"))?;
            evidence.records.push(Record {
                job: value["job"].as_str().unwrap_or("").to_string(),
                id: value["id"].as_str().unwrap_or("").to_string(),
                source: if value["source"] == "snapshot" {
                    Source::Snapshot
                } else {
                    Source::Final
                },
                fields: serde_json::from_value(value["fields"].clone())
                    .context("bad fields in records.jsonl")?,
            });
        }
        Ok(evidence)
    }
}
