//! The two kinds of trace the checker reads: outcome records (from the
//! job streams in Redis) and effect lines (from `effects.log`, written by
//! the jobs themselves, outside Redis).

use std::collections::BTreeMap;

use crate::wall::clock;

/// When an outcome record was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// At the end of the run.
    Final,
    /// Just before Redis was wiped.
    Snapshot,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Final => "final",
            Source::Snapshot => "snapshot",
        }
    }
}

/// One outcome record from a job's stream.
#[derive(Clone, Debug)]
pub struct Record {
    pub job: String,
    pub id: String,
    pub source: Source,
    pub fields: BTreeMap<String, String>,
}

impl Record {
    pub fn get(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }

    pub fn number(&self, name: &str) -> i64 {
        self.get(name).parse().unwrap_or(0)
    }

    pub fn tick(&self) -> i64 {
        self.number("tick")
    }

    pub fn fence(&self) -> i64 {
        self.number("fence")
    }

    pub fn status(&self) -> &str {
        self.get("status")
    }

    pub fn run_id(&self) -> &str {
        self.get("run_id")
    }

    pub fn stale(&self) -> bool {
        self.get("stale") == "1"
    }

    pub fn rerun(&self) -> bool {
        self.get("trigger") == "rerun"
    }

    pub fn trigger(&self) -> &str {
        self.get("trigger")
    }

    /// The upstream run a follower's run was started for (empty for a
    /// scheduled job's).
    pub fn upstream_run_id(&self) -> &str {
        self.get("upstream_run_id")
    }

    /// When Redis recorded it: the ms of its stream id.
    pub fn recorded_ms(&self) -> i64 {
        self.id
            .split_once('-')
            .map_or(self.id.as_str(), |(ms, _)| ms)
            .parse()
            .unwrap_or(0)
    }

    pub fn describe(&self) -> String {
        let mut extra = String::new();
        if let Some(by) = self.fields.get("recorded_by") {
            extra.push_str(&format!(" recorded_by={by}"));
        }
        if let Some(cause) = self.fields.get("upstream_run_id") {
            extra.push_str(&format!(
                " upstream={} {cause} {}",
                self.get("upstream_job"),
                self.get("upstream_status")
            ));
        }
        if self.source != Source::Final {
            extra.push_str(&format!(" (from the {} before a wipe)", self.source.name()));
        }
        format!(
            "record {} {} tick={} fence={} run_id={} replica={} status={} stale={} trigger={} \
             started={} finished={}{extra}",
            self.id,
            self.job,
            clock(self.tick()),
            self.get("fence"),
            self.run_id(),
            self.get("replica"),
            self.status(),
            self.get("stale"),
            self.get("trigger"),
            clock(self.number("started_ms")),
            clock(self.number("finished_ms")),
        )
    }
}

/// One `start`/`end` line of effects.log:
/// `start|end JOB TICK_MS FENCE REPLICA RUN_ID WALL_MS [UPSTREAM_RUN_ID]`,
/// the last word only for a follower's run.
#[derive(Clone, Debug)]
pub struct Effect {
    pub start: bool,
    pub job: String,
    pub tick: i64,
    pub replica: String,
    pub run_id: String,
    pub wall: i64,
    /// The upstream run a follower's run was started for.
    pub cause: Option<String>,
    pub line: String,
}

/// The lines of effects.log; a line that does not parse becomes a warning.
pub fn parse_effects(text: &str, warnings: &mut Vec<String>) -> Vec<Effect> {
    let mut effects = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let shaped = matches!(parts.len(), 7 | 8) && (parts[0] == "start" || parts[0] == "end");
        let parsed = shaped
            .then(|| {
                Some(Effect {
                    start: parts[0] == "start",
                    job: parts[1].to_string(),
                    tick: parts[2].parse().ok()?,
                    replica: parts[4].to_string(),
                    run_id: parts[5].to_string(),
                    wall: parts[6].parse().ok()?,
                    cause: parts.get(7).map(|c| c.to_string()),
                    line: line.to_string(),
                })
            })
            .flatten();
        match parsed {
            Some(effect) => effects.push(effect),
            None => warnings.push(format!("malformed line in effects.log: {line:?}")),
        }
    }
    effects
}
