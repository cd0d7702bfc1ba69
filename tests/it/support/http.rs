//! Plain HTTP/1.1 over a `TcpStream`, byte for byte as the test writes
//! it: what a hostile client sends (a wrong `Host`, a huge body, headers a
//! byte at a time) is exactly what the replica gets.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// An answer: the status, the headers (names lowercased) and the body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Connects to `addr` with read and write timeouts of 20 s.
pub fn connect(addr: &str) -> TcpStream {
    let stream =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("a read timeout");
    stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .expect("a write timeout");
    stream
}

/// Sends `head` (a request line and headers, `\r\n` after each line, the
/// blank line included) and `body` on a new connection to `addr`, and
/// reads the answer until the server closes the connection.
pub fn send(addr: &str, head: &str, body: &[u8]) -> Answer {
    let mut stream = connect(addr);
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .unwrap_or_else(|e| panic!("cannot send {head:?} to {addr}: {e}"));
    read_answer(&mut stream)
}

/// `GET path` with `Host: host` and `Connection: close`, and any extra
/// header lines in `extra` (each ending in `\r\n`).
pub fn get(addr: &str, host: &str, path: &str, extra: &str) -> Answer {
    send(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n"),
        b"",
    )
}

/// `POST path` of the form `body` with `Host: host` and `Connection: close`.
pub fn post_form(addr: &str, host: &str, path: &str, body: &str) -> Answer {
    send(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ),
        body.as_bytes(),
    )
}

/// Reads one answer from `stream`: until the server closes it, or, when
/// the head says how long the body is, until that much body has come.
pub fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(answer) = parse(&bytes) {
            return answer;
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A reset after the answer (the server closed with unread
            // bytes): what came before it is the answer.
            Err(e) if e.kind() == ErrorKind::ConnectionReset && !bytes.is_empty() => break,
            Err(e) => panic!("reading an answer failed after {} bytes: {e}", bytes.len()),
        }
    }
    parse(&bytes).unwrap_or_else(|| {
        panic!(
            "no complete HTTP answer before the connection closed: {:?}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// An answer whose head and (`Content-Length`) body are all in `bytes`;
/// without a `Content-Length`, only once the connection closed (the
/// caller tries again at the end).
fn parse(bytes: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    match length {
        Some(length) if body.len() >= length => Some(Answer {
            status,
            headers,
            body: body[..length].to_string(),
        }),
        Some(_) => None,
        None => Some(Answer {
            status,
            headers,
            body: body.to_string(),
        }),
    }
}
