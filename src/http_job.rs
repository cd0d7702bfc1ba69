//! HTTP jobs: a job's `http = { … }` request sent as a [`Task`], one
//! request per attempt, under the run's lease.
//!
//! Every request carries the run's identity (`Cronlease-Job`,
//! `Cronlease-Tick`, `Cronlease-Fence`, `Cronlease-Run-Id`), the run id as
//! `Idempotency-Key` and `User-Agent: cronlease/<version>`. The answer's
//! status line and the first bytes of its body make the attempt's output;
//! the status decides `ok` or `failed` (no exit code). A stop of any kind
//! (lost lease, timeout, shutdown) drops the request at once: there is no
//! process to ask to finish, and an answer that comes after the stop would
//! not change the run's status.
//!
//! The clients are [`HttpClients`]: one per replica, built on first use
//! for each pair of `ca_file` and redirect policy and shared by every run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::SecondsFormat;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::config::{Encoding, HttpRequest, MAX_PEM_FILE, Redirects, read_bounded, substitute};
use crate::outcome::{Status, Tail};
use crate::task::{Attempt, AttemptEnd, RunContext, StopSignal, Task};

/// The User-Agent of every request.
const USER_AGENT: &str = concat!("cronlease/", env!("CARGO_PKG_VERSION"));

/// How many redirects `follow_redirects = true` follows.
const MAX_REDIRECTS: usize = 10;

/// The HTTP clients of a replica's jobs: one per `ca_file` and redirect
/// policy, built once (a client holds its connection pool and TLS
/// configuration, which each run then reuses).
#[derive(Debug, Default)]
pub struct HttpClients {
    /// Never held across an `.await`.
    built: Mutex<HashMap<(Option<PathBuf>, Redirects), reqwest::Client>>,
}

impl HttpClients {
    /// The client for requests trusting `ca_file` (besides the system's
    /// roots) with `redirects`; the message of what failed when it cannot
    /// be built (an unreadable `ca_file`), which is tried again next time.
    pub fn client(
        &self,
        ca_file: Option<&Path>,
        redirects: Redirects,
    ) -> Result<reqwest::Client, String> {
        let key = (ca_file.map(Path::to_path_buf), redirects);
        let mut built = self
            .built
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = built.get(&key) {
            return Ok(client.clone());
        }
        let client = build_client(ca_file, redirects)?;
        built.insert(key, client.clone());
        Ok(client)
    }
}

/// A client with rustls over ring (the provider the rest of the crate
/// uses), the system's roots and the certificates of `ca_file`, no proxy.
fn build_client(ca_file: Option<&Path>, redirects: Redirects) -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    // Some unreadable system certificates among many are not fatal: the
    // others still verify.
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = ca_file {
        let pem = read_bounded(path, MAX_PEM_FILE)
            .map_err(|e| format!("cannot read ca_file {}: {e}", path.display()))?;
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("ca_file {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!(
                "ca_file {}: no PEM certificate in it",
                path.display()
            ));
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let policy = match redirects {
        Redirects::Keep => reqwest::redirect::Policy::none(),
        Redirects::Follow => reqwest::redirect::Policy::limited(MAX_REDIRECTS),
    };
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .user_agent(USER_AGENT)
        .redirect(policy)
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())
}

/// A job's request as the task of its runs.
#[derive(Debug)]
pub struct HttpTask {
    /// The replica's client for the job's TLS and redirect settings, or
    /// why there is none (each attempt then fails and says so).
    pub client: Result<reqwest::Client, String>,
    pub request: HttpRequest,
    /// How many bytes of the answer the output keeps
    /// (`output_tail_bytes`), its status line included.
    pub output_bytes: usize,
}

impl Task for HttpTask {
    fn attempt<'a>(
        &'a self,
        run: &'a RunContext,
        mut stop: StopSignal,
        output: &'a mut Tail,
    ) -> Attempt<'a> {
        Box::pin(async move {
            if let Some(reason) = stop.requested() {
                return AttemptEnd::bare(reason.status());
            }
            let client = match &self.client {
                Ok(client) => client,
                Err(message) => {
                    output.push_line(format!("[cronlease] no HTTP client: {message}").as_bytes());
                    return AttemptEnd::bare(Status::Failed);
                }
            };
            let exchange = tokio::time::timeout(
                self.request.timeout,
                exchange(client, &self.request, run, self.output_bytes),
            );
            // Dropping the exchange closes its connection: the request is
            // aborted, whatever it was waiting for.
            let answer = tokio::select! {
                reason = stop.next() => {
                    output.push_line(format!("[cronlease] request aborted: {}", reason.status()).as_bytes());
                    return AttemptEnd::bare(reason.status());
                }
                answer = exchange => answer,
            };
            match answer {
                Err(_) => {
                    let limit = humantime::format_duration(self.request.timeout);
                    output.push_line(
                        format!("[cronlease] no answer within http.timeout ({limit})").as_bytes(),
                    );
                    AttemptEnd::bare(Status::Timeout)
                }
                Ok(Err(message)) => {
                    output.push_line(format!("[cronlease] request failed: {message}").as_bytes());
                    AttemptEnd::bare(Status::Failed)
                }
                Ok(Ok(answer)) => {
                    output.push_line(answer.status_line.as_bytes());
                    if !answer.body.is_empty() {
                        output.push_line(&answer.body);
                    }
                    let expected = self.request.expect.iter().any(|m| m.matches(answer.status));
                    AttemptEnd::bare(if expected { Status::Ok } else { Status::Failed })
                }
            }
        })
    }
}

/// An answer: its status, status line and the first bytes of its body.
struct Answer {
    status: u16,
    status_line: String,
    body: Vec<u8>,
}

/// Sends `request` for `run` and reads the answer, at most `limit` bytes
/// of it (status line and body together); the error's message when none
/// came.
async fn exchange(
    client: &reqwest::Client,
    request: &HttpRequest,
    run: &RunContext,
    limit: usize,
) -> Result<Answer, String> {
    let method = reqwest::Method::from_bytes(request.method.as_bytes())
        .map_err(|e| format!("method {:?}: {e}", request.method))?;
    let tick = chrono::DateTime::from_timestamp_millis(run.tick_ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_default();
    // The run's parameters in `{param.<name>}`: percent-encoded in the
    // URL (the config allows none in its host), as they are in the body.
    let url = substitute(&request.url, &run.params, Encoding::Percent);
    let mut builder = client
        .request(method, &url)
        .header("Cronlease-Job", &run.job)
        .header("Cronlease-Tick", tick)
        .header("Cronlease-Fence", run.fence.to_string())
        .header("Cronlease-Run-Id", &run.run_id)
        .header("Idempotency-Key", &run.run_id);
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    if let Some(trace) = &run.trace {
        // W3C Trace Context: the receiver's spans join the run's trace.
        builder = builder.header("traceparent", trace.as_str());
    }
    if let Some(body) = &request.body {
        builder = builder.body(substitute(body, &run.params, Encoding::Verbatim));
    }
    let mut response = builder
        .send()
        .await
        .map_err(|e| crate::inert::error_chain(&e))?;
    let status = response.status();
    let status_line = format!(
        "HTTP {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .trim_end()
    .to_string();
    let room = limit.saturating_sub(status_line.len() + 2);
    let mut body = Vec::new();
    while body.len() < room {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            // The status is the answer; a body cut short does not change it.
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(room);
    Ok(Answer {
        status: status.as_u16(),
        status_line,
        body,
    })
}
