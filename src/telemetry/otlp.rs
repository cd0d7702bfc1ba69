//! The daemon's trace exporter (`[daemon.telemetry]`): the OpenTelemetry
//! SDK's tracer provider with a batch processor and the OTLP exporter
//! (gRPC, HTTP with protobuf, HTTP with JSON), and the
//! `tracing-opentelemetry` layer that turns the run's and claim's spans
//! into its spans.
//!
//! The HTTP protocols send through the replica's reqwest client (the one
//! HTTP jobs use: rustls with ring and the system's roots), on the
//! daemon's runtime: the batch processor's thread hands each export to the
//! runtime and waits for it. [`Exporter::shutdown`] flushes what is queued
//! and stops the processor within the config's `timeout`; the daemon calls
//! it on its one shutdown path.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter, Tracer};

use crate::config::{HeaderSource, OtlpProtocol, TelemetryConfig, read_bounded};

/// Largest `headers_file` read.
const MAX_HEADERS_FILE: u64 = 64 * 1024;

/// The OTLP path of traces over HTTP.
const TRACES_PATH: &str = "/v1/traces";

/// The running exporter; [`Exporter::shutdown`] ends it.
#[derive(Debug)]
pub struct Exporter {
    provider: SdkTracerProvider,
    timeout: Duration,
}

impl Exporter {
    /// Exports what is still queued and stops, within the config's
    /// `timeout`: called once, on the daemon's shutdown path (a blocking
    /// call: the batch processor's thread is joined).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(self.timeout) {
            tracing::warn!(error = %e, "the trace exporter did not shut down cleanly; spans may be lost");
        }
    }
}

/// The exporter `config` describes, and the tracer of its spans; an error
/// names what cannot be used (a header file unreadable, a variable unset).
/// Called inside the daemon's runtime (`runtime`: where exports run).
pub fn start(
    config: &TelemetryConfig,
    runtime: tokio::runtime::Handle,
) -> Result<(Exporter, Tracer), String> {
    let headers = headers(config)?;
    let provider = match config.protocol {
        OtlpProtocol::Grpc => provider(
            config,
            Logged {
                inner: grpc_exporter(config, &headers)?,
                warned: std::sync::Mutex::new(None),
            },
        ),
        // The HTTP client logs its own failures, with the answer's status.
        OtlpProtocol::HttpProtobuf | OtlpProtocol::HttpJson => {
            provider(config, http_exporter(config, headers, runtime)?)
        }
    };
    let tracer = provider.tracer("cronlease");
    Ok((
        Exporter {
            provider,
            timeout: config.timeout,
        },
        tracer,
    ))
}

/// The tracer provider: `exporter` behind a batch processor, the config's
/// sampling and service name.
fn provider(config: &TelemetryConfig, exporter: impl SpanExporter + 'static) -> SdkTracerProvider {
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sampling)));
    SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        )
        .build()
}

/// An exporter whose failed exports are logged (once a minute at most):
/// the gRPC exporter's, which says nothing of them itself.
#[derive(Debug)]
struct Logged<E> {
    inner: E,
    /// When a failed export was last logged.
    warned: std::sync::Mutex<Option<std::time::Instant>>,
}

impl<E: SpanExporter> SpanExporter for Logged<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            // The error may carry the collector's own words.
            warn_failed(&self.warned, &crate::inert::escape(&e.to_string()));
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

fn grpc_exporter(
    config: &TelemetryConfig,
    headers: &HashMap<String, String>,
) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let key = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("[daemon.telemetry] header {name:?}: {e}"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|e| format!("[daemon.telemetry] header {name:?}: its value: {e}"))?;
        map.insert(key, value);
    }
    let metadata = opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(map);
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(config.endpoint.clone())
        .with_timeout(config.timeout)
        .with_metadata(metadata)
        .build()
        .map_err(|e| format!("[daemon.telemetry] cannot start the gRPC exporter: {e}"))
}

fn http_exporter(
    config: &TelemetryConfig,
    headers: HashMap<String, String>,
    runtime: tokio::runtime::Handle,
) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let protocol = match config.protocol {
        OtlpProtocol::HttpJson => Protocol::HttpJson,
        OtlpProtocol::HttpProtobuf | OtlpProtocol::Grpc => Protocol::HttpBinary,
    };
    let client = crate::http_job::HttpClients::default()
        .client(None, crate::config::Redirects::Keep)
        .map_err(|e| format!("[daemon.telemetry] no HTTP client: {e}"))?;
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(traces_url(&config.endpoint))
        .with_protocol(protocol)
        .with_timeout(config.timeout)
        .with_headers(headers)
        .with_http_client(OnRuntime {
            client,
            runtime,
            timeout: config.timeout,
            warned: std::sync::Arc::new(std::sync::Mutex::new(None)),
        })
        .build()
        .map_err(|e| format!("[daemon.telemetry] cannot start the HTTP exporter: {e}"))
}

