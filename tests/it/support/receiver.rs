//! An HTTP receiver on a free loopback port (`127.0.0.1:0`), what a
//! webhook's or a chat service's endpoint is in the notification tests:
//! it records every request (head and body, byte for byte) and answers
//! each with the status and body it was started with (or was told since,
//! [`Receiver::respond`]), after holding it for a while if told to
//! ([`Receiver::hold`]). Its thread ends when it is dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One request as it came.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body, parsed as JSON.
    ///
    /// # Panics
    ///
    /// When it is not JSON (the message shows it).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// A receiver this test owns.
pub struct Receiver {
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
    answer: Arc<Mutex<Answer>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// A receiver answering every request with `status` and `body`.
    pub fn start(status: u16, body: &str) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("cannot bind a loopback port");
        let port = listener
            .local_addr()
            .expect("the address of a bound listener")
            .port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let answer = Arc::new(Mutex::new(Answer {
            text: answer_text(status, body),
            hold: Duration::ZERO,
        }));
        let (seen, stopping, answering) = (requests.clone(), stop.clone(), answer.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                if let Some(request) = read_request(&mut stream) {
                    seen.lock()
                        .expect("no holder of the lock panics")
                        .push(request);
                    let hold = answering.lock().expect("no holder of the lock panics").hold;
                    std::thread::sleep(hold);
                    let text = answering
                        .lock()
                        .expect("no holder of the lock panics")
                        .text
                        .clone();
                    let _ = stream.write_all(text.as_bytes());
                }
            }
        });
        Receiver {
            port,
            requests,
            answer,
            stop,
            thread: Some(thread),
        }
    }

    /// Answers the next requests with `status` and `body`.
    pub fn respond(&self, status: u16, body: &str) {
        self.answer
            .lock()
            .expect("no holder of the lock panics")
            .text = answer_text(status, body);
    }

    /// Answers the next requests with `302 Found` to `location`.
    pub fn redirect(&self, location: &str) {
        self.answer
            .lock()
            .expect("no holder of the lock panics")
            .text = format!(
            "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
    }

    /// Holds each next request this long (recorded at once) before it
    /// answers: a slow receiver, or one a sender dies waiting for.
    pub fn hold(&self, hold: Duration) {
        self.answer
            .lock()
            .expect("no holder of the lock panics")
            .hold = hold;
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The requests so far, in the order they came.
    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .expect("no holder of the lock panics")
            .clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the receiver answers, and after how long.
struct Answer {
    text: String,
    hold: Duration,
}

fn answer_text(status: u16, body: &str) -> String {
    format!(
        "HTTP/1.1 {status} Test\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One request from `stream`: its head, then a `Content-Length` body.
fn read_request(stream: &mut TcpStream) -> Option<Request> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        match stream.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = bytes[head_end + 4..].to_vec();
    while body.len() < length {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

/// The lower-hex HMAC-SHA256 of `body` under `key`, computed by Python's
/// `hmac`: what a receiver written by someone else computes.
pub fn python_hmac(key: &str, body: &[u8]) -> String {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import hashlib, hmac, sys; print(hmac.new(sys.argv[1].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())",
            key,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs (scripts/install-deps)");
    child
        .stdin
        .take()
        .expect("a piped stdin")
        .write_all(body)
        .expect("python3 reads the body");
    let output = child.wait_with_output().expect("python3 ends");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}
