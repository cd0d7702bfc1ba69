//! A command's output: its two streams read line by line in bounded
//! memory, every line into the run's tail, and into the log and the live
//! output under a per-run rate limit.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

use super::environment::Redactor;
use crate::live::Source;
use crate::outcome::Tail;
use crate::task::RunContext;

/// Longest line written to the log; the rest is cut (the tail keeps it).
const MAX_LOG_LINE: usize = 8 * 1024;

/// Longest line read at once: a longer one (a command that never writes a
/// newline) is taken in pieces of this size, so reading a run's output
/// holds at most this much per stream, whatever the command prints.
const MAX_LINE: usize = 64 * 1024;

/// Lines of one run's output logged at once, and per second after that;
/// beyond it lines are counted, not logged, and a "N lines suppressed"
/// line says how many (the outcome's tail still has the last of them).
const LOG_BURST: f64 = 200.0;
const LOG_PER_SECOND: f64 = 50.0;

/// After the command exits, how long to wait for the rest of its output.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// One output stream of a command, read line by line in bounded memory:
/// a line longer than [`MAX_LINE`] comes in pieces.
struct LineReader {
    inner: BufReader<Box<dyn AsyncRead + Unpin + Send>>,
    line: Vec<u8>,
    /// `line` was handed out: the next read starts a new one. Until then a
    /// read that is cancelled (the stream races the child's exit in a
    /// `select!`) keeps what it had read.
    taken: bool,
}

impl LineReader {
    fn new(stream: impl AsyncRead + Unpin + Send + 'static) -> LineReader {
        let boxed: Box<dyn AsyncRead + Unpin + Send> = Box::new(stream);
        LineReader {
            inner: BufReader::with_capacity(16 * 1024, boxed),
            line: Vec::new(),
            taken: false,
        }
    }

    /// Reads the next line (without its newline) into [`LineReader::line`]:
    /// `true` when there is one, `false` at the end of the stream.
    /// Cancel-safe.
    async fn next(&mut self) -> std::io::Result<bool> {
        if self.taken {
            self.line.clear();
            self.taken = false;
        }
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                self.taken = true;
                return Ok(!self.line.is_empty());
            }
            let room = MAX_LINE - self.line.len();
            let window = &buf[..buf.len().min(room)];
            if let Some(i) = window.iter().position(|&b| b == b'\n') {
                self.line.extend_from_slice(&window[..i]);
                self.inner.consume(i + 1);
                self.taken = true;
                return Ok(true);
            }
            let n = window.len();
            self.line.extend_from_slice(window);
            self.inner.consume(n);
            if self.line.len() >= MAX_LINE {
                self.taken = true;
                return Ok(true);
            }
        }
    }
}

/// How many of a run's output lines may still be logged: a token bucket
/// of [`LOG_BURST`] lines refilled at [`LOG_PER_SECOND`].
struct LogBudget {
    tokens: f64,
    refilled: Instant,
    suppressed: u64,
}

/// Whether one more line is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    Log,
    Suppress,
}

impl LogBudget {
    fn new() -> LogBudget {
        LogBudget {
            tokens: LOG_BURST,
            refilled: Instant::now(),
            suppressed: 0,
        }
    }

    /// Takes one line's token, or counts the line as suppressed.
    fn admit(&mut self, run: &RunContext) -> Admit {
        if self.tokens < 1.0 {
            let now = Instant::now();
            let earned = now.duration_since(self.refilled).as_secs_f64() * LOG_PER_SECOND;
            self.tokens = (self.tokens + earned).min(LOG_BURST);
            self.refilled = now;
        }
        if self.tokens < 1.0 {
            self.suppressed += 1;
            return Admit::Suppress;
        }
        self.tokens -= 1.0;
        self.report(run);
        Admit::Log
    }

    /// Logs how many lines were left out since the last report, if any.
    fn report(&mut self, run: &RunContext) {
        if self.suppressed > 0 {
            let note = format!(
                "{} lines of output suppressed (more than {LOG_PER_SECOND} a second); the outcome's tail has the last of them",
                self.suppressed
            );
            warn!(job = %run.job, run_id = %run.run_id, suppressed = self.suppressed, "{note}");
            run.live.push(Source::Cronlease, note.as_bytes());
            self.suppressed = 0;
        }
    }
}

