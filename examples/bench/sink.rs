//! The trace exporter's sink of `throughput --telemetry`: an HTTP/1.1
//! server on a free loopback port that takes every OTLP request
//! (`POST /v1/traces`, keep-alive), counts it and its bytes, and answers
//! `200` with an empty body; what a collector on the same host costs the
//! replicas, not what it does with the spans. Its threads end when it is
//! dropped (the listener) and when each connection closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, Result};

/// A running sink.
pub struct Sink {
    port: u16,
    stop: Arc<AtomicBool>,
    /// Requests and body bytes taken so far.
    counts: Arc<(AtomicU64, AtomicU64)>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    pub fn start() -> Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind the trace sink")?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let (stopping, counting) = (stop.clone(), counts.clone());
        let thread = std::thread::spawn(move || {
            let mut connections = Vec::new();
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let counting = counting.clone();
                connections.push(std::thread::spawn(move || serve(stream, &counting)));
            }
            for connection in connections {
                let _ = connection.join();
            }
        });
        Ok(Sink {
            port,
            stop,
            counts,
            thread: Some(thread),
        })
    }

    /// The endpoint for `[daemon.telemetry]`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Requests and body bytes taken so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.counts.0.load(Ordering::SeqCst),
            self.counts.1.load(Ordering::SeqCst),
        )
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Requests on one connection until the client closes it.
fn serve(stream: TcpStream, counts: &(AtomicU64, AtomicU64)) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        // The head: the request line, headers, a blank line.
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        counts.0.fetch_add(1, Ordering::SeqCst);
        counts.1.fetch_add(length as u64, Ordering::SeqCst);
        let answer =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if writer.write_all(answer).is_err() {
            return;
        }
    }
}
