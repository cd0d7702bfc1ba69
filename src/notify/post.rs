//! The HTTP POST the webhook and Slack channels share: one client (rustls
//! with ring and the system's roots, no redirects; `HTTPS_PROXY`,
//! `HTTP_PROXY` and `NO_PROXY` are honoured as curl honours them), the
//! request under the channel's timeout, the answer's body read under a
//! limit and escaped.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::{Receipt, SendError, printable};

/// The most of an answer's body read: what a receipt or an error shows
/// is the first [`super::ANSWER_LIMIT`] bytes of it.
const BODY_LIMIT: usize = 4096;

/// The User-Agent of every request.
pub(super) const USER_AGENT: &str = concat!("cronlease/", env!("CARGO_PKG_VERSION"));

/// The one HTTP client of the channels. Its TLS is built here, with ring
/// (the provider the rest of the crate uses) and the system's roots.
pub(crate) fn client() -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    // Some unreadable certificates among many are not fatal: the others
    // still verify; none at all leaves https receivers unreachable, which
    // each send then reports.
    roots.add_parsable_certificates(native.certs);
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .user_agent(USER_AGENT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())
}

/// POSTs `body` to `url` with `headers` (and `Content-Type: application/json`)
/// within `timeout`.
pub(super) async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Receipt, SendError> {
    let request = client
        .post(url)
        .headers(headers)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .timeout(timeout)
        .body(body);
    let exchange = async {
        let mut response = request.send().await.map_err(|e| error(e, timeout))?;
        let status = response.status();
        let mut body = Vec::new();
        while body.len() < BODY_LIMIT {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break,
                // The status is the answer; a body cut short does not change it.
                Err(_) => break,
            }
        }
        body.truncate(BODY_LIMIT);
        Ok::<_, SendError>((status, body))
    };
    // reqwest's timeout covers the body too; this one also bounds a
    // receiver that trickles an endless body a byte at a time.
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| SendError::Timeout(timeout))??;
    let text = printable(&String::from_utf8_lossy(&body));
    if status.is_success() {
        let reason = status.canonical_reason().unwrap_or("");
        let mut answer = format!("HTTP {} {reason}", status.as_u16());
        if !text.is_empty() {
            answer = format!("{answer}: {text}");
        }
        Ok(Receipt { answer })
    } else {
        Err(SendError::Http {
            status: status.as_u16(),
            body: text,
        })
    }
}

/// A request that got no answer, classified.
fn error(e: reqwest::Error, timeout: Duration) -> SendError {
    if e.is_timeout() {
        return SendError::Timeout(timeout);
    }
    // The chain says what failed (refused, reset, DNS, TLS).
    SendError::Connect(printable(&crate::inert::error_chain(&e)))
}

/// `Idempotency-Key: <key>`; an error (permanent) when the key cannot be
/// a header's value.
pub(super) fn idempotency_key(key: &str) -> Result<(HeaderName, HeaderValue), SendError> {
    header("Idempotency-Key", key).ok_or_else(|| {
        SendError::Message(format!(
            "the idempotency key {:?} cannot be a header value",
            printable(key)
        ))
    })
}

/// A header of the channel's config or of cronlease's own, as reqwest
/// takes it; `None` when it cannot be one (the config refuses those).
pub(super) fn header(name: &str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
    let value = HeaderValue::from_str(value).ok()?;
    Some((name, value))
}
