//! Traces: the `tracing` spans of a run (`cronlease.run`) and of a claim
//! (`cronlease.claim`), and the W3C trace context (`traceparent`) a run
//! hands on to its process, its request or its handler, or continues from
//! a trigger.
//!
//! The spans have the target [`SPAN_TARGET`]. The library only emits them:
//! whoever installs a subscriber decides what becomes of them (an embedding
//! service's own `tracing` setup; the daemon's `[daemon.telemetry]`, which
//! enables the target for its OpenTelemetry layer alone). With no
//! subscriber interested in the target, a span costs what a disabled
//! callsite costs: its fields are not evaluated and nothing is allocated.
//!
//! The trace context of a span comes from the `tracing-opentelemetry`
//! layer of the subscriber (`otel` feature); without that layer (or
//! without the feature) a run has none, and nothing is handed on.

use std::fmt;

use tracing::Span;

/// The target of the run's and the claim's spans: a filter that leaves it
/// out (the daemon's log layer does) makes them free.
pub const SPAN_TARGET: &str = "cronlease::span";

/// A W3C trace context's `traceparent` value, checked: version `00`, a
/// 32-digit trace id and a 16-digit parent id in lowercase hexadecimal,
/// neither all zeros, and two digits of flags.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceParent(String);

/// Why a `traceparent` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid traceparent {value:?}: {reason} (expected 00-<32 hex digits>-<16 hex digits>-<2 hex digits>, lowercase, ids not all zeros)"
)]
pub struct TraceParentError {
    /// The value given, cut to 80 characters.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl TraceParent {
    /// `value` checked as a `traceparent` (W3C Trace Context, version 00).
    pub fn parse(value: &str) -> Result<TraceParent, TraceParentError> {
        let refuse = |reason| TraceParentError {
            value: value.chars().take(80).collect(),
            reason,
        };
        let parts: Vec<&str> = value.split('-').collect();
        let [version, trace_id, parent_id, flags] = parts[..] else {
            return Err(refuse("not four fields separated by '-'"));
        };
        if version != "00" {
            return Err(refuse("the version is not 00"));
        }
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !hex(trace_id, 32) {
            return Err(refuse("the trace id is not 32 lowercase hex digits"));
        }
        if !hex(parent_id, 16) {
            return Err(refuse("the parent id is not 16 lowercase hex digits"));
        }
        if !hex(flags, 2) {
            return Err(refuse("the flags are not 2 lowercase hex digits"));
        }
        if trace_id.bytes().all(|b| b == b'0') {
            return Err(refuse("the trace id is all zeros"));
        }
        if parent_id.bytes().all(|b| b == b'0') {
            return Err(refuse("the parent id is all zeros"));
        }
        Ok(TraceParent(value.to_string()))
    }

    /// The value, as a header or `TRACEPARENT` carries it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The trace id (32 hex digits).
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The parent's span id (16 hex digits).
    pub fn span_id(&self) -> &str {
        &self.0[36..52]
    }

    /// Whether the parent was sampled (flag bit 0).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.0[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tick as a span shows it: RFC 3339 in UTC, or `-` for none; formatted
/// only when a subscriber records the field.
struct Tick(i64);

impl fmt::Display for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match chrono::DateTime::from_timestamp_millis(self.0).filter(|_| self.0 > 0) {
            Some(t) => f.write_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            None => f.write_str("-"),
        }
    }
}

/// The fields of a run's span that are known when it starts.
#[derive(Debug, Clone, Copy)]
pub struct RunFields<'a> {
    pub job: &'a str,
    /// Ms since the epoch (UTC); written RFC 3339 only when the span is
    /// recorded.
    pub tick_ms: i64,
    pub fence: u64,
    pub replica: &'a str,
    pub run_id: &'a str,
    /// What started it (`schedule`, `manual`, …).
    pub trigger: &'a str,
}

/// A run's span, `cronlease.run`: a root, or the child of `parent` (a
/// trigger's trace context). `attempt`, `outcome` and `lateness_ms` are
/// recorded later ([`record_start`], [`record_end`]). A retried run is one
/// span: `attempt` is the number of attempts it made, and each retry is a
/// log event inside it.
pub fn run_span(fields: RunFields<'_>, parent: Option<&TraceParent>) -> Span {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        parent: None,
        "cronlease.run",
        run_id = %fields.run_id,
        job = %fields.job,
        tick = %Tick(fields.tick_ms),
        fence = fields.fence,
        replica = %fields.replica,
        trigger = %fields.trigger,
        attempt = tracing::field::Empty,
        outcome = tracing::field::Empty,
        lateness_ms = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parent) = parent {
        set_remote_parent(&span, parent);
    }
    span
}

