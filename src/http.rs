//! The connection loop both HTTP servers (`/metrics`, the dashboard) run
//! instead of `axum::serve`, so that no client can hold what claims and
//! runs need: every connection has deadlines, their number is bounded
//! below the file limit, and no request body is read past a limit.
//!
//! - **Connections.** At most [`Limits::max_connections`] at once. One
//!   more is accepted, answered `503` if its socket takes the few bytes at
//!   once, and closed: it never waits in the kernel's queue holding a
//!   descriptor, and the refusal is logged at most every
//!   [`REFUSAL_LOG_EVERY`].
//! - **Deadlines.** A request's headers must arrive within
//!   [`Limits::header_read`] of the moment the server waits for them, on a
//!   new connection or a kept-alive one (hyper's header timer), so a
//!   slowloris client and an idle keep-alive connection are both closed
//!   then. A connection that moves no byte either way for [`Limits::idle`]
//!   (a stalled upload, a reader that stopped reading) is dropped, and
//!   every connection is asked to close after [`Limits::lifetime`] and
//!   dropped [`CLOSE_GRACE`] later (also on shutdown).
//! - **Bodies.** A request whose `Content-Length` is above
//!   [`Limits::max_body`] is answered `413` before a byte of its body is
//!   read; any other body is read up to the limit and refused with `413`
//!   past it. The handlers get the body whole.
//! - **Hosts.** A request whose `Host` is not one the server answers to
//!   ([`Hosts`]) gets `400`: a page of another site whose name was made to
//!   resolve to this host (DNS rebinding) cannot read it.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a connection asked to close (lifetime, shutdown) may finish
/// its request before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How often at most a refused connection is logged.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
/// After an accept error (out of descriptors, above all), how long the
/// loop waits before it accepts again, rather than spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// The most bytes of request head (request line and headers) buffered.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// What a server holds each client to.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The server's name in the log ("dashboard", "metrics").
    pub name: &'static str,
    /// How long a request's headers may take to arrive, from the moment
    /// the server waits for them (also the longest idle keep-alive).
    pub header_read: Duration,
    /// How long a connection may move no byte at all.
    pub idle: Duration,
    /// How long a connection may stay open in all.
    pub lifetime: Duration,
    /// Connections served at once; more are refused.
    pub max_connections: usize,
    /// The largest request body read, in bytes (0: no body at all).
    pub max_body: usize,
    /// The `Host` values answered.
    pub hosts: Hosts,
}

impl Limits {
    /// The defaults: headers within 10 s, 30 s without a byte, 10 minutes
    /// in all; `max_connections`, `max_body` and `hosts` as given.
    pub fn new(
        name: &'static str,
        max_connections: usize,
        max_body: usize,
        hosts: Hosts,
    ) -> Limits {
        Limits {
            name,
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(30),
            lifetime: Duration::from_secs(600),
            max_connections: max_connections.max(1),
            max_body,
            hosts,
        }
    }
}

/// The soft limit on this process's open files now (1024, the usual
/// default, if it cannot be read).
pub fn open_files_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _hard)| soft)
}

/// How many connections each HTTP server may hold: `configured`, and at
/// most an eighth of the soft limit on open files `nofile`, so that both
/// servers together hold at most a quarter of it and the descriptors runs,
/// Redis and the spool need are always there.
pub fn connection_limit(configured: usize, nofile: u64) -> usize {
    let share = usize::try_from(nofile / 8).unwrap_or(usize::MAX);
    configured.min(share).max(1)
}

/// The `Host` header values a server answers: loopback names and
/// addresses, the address it listens on (any address when it listens on
/// all of them: an address is never a rebound name), and the names
/// configured (`[daemon] dashboard_hosts`). Ports are not compared.
#[derive(Debug, Clone)]
pub struct Hosts {
    listen: IpAddr,
    names: Vec<String>,
}

impl Hosts {
    pub fn new(listen: IpAddr, names: &[String]) -> Hosts {
        Hosts {
            listen,
            names: names.iter().map(|n| normalize(n)).collect(),
        }
    }

    /// Whether a request with this `Host` header is answered.
    pub fn allows(&self, host: Option<&HeaderValue>) -> bool {
        let Some(host) = host.and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let name = host_name(host);
        if name.is_empty() {
            return false;
        }
        let literal = match name.strip_prefix('[') {
            Some(bracketed) => match bracketed.strip_suffix(']') {
                Some(inside) => inside,
                None => return false,
            },
            None => name,
        };
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return ip.is_loopback() || ip == self.listen || self.listen.is_unspecified();
        }
        let name = normalize(name);
        name == "localhost" || self.names.contains(&name)
    }
}

/// A host name lowercased, without a trailing dot.
fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The name part of a `Host` value: without its port, brackets kept.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !name.contains(':') => {
            name
        }
        _ => host,
    }
}

