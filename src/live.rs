//! Live output: a run's output lines, while it runs, in a capped stream of
//! its own in Redis that any host can read (`cronlease logs`, the
//! dashboard's job page).
//!
//! The run's side ([`LiveLines`], in the run's [`crate::task::RunContext`])
//! never waits: a line goes into a bounded queue or, when the queue is
//! full, is counted and left out. The replica's side ([`LiveWriter`])
//! runs beside the run's task, in the same future, and sends the queued
//! lines in batches. The stream holds at most `[daemon] live_output_lines`
//! lines (1,000 unless set; 0 sends none) of at most [`MAX_LINE_BYTES`] each, expires [`IDLE_EXPIRY`] after its last
//! line while the run runs (a replica that dies leaves nothing behind for
//! long), and is closed by an end entry when the run ends, after which it
//! is kept [`KEPT_AFTER_END`] for whoever follows it. So Redis holds live
//! output for the runs in flight and the last minute's, no more.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::store::{LiveBatch, Store};

#[cfg(feature = "tracing-layer")]
pub(crate) mod layer;

/// Longest line kept, in bytes: the rest is cut (the outcome's tail and
/// the log keep more).
pub const MAX_LINE_BYTES: usize = 2_048;

/// How long a run's stream lives after its last line while the run runs.
pub const IDLE_EXPIRY: Duration = Duration::from_secs(600);

/// How long a run's stream is kept after its end entry.
pub const KEPT_AFTER_END: Duration = Duration::from_secs(60);

/// Lines queued between a run and its writer; more are left out, counted.
const QUEUED_LINES: usize = 512;

/// Lines sent in one batch at most.
const BATCH_LINES: usize = 128;

/// Which of a run's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A process's standard output.
    Stdout,
    /// A process's standard error.
    Stderr,
    /// What cronlease says about the run (lines left out).
    Cronlease,
    /// An embedded handler, through its run's writer.
    Handler,
}

impl Source {
    /// Its name in the stream's entries.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Stdout => "stdout",
            Source::Stderr => "stderr",
            Source::Cronlease => "cronlease",
            Source::Handler => "handler",
        }
    }
}

/// One line on its way to the stream.
#[derive(Debug)]
pub struct LiveLine {
    pub source: Source,
    pub text: String,
}

/// The run's side: where its output lines go while it runs. Cloning
/// shares the queue. [`LiveLines::off`] takes nothing (a `cronlease lock`
/// command, a test's run).
#[derive(Debug, Clone)]
pub struct LiveLines {
    queue: Option<mpsc::Sender<LiveLine>>,
    left_out: Arc<AtomicU64>,
}

impl LiveLines {
    /// Lines that go nowhere.
    pub fn off() -> LiveLines {
        LiveLines {
            queue: None,
            left_out: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Queues `line` (cut to [`MAX_LINE_BYTES`], invalid UTF-8 replaced);
    /// never waits: a full queue counts it as left out.
    pub fn push(&self, source: Source, line: &[u8]) {
        let Some(queue) = &self.queue else {
            return;
        };
        let text = String::from_utf8_lossy(&line[..line.len().min(MAX_LINE_BYTES)]).into_owned();
        if queue.try_send(LiveLine { source, text }).is_err() {
            self.left_out.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The replica's side: sends a run's queued lines to its stream until the
/// run's side is dropped, then closes the stream.
#[derive(Debug)]
pub struct LiveWriter {
    /// The most lines the stream keeps; 0: the writer sends nothing.
    max_lines: usize,
    job: String,
    run_id: String,
    queue: mpsc::Receiver<LiveLine>,
    left_out: Arc<AtomicU64>,
}

/// A run's two sides; with `max_lines` 0, lines that go nowhere and a
/// writer that ends at once.
pub fn channel(job: &str, run_id: &str, max_lines: usize) -> (LiveLines, LiveWriter) {
    let (sender, receiver) = mpsc::channel(QUEUED_LINES);
    let left_out = Arc::new(AtomicU64::new(0));
    let lines = match max_lines {
        0 => LiveLines::off(),
        _ => LiveLines {
            queue: Some(sender),
            left_out: left_out.clone(),
        },
    };
    (
        lines,
        LiveWriter {
            max_lines,
            job: job.to_owned(),
            run_id: run_id.to_owned(),
            queue: receiver,
            left_out,
        },
    )
}

impl LiveWriter {
    /// The lines queued so far, without Redis.
    #[cfg(all(test, feature = "tracing-layer"))]
    pub(crate) fn drain_for_test(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.queue.try_recv().ok())
            .map(|line| line.text)
            .collect()
    }

    /// Sends batches until `ended` resolves (the run's task ended) or
    /// every [`LiveLines`] of the run is dropped, then what is left and
    /// the end entry. A line pushed after that is dropped (a handler's
    /// writer kept past its run). A batch Redis refuses is left out: live
    /// output is for watching, the outcome's tail is the record.
    pub async fn run(mut self, store: &Store, ended: impl Future<Output = ()>) {
        let mut lines = Vec::with_capacity(BATCH_LINES);
        // A run that printed nothing costs Redis nothing: no stream, no
        // end entry (`cronlease logs` tells such a run by its entry in
        // flight).
        let mut started = false;
        let mut ended = std::pin::pin!(ended);
        let mut open = true;
        while open {
            tokio::select! {
                biased;
                received = self.queue.recv_many(&mut lines, BATCH_LINES) => open = received > 0,
                () = &mut ended => {
                    self.queue.close();
                    while lines.len() < BATCH_LINES * 4 {
                        let Ok(line) = self.queue.try_recv() else { break };
                        lines.push(line);
                    }
                    open = false;
                }
            }
            let left_out = self.left_out.swap(0, Ordering::Relaxed);
            if left_out > 0 {
                lines.push(LiveLine {
                    source: Source::Cronlease,
                    text: format!("{left_out} lines left out of the live output (it fell behind)"),
                });
            }
            if lines.is_empty() && !started {
                return;
            }
            started = true;
            let batch = LiveBatch {
                max_lines: self.max_lines,
                job: &self.job,
                run_id: &self.run_id,
                lines: &lines,
                end: if open { LiveEnd::Open } else { LiveEnd::Ended },
            };
            if let Err(e) = store.append_live(&batch).await {
                tracing::debug!(job = %self.job, run_id = %self.run_id, error = %e, "live output not sent");
            }
            lines.clear();
        }
    }
}

/// Whether a batch closes its run's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveEnd {
    /// The run goes on.
    Open,
    /// The run ended: the batch ends with the end entry.
    Ended,
}