/// Records how late the run started (ms after its tick).
pub fn record_start(span: &Span, lateness_ms: i64) {
    span.record("lateness_ms", lateness_ms);
}

/// Records how the run ended: its outcome and how many attempts it made.
pub fn record_end(span: &Span, outcome: &str, attempts: u32) {
    span.record("outcome", outcome);
    span.record("attempt", attempts);
    // OpenTelemetry's span status: an error for every outcome but `ok`.
    if outcome != "ok" {
        span.record("otel.status_code", "ERROR");
    }
}

/// A `--traceparent` value, checked (the command line's value parser).
#[cfg(feature = "cli")]
pub fn parse_arg(value: &str) -> Result<TraceParent, String> {
    TraceParent::parse(value).map_err(|e| e.to_string())
}

/// The trace context a command continues: `given` (`--traceparent`,
/// checked already), else `$TRACEPARENT` when it holds a valid one. An
/// invalid one is left out with a warning on stderr: the variable may have
/// been set by something else, and a trigger should not fail for it.
#[cfg(feature = "cli")]
pub fn given_or_inherited(given: Option<&TraceParent>) -> Option<TraceParent> {
    if let Some(given) = given {
        return Some(given.clone());
    }
    let inherited = std::env::var("TRACEPARENT").ok()?;
    match TraceParent::parse(&inherited) {
        Ok(parent) => Some(parent),
        Err(e) => {
            eprintln!("warning: $TRACEPARENT left out: {e}");
            None
        }
    }
}

/// A claim's span, `cronlease.claim`; its `result` is recorded when Redis
/// has answered ([`record_claim`]).
pub fn claim_span(job: &str, tick_ms: i64) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: None,
        "cronlease.claim",
        job = %job,
        tick = %Tick(tick_ms),
        result = tracing::field::Empty,
        run_id = tracing::field::Empty,
        fence = tracing::field::Empty,
    )
}

/// Records a claim's answer (`claimed`, `taken`, `busy`, …) and, for a
/// claimed one, the run id and fence.
pub fn record_claim(span: &Span, result: &str, claimed: Option<(&str, u64)>) {
    span.record("result", result);
    if let Some((run_id, fence)) = claimed {
        span.record("run_id", run_id);
        span.record("fence", fence);
    }
}

/// The trace context of `span` as a `traceparent` for what it starts; None
/// when the span is disabled or no OpenTelemetry layer records it.
pub fn traceparent_of(span: &Span) -> Option<TraceParent> {
    if span.is_disabled() {
        return None;
    }
    otel::traceparent_of(span)
}

/// Makes `parent` (from another process) the parent of `span`, before the
/// span is first entered.
fn set_remote_parent(span: &Span, parent: &TraceParent) {
    if !span.is_disabled() {
        otel::set_remote_parent(span, parent);
    }
}

#[cfg(feature = "otel")]
mod otel {
    use super::TraceParent;
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    pub(super) fn traceparent_of(span: &Span) -> Option<TraceParent> {
        let context = span.context();
        let span_context = context.span().span_context().clone();
        if !span_context.is_valid() {
            return None;
        }
        let value = format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        );
        TraceParent::parse(&value).ok()
    }

    pub(super) fn set_remote_parent(span: &Span, parent: &TraceParent) {
        let (Ok(trace_id), Ok(span_id)) = (
            TraceId::from_hex(parent.trace_id()),
            SpanId::from_hex(parent.span_id()),
        ) else {
            return;
        };
        let flags = if parent.sampled() {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let remote = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
        let context = opentelemetry::Context::new().with_remote_span_context(remote);
        // Err: no OpenTelemetry layer in this subscriber; nothing to join.
        let _ = span.set_parent(context);
    }
}

#[cfg(not(feature = "otel"))]
mod otel {
    use super::TraceParent;
    use tracing::Span;

    pub(super) fn traceparent_of(_span: &Span) -> Option<TraceParent> {
        None
    }

    pub(super) fn set_remote_parent(_span: &Span, _parent: &TraceParent) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_checked_strictly() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceParent::parse(good).expect("the W3C example");
        assert_eq!(parsed.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parsed.span_id(), "00f067aa0ba902b7");
        assert!(parsed.sampled());
        for (bad, reason) in [
            ("", "not four fields"),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version",
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
                "flags",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                "four fields",
            ),
        ] {
            let error = TraceParent::parse(bad).expect_err(bad);
            assert!(error.to_string().contains(reason), "{bad}: {error}");
        }
    }
}
