//! The webhook sink: the receiver of every replica's `[notify.sink]`
//! channel, an HTTP/1.1 server on `127.0.0.1`, on the suite's tokio
//! runtime. It answers every request `200` and records it (arrival wall
//! time, `Idempotency-Key`, the JSON body) as one line of
//! `notifications.jsonl` the moment it arrives, so that the file survives a
//! crash of the suite and `--recheck` reads it offline.
//!
//! Reads are bounded (the head, the body, the time a peer may take), since
//! a receiver that waits forever on a half-sent request would hide a
//! sender's stall behind its own.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use chrono::DateTime;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::wall::now_ms;

/// The most a request's line and headers may take.
const MAX_HEAD: usize = 16 * 1024;
/// The most a body may take: an event carries at most 2,000 bytes of
/// output, the rest is small.
const MAX_BODY: usize = 256 * 1024;
/// How long a peer may be silent in the middle of a request, or idle
/// between requests on a kept-alive connection.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the sink takes to answer, as a real receiver does: it widens
/// the moment between a replica's request and its acknowledgement, in
/// which a kill -9 has the event sent again under the same key (the repeat
/// the delivery promise allows), so that faults can reach it.
const ANSWER_DELAY: Duration = Duration::from_millis(250);

/// One request the sink received.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Wall ms at arrival (the suite's clock, never skewed).
    pub at_ms: i64,
    /// The `Idempotency-Key` header ("" when absent).
    pub key: String,
    /// The body as JSON (a string when it did not parse).
    pub body: Value,
}

impl Delivery {
    pub fn to_json(&self) -> Value {
        json!({"at_ms": self.at_ms, "key": self.key, "body": self.body})
    }

    pub fn from_json(value: &Value) -> Option<Delivery> {
        Some(Delivery {
            at_ms: value["at_ms"].as_i64()?,
            key: value["key"].as_str()?.to_string(),
            body: value["body"].clone(),
        })
    }

    pub fn text(&self, field: &str) -> &str {
        self.body[field].as_str().unwrap_or("")
    }

    pub fn event(&self) -> &str {
        self.text("event")
    }

    pub fn job(&self) -> &str {
        self.text("job")
    }

    pub fn run_id(&self) -> &str {
        self.text("run_id")
    }

    /// The body's `tick` (RFC 3339) in ms, if it has one.
    pub fn tick_ms(&self) -> Option<i64> {
        DateTime::parse_from_rfc3339(self.text("tick"))
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The body's `occurred_at` in ms, else the arrival.
    pub fn occurred_ms(&self) -> i64 {
        DateTime::parse_from_rfc3339(self.text("occurred_at"))
            .map_or(self.at_ms, |t| t.timestamp_millis())
    }

    /// One line for the report's evidence.
    pub fn describe(&self) -> String {
        format!(
            "delivery at {} key={} event={} job={} run_id={} tick={} detail={:?}",
            crate::wall::clock(self.at_ms),
            self.key,
            self.event(),
            self.job(),
            self.run_id(),
            self.text("tick"),
            self.text("detail"),
        )
    }
}

/// What the sink keeps while it runs.
struct Received {
    file: File,
    count: usize,
    last_ms: i64,
}

/// The running sink; it stops with the runtime.
pub struct Sink {
    pub port: u16,
    received: Arc<Mutex<Received>>,
}

impl Sink {
    /// Binds `127.0.0.1:0` and serves on `runtime`, appending to `path`.
    pub fn start(runtime: &tokio::runtime::Runtime, path: &Path) -> Result<Sink> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .context("cannot bind the webhook sink's port")?;
        let port = listener.local_addr()?.port();
        let received = Arc::new(Mutex::new(Received {
            file,
            count: 0,
            last_ms: 0,
        }));
        runtime.spawn(accept_loop(listener, received.clone()));
        Ok(Sink { port, received })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// How many requests so far, and the wall ms of the last (0: none).
    pub fn progress(&self) -> (usize, i64) {
        let received = self.received.lock().unwrap_or_else(|e| e.into_inner());
        (received.count, received.last_ms)
    }
}

/// The lines of `notifications.jsonl`; a line that does not parse becomes
/// a warning.
pub fn parse_deliveries(text: &str, warnings: &mut Vec<String>) -> Vec<Delivery> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let parsed = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| Delivery::from_json(&v));
            if parsed.is_none() {
                warnings.push(format!("malformed line in notifications.jsonl: {line:?}"));
            }
            parsed
        })
        .collect()
}

async fn accept_loop(listener: TcpListener, received: Arc<Mutex<Received>>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream, received.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Requests on one connection, kept alive until the peer closes it, asks
/// to close it, or sends what the sink does not read.
async fn serve(mut stream: TcpStream, received: Arc<Mutex<Received>>) {
    let mut buffer = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buffer).await else {
            return;
        };
        let delivery = Delivery {
            at_ms: now_ms(),
            key: request.key,
            body: serde_json::from_slice(&request.body).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&request.body).into_owned())
            }),
        };
        record(&received, &delivery);
        tokio::time::sleep(ANSWER_DELAY).await;
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
        if stream.write_all(answer.as_bytes()).await.is_err() || request.close {
            return;
        }
    }
}

/// Appends the delivery to the file at once.
fn record(received: &Mutex<Received>, delivery: &Delivery) {
    let mut received = received.lock().unwrap_or_else(|e| e.into_inner());
    let line = delivery.to_json().to_string();
    let _ = writeln!(received.file, "{line}");
    let _ = received.file.flush();
    received.count += 1;
    received.last_ms = delivery.at_ms;
}

/// What the sink keeps of a request.
struct Request {
    key: String,
    body: Vec<u8>,
    close: bool,
}

/// The next request on `stream` (`buffer` holds what was read past the
/// last one); None at the end of the connection or on a request the sink
/// will not read.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(at) = find(buffer, b"\r\n\r\n") {
            break at;
        }
        if buffer.len() > MAX_HEAD || !fill(stream, buffer).await {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let _request_line = lines.next()?;
    let mut key = String::new();
    let mut length = 0usize;
    let mut close = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "idempotency-key" => key = value.to_string(),
            "content-length" => length = value.parse().ok()?,
            "connection" => close = value.eq_ignore_ascii_case("close"),
            // A chunked body is not what a webhook channel sends.
            "transfer-encoding" => return None,
            _ => {}
        }
    }
    if length > MAX_BODY {
        return None;
    }
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        if !fill(stream, buffer).await {
            return None;
        }
    }
    let body = buffer[body_start..body_start + length].to_vec();
    buffer.drain(..body_start + length);
    Some(Request { key, body, close })
}

/// Reads more into `buffer`; false at the end, on an error or a timeout.
async fn fill(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8 * 1024];
    match tokio::time::timeout(READ_TIMEOUT, stream.read(&mut chunk)).await {
        Ok(Ok(n)) if n > 0 => {
            buffer.extend_from_slice(&chunk[..n]);
            true
        }
        _ => false,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