/// The endpoint with OTLP's `/v1/traces` path, unless it ends with it.
fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with(TRACES_PATH) {
        trimmed.to_string()
    } else {
        format!("{trimmed}{TRACES_PATH}")
    }
}

/// Every header of the exports: `headers`, `headers_env` (read now) and
/// `headers_file` (read now).
fn headers(config: &TelemetryConfig) -> Result<HashMap<String, String>, String> {
    let mut headers = HashMap::new();
    for (name, source) in &config.headers {
        let value = match source {
            HeaderSource::Value(value) => value.clone(),
            HeaderSource::Env(variable) => std::env::var(variable).map_err(|_| {
                format!(
                    "[daemon.telemetry] headers_env: {name}: ${variable} is not set (or not UTF-8)"
                )
            })?,
        };
        headers.insert(name.clone(), value);
    }
    if let Some(path) = &config.headers_file {
        let bytes = read_bounded(path, MAX_HEADERS_FILE)
            .map_err(|e| format!("[daemon.telemetry] headers_file {}: {e}", path.display()))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            format!(
                "[daemon.telemetry] headers_file {}: not UTF-8",
                path.display()
            )
        })?;
        for (name, value) in header_lines(&text)
            .map_err(|e| format!("[daemon.telemetry] headers_file {}: {e}", path.display()))?
        {
            headers.insert(name, value);
        }
    }
    Ok(headers)
}

/// A headers file's `name: value` lines (blank lines and `#` comments
/// skipped), names lowercased.
pub fn header_lines(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut headers = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!(
                "line {}: expected `name: value`, such as `x-api-key: …`",
                number + 1
            ));
        };
        let name = name.trim();
        if !crate::config::is_header_name(name) {
            return Err(format!("line {}: invalid header name {name:?}", number + 1));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(headers)
}

/// The exporter's HTTP client: each request sent by reqwest on the
/// daemon's runtime (the batch processor's thread has none), the export
/// waiting for it there.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    /// When a failed export was last logged: one line a minute at most
    /// while the collector is away (never held across an `.await`).
    warned: std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

/// How often a failing export is logged.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Logs a failed export, unless one was logged less than [`WARN_EVERY`]
/// ago: the spans are lost, the runs go on.
fn warn_failed(warned: &std::sync::Mutex<Option<std::time::Instant>>, what: &str) {
    let mut last = warned
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if last.is_some_and(|at| at.elapsed() < WARN_EVERY) {
        return;
    }
    *last = Some(std::time::Instant::now());
    tracing::warn!(error = %what, "cannot export spans to [daemon.telemetry] endpoint; they are dropped (logged once a minute at most)");
}

impl HttpClient for OnRuntime {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let client = self.client.clone();
        let timeout = self.timeout;
        let warned = self.warned.clone();
        let sending = self.runtime.spawn(async move {
            let request = reqwest::Request::try_from(request)?;
            let exchange = async {
                let response = client.execute(request).await?;
                let mut answer = Response::builder().status(response.status());
                if let Some(headers) = answer.headers_mut() {
                    *headers = response.headers().clone();
                }
                let body = response.bytes().await?;
                Ok::<_, HttpError>(answer.body(body)?)
            };
            let answer = tokio::time::timeout(timeout, exchange)
                .await
                .map_err(|_| HttpError::from("no answer within [daemon.telemetry] timeout"))
                .and_then(|answer| answer);
            match &answer {
                Ok(response) if !response.status().is_success() => {
                    warn_failed(&warned, &format!("HTTP {}", response.status()));
                }
                Ok(_) => {}
                Err(e) => warn_failed(&warned, &crate::inert::error_chain(&**e)),
            }
            answer
        });
        Box::pin(async move {
            match sending.await {
                Ok(answer) => answer,
                Err(e) => Err(HttpError::from(format!("the export's task ended: {e}"))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_headers_file_is_read_line_by_line() {
        let lines = header_lines("# the collector's key\nX-Api-Key: abc: def\n\nx-team:  ops \n")
            .expect("valid");
        assert_eq!(
            lines,
            vec![
                ("x-api-key".to_string(), "abc: def".to_string()),
                ("x-team".to_string(), "ops".to_string())
            ]
        );
        let error = header_lines("x-api-key abc").expect_err("no colon");
        assert!(error.contains("line 1"), "{error}");
    }

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }
}
