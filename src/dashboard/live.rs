//! The job page's live output: a run's lines as server-sent events, read
//! from its stream in Redis (see [`crate::live`]) whichever replica runs
//! it. Each event's id is the line's stream id, so a browser that
//! reconnects (the server closes connections after 10 minutes) goes on
//! after the last line it got (`Last-Event-ID`). The run's end is an
//! `end` event, after which the browser closes the stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use tokio::time::Instant;

use super::Dashboard;
use super::pages::looking;
use crate::inert::escape;
use crate::operator;
use crate::store::{LiveEntry, Store};

/// How often a follow looks for new lines.
const POLL: Duration = Duration::from_millis(250);

/// Empty polls between two checks that the run is still there.
const CHECK_EVERY: u32 = 8;

/// How long one stream is followed at most (the connection's lifetime
/// ends it sooner; the browser reconnects).
const MAX_FOLLOW: Duration = Duration::from_secs(600);

#[derive(Debug, Deserialize)]
pub(super) struct LiveQuery {
    /// The run; default: the job's newest run in flight.
    run: Option<String>,
}

/// `GET /jobs/{name}/live`: the run's lines as they come.
pub(super) async fn live(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    Query(query): Query<LiveQuery>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let status = match looking(&dashboard, &headers, &uri).await {
        Ok((_, status)) => status,
        Err(page) => return page,
    };
    // Only a job of the cluster's table becomes part of a key.
    if !status.jobs.iter().any(|job| job.name == name) {
        return (StatusCode::NOT_FOUND, format!("no job {:?}", escape(&name))).into_response();
    }
    let run_id = match operator::live_run(&dashboard.store, &name, query.run.as_deref()).await {
        Ok(run_id) => run_id,
        Err(e) => return (StatusCode::NOT_FOUND, e.to_string()).into_response(),
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|id| is_stream_id(id))
        .map(str::to_owned);
    let follow = Follow {
        store: dashboard.store.clone(),
        job: name,
        run_id,
        after,
        done: false,
        empty_polls: 0,
        until: Instant::now() + MAX_FOLLOW,
    };
    let events = stream::unfold(follow, next_events)
        .flat_map(stream::iter)
        .map(Ok::<Event, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// A stream id as Redis writes them (`<ms>-<seq>`): what a browser sends
/// back as `Last-Event-ID` is evidence, not a key part.
fn is_stream_id(id: &str) -> bool {
    id.len() <= 41
        && id
            .split_once('-')
            .is_some_and(|(ms, seq)| is_digits(ms) && is_digits(seq))
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Where a follow of one run is.
struct Follow {
    store: Store,
    job: String,
    run_id: String,
    after: Option<String>,
    done: bool,
    empty_polls: u32,
    until: Instant,
}

/// The next events of the follow (lines, then `end` or `gone`), waiting
/// for them; None once it is done.
async fn next_events(mut follow: Follow) -> Option<(Vec<Event>, Follow)> {
    loop {
        if follow.done || Instant::now() >= follow.until {
            return None;
        }
        let read = match follow
            .store
            .read_live(&follow.job, &follow.run_id, follow.after.as_deref())
            .await
        {
            Ok(read) => read,
            Err(e) => {
                follow.done = true;
                let event = Event::default().event("gone").data(escape(&e.to_string()));
                return Some((vec![event], follow));
            }
        };
        let mut events: Vec<Event> = read.lines.iter().map(line_event).collect();
        if let Some(id) = read.last_id {
            follow.after = Some(id);
        }
        if read.ended {
            follow.done = true;
            events.push(Event::default().event("end").data("the run ended"));
        }
        if !events.is_empty() {
            follow.empty_polls = 0;
            return Some((events, follow));
        }
        follow.empty_polls += 1;
        if follow.empty_polls.is_multiple_of(CHECK_EVERY) && !still_there(&follow).await {
            follow.done = true;
            let event = Event::default()
                .event("gone")
                .data("the run is no longer in flight and its output is gone");
            return Some((vec![event], follow));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the followed run is in flight or its stream is kept (a Redis
/// that cannot say ends the follow).
async fn still_there(follow: &Follow) -> bool {
    operator::live_kept(&follow.store, &follow.job, &follow.run_id)
        .await
        .unwrap_or(false)
}

/// One line as an event named by its source, its id the stream's.
fn line_event(entry: &LiveEntry) -> Event {
    Event::default()
        .id(entry.id.clone())
        .event(entry.source.clone())
        .data(escape(&entry.text))
}