/// An attempt's output streams, each None once closed, and what may still
/// be logged of them.
pub(super) struct Output {
    stdout: Option<LineReader>,
    stderr: Option<LineReader>,
    budget: LogBudget,
    /// Secrets the run was given and the replica's: never in the tail or
    /// the log.
    redactor: Redactor,
}

impl Output {
    /// A command's streams (absent when not captured).
    pub(super) fn new(
        stdout: Option<impl AsyncRead + Unpin + Send + 'static>,
        stderr: Option<impl AsyncRead + Unpin + Send + 'static>,
        redactor: Redactor,
    ) -> Output {
        Output {
            stdout: stdout.map(LineReader::new),
            stderr: stderr.map(LineReader::new),
            budget: LogBudget::new(),
            redactor,
        }
    }

    /// Logs how many lines were left out since the last report, if any.
    pub(super) fn report(&mut self, run: &RunContext) {
        self.budget.report(run);
    }

    /// Takes the next line of either stream into the tail and the log (as
    /// the budget allows); pending forever once both are closed, so it can
    /// race the command's exit or a stop in a `select!`. Cancel-safe.
    pub(super) async fn next(&mut self, run: &RunContext, tail: &mut Tail) {
        // A line is one unit of the task's cooperative budget: most lines
        // come out of the reader's buffer without touching the pipe (which
        // is what counts otherwise), and a flooding command would keep its
        // worker for a second or more, stalling the leases' renewals.
        tokio::task::consume_budget().await;
        let (budget, redactor) = (&mut self.budget, &self.redactor);
        tokio::select! {
            line = next_line(&mut self.stdout) => log_line(run, tail, Source::Stdout, line, &mut self.stdout, budget, redactor),
            line = next_line(&mut self.stderr) => log_line(run, tail, Source::Stderr, line, &mut self.stderr, budget, redactor),
        }
    }

    /// After the command exited: what is left of its output, for at most
    /// [`DRAIN_AFTER_EXIT`] (a grandchild may hold the pipes open).
    pub(super) async fn drain(&mut self, run: &RunContext, tail: &mut Tail) {
        let drain_until = Instant::now() + DRAIN_AFTER_EXIT;
        while self.stdout.is_some() || self.stderr.is_some() {
            tokio::select! {
                () = self.next(run, tail) => {}
                () = sleep_until(drain_until) => break,
            }
        }
    }
}

/// Reads the next line of a stream that is still open; pending forever
/// otherwise, so a closed stream drops out of `select!`.
async fn next_line(reader: &mut Option<LineReader>) -> std::io::Result<bool> {
    match reader {
        Some(reader) => reader.next().await,
        None => std::future::pending().await,
    }
}

/// Keeps a line read from `source` in the tail and logs it if the budget
/// allows; closes `source` at its end.
fn log_line(
    run: &RunContext,
    tail: &mut Tail,
    stream: Source,
    read: std::io::Result<bool>,
    source: &mut Option<LineReader>,
    budget: &mut LogBudget,
    redactor: &Redactor,
) {
    let Some(reader) = source.as_mut() else {
        return;
    };
    match read {
        Ok(true) => {
            let mut line = reader.line.as_slice();
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = redactor.redact(line);
            let line = line.as_ref();
            tail.push_line(line);
            if budget.admit(run) == Admit::Log {
                let shown = String::from_utf8_lossy(&line[..line.len().min(MAX_LOG_LINE)]);
                info!(job = %run.job, run_id = %run.run_id, stream = stream.as_str(), "{shown}");
                run.live.push(stream, line);
            }
        }
        Ok(false) | Err(_) => *source = None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_read_in_bounded_pieces() {
        let mut data = vec![b'x'; 200 * 1024];
        data.extend_from_slice(b"\nshort\r\nno newline at the end");
        let mut reader = LineReader::new(std::io::Cursor::new(data));
        let mut lengths = Vec::new();
        while reader.next().await.expect("reading memory cannot fail") {
            assert!(reader.line.len() <= MAX_LINE);
            lengths.push(reader.line.len());
        }
        assert_eq!(
            lengths,
            [
                MAX_LINE,
                MAX_LINE,
                MAX_LINE,
                200 * 1024 - 3 * MAX_LINE,
                6,
                21
            ]
        );
        assert!(!reader.next().await.expect("still at the end"));
    }
}
