//! Live output in Redis: a run's stream written in batches (see
//! [`crate::live`]) and read back from any host.

use std::time::Duration;

use redis::Value;

use super::{Store, StoreError};
use crate::live::{IDLE_EXPIRY, KEPT_AFTER_END, LiveEnd, LiveLine, MAX_LINE_BYTES};

/// Lines of one run for its stream.
#[derive(Debug)]
pub struct LiveBatch<'a> {
    /// The most lines the stream keeps.
    pub max_lines: usize,
    pub job: &'a str,
    pub run_id: &'a str,
    pub lines: &'a [LiveLine],
    pub end: LiveEnd,
}

/// One line read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveEntry {
    /// Its stream entry id (to read on after it).
    pub id: String,
    /// `stdout`, `stderr`, `handler` or `cronlease`.
    pub source: String,
    pub text: String,
}

/// What a read of a run's stream found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveRead {
    pub lines: Vec<LiveEntry>,
    /// The end entry was read: the run ended.
    pub ended: bool,
    /// The id of the last entry read (the place to read on from).
    pub last_id: Option<String>,
}

/// Lines read back at once at most.
const READ_COUNT: usize = 500;

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Store {
    /// Appends a batch to its run's stream (trimmed to the newest
    /// `max_lines`) and sets its expiry: [`IDLE_EXPIRY`] while the run
    /// runs, [`KEPT_AFTER_END`] once the batch ends it. On every master
    /// with `quorum`, as far as each answers.
    pub async fn append_live(&self, batch: &LiveBatch<'_>) -> Result<(), StoreError> {
        let key = self.keys.live(batch.job, batch.run_id);
        let mut pipe = redis::pipe();
        for line in batch.lines {
            pipe.cmd("XADD")
                .arg(&key)
                .arg("MAXLEN")
                .arg(batch.max_lines)
                .arg("*")
                .arg("s")
                .arg(line.source.as_str())
                .arg("l")
                .arg(&line.text)
                .ignore();
        }
        let expiry = match batch.end {
            LiveEnd::Open => IDLE_EXPIRY,
            LiveEnd::Ended => {
                pipe.cmd("XADD")
                    .arg(&key)
                    .arg("MAXLEN")
                    .arg(batch.max_lines + 1)
                    .arg("*")
                    .arg("end")
                    .arg("1")
                    .ignore();
                KEPT_AFTER_END
            }
        };
        pipe.cmd("PEXPIRE").arg(&key).arg(millis(expiry)).ignore();
        let pipe = &pipe;
        let answers = self
            .on_all(|mut conn| async move {
                pipe.query_async::<()>(&mut conn).await?;
                Ok(())
            })
            .await;
        answers.into_iter().find(Result::is_err).unwrap_or(Ok(()))
    }

    /// The entries of `job`'s run `run_id` after the entry `after` (from
    /// the start when None), at most [`READ_COUNT`]. An entry that does not
    /// read as cronlease writes them is skipped; a text longer than any
    /// line written is cut.
    pub async fn read_live(
        &self,
        job: &str,
        run_id: &str,
        after: Option<&str>,
    ) -> Result<LiveRead, StoreError> {
        let start = after.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(self.keys.live(job, run_id))
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(READ_COUNT);
        let reply: Value = self.read_cmd(cmd).await?;
        Ok(parse_live(reply))
    }

    /// Whether `job`'s run `run_id` has a live stream (in flight, or ended
    /// within [`KEPT_AFTER_END`]).
    pub async fn live_exists(&self, job: &str, run_id: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.keys.live(job, run_id));
        let found: i64 = self.read_cmd(cmd).await?;
        Ok(found > 0)
    }
}

/// The entries of an `XRANGE` reply.
fn parse_live(reply: Value) -> LiveRead {
    let mut read = LiveRead::default();
    let Value::Array(entries) = reply else {
        return read;
    };
    for entry in entries {
        let Value::Array(parts) = entry else { continue };
        let [id, Value::Array(fields)] = parts.as_slice() else {
            continue;
        };
        let Some(id) = text(id) else { continue };
        read.last_id = Some(id.clone());
        let fields: Vec<String> = fields.iter().filter_map(text).collect();
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|pair| pair.len() == 2 && pair[0] == name)
                .map(|pair| pair[1].clone())
        };
        if field("end").is_some() {
            read.ended = true;
            continue;
        }
        let (Some(source), Some(mut line)) = (field("s"), field("l")) else {
            continue;
        };
        if !matches!(
            source.as_str(),
            "stdout" | "stderr" | "handler" | "cronlease"
        ) {
            continue;
        }
        if line.len() > MAX_LINE_BYTES * 4 {
            let mut cut = MAX_LINE_BYTES * 4;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
        read.lines.push(LiveEntry {
            id,
            source,
            text: line,
        });
    }
    read
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn entries_read_back_and_forged_ones_are_skipped() {
        let entry = |id: &str, fields: &[&str]| {
            Value::Array(vec![
                bulk(id),
                Value::Array(fields.iter().map(|f| bulk(f)).collect()),
            ])
        };
        let reply = Value::Array(vec![
            entry("1-0", &["s", "stdout", "l", "hello"]),
            entry("2-0", &["s", "nonsense", "l", "forged"]),
            entry("3-0", &["l", "no source"]),
            Value::Int(7),
            entry("4-0", &["s", "stderr", "l", "oops"]),
            entry("5-0", &["end", "1"]),
        ]);
        let read = parse_live(reply);
        assert_eq!(
            read.lines
                .iter()
                .map(|l| (l.id.as_str(), l.source.as_str(), l.text.as_str()))
                .collect::<Vec<_>>(),
            [("1-0", "stdout", "hello"), ("4-0", "stderr", "oops")]
        );
        assert!(read.ended);
        assert_eq!(read.last_id.as_deref(), Some("5-0"));
    }
}
