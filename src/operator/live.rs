//! Live output for `cronlease logs` and the dashboard: which run of a job
//! to show, and its lines as they come.

use std::time::Duration;

use super::OperatorError;
use crate::store::{LiveEntry, Store};

/// How often a follower looks for new lines.
const POLL: Duration = Duration::from_millis(250);

/// Longest run id taken from outside (a UUID is 36 characters).
const MAX_RUN_ID: usize = 64;

/// How a follow of a run's live output ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveEnd {
    /// The run ended: its end entry was read.
    Ended,
    /// The run is no longer in flight and its stream is gone (its replica
    /// died, or it ended more than a minute ago): no end was seen.
    Gone,
    /// Not followed: the lines there are were read.
    Read,
}

/// Whether to wait for more lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Read what is there and stop.
    Once,
    /// Read on until the run ends.
    UntilEnd,
}

/// The run of `job` whose live output to show: `run_id` when given (it
/// must look like a run id, since it becomes part of a key), else the
/// newest run in flight, else the last run if its output is still kept.
pub async fn live_run(
    store: &Store,
    job: &str,
    run_id: Option<&str>,
) -> Result<String, OperatorError> {
    if let Some(run_id) = run_id {
        let plain = !run_id.is_empty()
            && run_id.len() <= MAX_RUN_ID
            && run_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !plain {
            return Err(OperatorError::NotInFlight(format!(
                "{:?} is not a run id: expected letters, digits and dashes, as `cronlease status` and `history` show them",
                crate::inert::escape(run_id)
            )));
        }
        return Ok(run_id.to_owned());
    }
    let running = store.running_runs(job).await?;
    if let Some(newest) = running.iter().max_by_key(|run| run.started_ms) {
        return Ok(newest.run_id.clone());
    }
    let last = store.history_fields(job, 1, &["run_id"]).await?;
    let last_run = last
        .into_iter()
        .flat_map(|(_, fields)| fields)
        .find(|(field, _)| field == "run_id")
        .map(|(_, value)| value);
    if let Some(run_id) = last_run
        && store.live_exists(job, &run_id).await?
    {
        return Ok(run_id);
    }
    Err(OperatorError::NotInFlight(format!(
        "job {job:?} has no run in flight, and no run's live output is kept (a minute after it ends): `cronlease history {job} --output` shows the output tails of its runs"
    )))
}

/// Hands `on_line` the live output of `job`'s run `run_id` from its start;
/// with [`Follow::UntilEnd`], then each line as it comes, until the run
/// ends or is gone.
pub async fn follow_live(
    store: &Store,
    job: &str,
    run_id: &str,
    follow: Follow,
    mut on_line: impl FnMut(&LiveEntry),
) -> Result<LiveEnd, OperatorError> {
    let mut after: Option<String> = None;
    loop {
        let read = store.read_live(job, run_id, after.as_deref()).await?;
        let got_lines = read.last_id.is_some();
        read.lines.iter().for_each(&mut on_line);
        if read.last_id.is_some() {
            after = read.last_id;
        }
        if read.ended {
            return Ok(LiveEnd::Ended);
        }
        if got_lines {
            // More may be waiting beyond one read's count.
            continue;
        }
        if follow == Follow::Once {
            return Ok(LiveEnd::Read);
        }
        if !live_kept(store, job, run_id).await? {
            return Ok(LiveEnd::Gone);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether `job`'s run `run_id` may still have live output to read: it is
/// in flight, or its stream is kept.
pub async fn live_kept(store: &Store, job: &str, run_id: &str) -> Result<bool, OperatorError> {
    let in_flight = store
        .running_runs(job)
        .await?
        .iter()
        .any(|run| run.run_id == run_id);
    Ok(in_flight || store.live_exists(job, run_id).await?)
}