/// Serves `app` on `listener` under `limits` until `cancel`; then closes
/// every connection (within [`CLOSE_GRACE`]) and returns. Each connection
/// is a task of this function's own tracker, joined before it returns.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, cancel: CancellationToken) {
    let limits = Arc::new(limits);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let mut refused: u64 = 0;
    let mut refusal_logged: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was
                // taken: wait a moment instead of spinning on the error.
                tracing::warn!(server = limits.name, error = %e, "cannot accept a connection");
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refuse(&stream);
            refused += 1;
            if refusal_logged.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
                tracing::warn!(
                    server = limits.name, %peer, refused, max_connections = limits.max_connections,
                    "too many connections: refused (503 and closed)"
                );
                refusal_logged = Some(Instant::now());
            }
            continue;
        };
        let (app, limits, cancel) = (app.clone(), limits.clone(), cancel.clone());
        connections.spawn(async move {
            connection(stream, peer, app, &limits, &cancel).await;
            drop(permit);
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// A connection beyond the limit: `503` if the socket takes it at once
/// (never waited for), then closed.
fn refuse(stream: &TcpStream) {
    const ANSWER: &[u8] =
        b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    let _ = stream.try_write(ANSWER);
}

/// Serves one connection until it ends, stays silent for `limits.idle`,
/// or outlives `limits.lifetime` or the server (plus [`CLOSE_GRACE`]).
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: &Arc<Limits>,
    cancel: &CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let opened = Instant::now();
    let activity = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(Watched {
        inner: stream,
        opened,
        activity: activity.clone(),
    });
    let service_limits = limits.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (app, limits) = (app.clone(), service_limits.clone());
        async move { Ok::<_, Infallible>(handle(request, app, &limits, peer).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(MAX_HEAD_BYTES);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut closing_at: Option<Instant> = None;
    let lifetime_at = opened + limits.lifetime;
    loop {
        let last = opened + Duration::from_millis(activity.load(Ordering::Relaxed));
        let idle_at = last + limits.idle;
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(server = limits.name, %peer, error = %e, "connection ended");
                }
                return;
            }
            () = cancel.cancelled(), if closing_at.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing_at = Some(Instant::now() + CLOSE_GRACE);
            }
            () = tokio::time::sleep_until(lifetime_at), if closing_at.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing_at = Some(Instant::now() + CLOSE_GRACE);
            }
            () = tokio::time::sleep_until(closing_at.unwrap_or(lifetime_at)), if closing_at.is_some() => {
                tracing::debug!(server = limits.name, %peer, "connection dropped: it did not close in time");
                return;
            }
            () = tokio::time::sleep_until(idle_at) => {
                let last = opened + Duration::from_millis(activity.load(Ordering::Relaxed));
                if last + limits.idle <= Instant::now() {
                    tracing::debug!(server = limits.name, %peer, "connection dropped: idle");
                    return;
                }
            }
        }
    }
}

/// One request: its `Host` checked, its body read whole under the limit,
/// then `app`'s answer (with the peer's address as `ConnectInfo`).
async fn handle(
    request: Request<Incoming>,
    app: Router,
    limits: &Limits,
    peer: SocketAddr,
) -> Response<Body> {
    if !limits.hosts.allows(request.headers().get(header::HOST)) {
        tracing::info!(server = limits.name, %peer, host = ?request.headers().get(header::HOST), "request for another host refused");
        return refusal(
            StatusCode::BAD_REQUEST,
            "unknown Host: this server answers only to its own names\n",
        );
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body as u64) {
        return too_large(limits);
    }
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, limits.max_body).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(limits),
        Err(_) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "the request body could not be read\n",
            );
        }
    };
    let mut request = Request::from_parts(parts, Body::from(body));
    request.extensions_mut().insert(ConnectInfo(peer));
    let mut app = app;
    // A `Router` is always ready: it needs no `poll_ready` first.
    match tower_service::Service::call(&mut app, request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn too_large(limits: &Limits) -> Response<Body> {
    refusal(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "request body too large: at most {} bytes\n",
            limits.max_body
        ),
    )
}

/// A plain-text refusal after which the connection is closed (its body,
/// if any, is never read).
fn refusal(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(text.to_string()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A connection's socket that notes when it last moved a byte (ms since
/// `opened`), for the idle deadline.
struct Watched {
    inner: TcpStream,
    opened: Instant,
    activity: Arc<AtomicU64>,
}

impl Watched {
    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.activity.store(ms, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.touch();
        }
        poll
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(hosts: &Hosts, host: &str) -> bool {
        hosts.allows(Some(&HeaderValue::from_str(host).expect("a test header")))
    }

    #[test]
    fn only_own_names_and_addresses_are_answered() {
        let loopback = Hosts::new(
            "127.0.0.1".parse().expect("an address"),
            &["Cron.Example.".to_string()],
        );
        for host in [
            "127.0.0.1:9465",
            "localhost:9465",
            "LOCALHOST",
            "[::1]:9465",
            "cron.example:9465",
            "cron.example",
        ] {
            assert!(allows(&loopback, host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:9465",
            "10.0.0.5:9465",
            "",
            "localhost.evil.example",
            "[::1",
        ] {
            assert!(!allows(&loopback, host), "{host}");
        }
        assert!(!loopback.allows(None));
        let everywhere = Hosts::new("0.0.0.0".parse().expect("an address"), &[]);
        assert!(allows(&everywhere, "10.0.0.5:9465"));
        assert!(allows(&everywhere, "[fe80::1]:9465"));
        assert!(!allows(&everywhere, "evil.example:9465"));
    }

    #[test]
    fn connections_stay_well_below_the_file_limit() {
        assert_eq!(connection_limit(256, 1024), 128);
        assert_eq!(connection_limit(256, 1_048_576), 256);
        assert_eq!(connection_limit(256, 4), 1);
    }
}
