//! Where the log goes and how it looks: stderr, filtered by `RUST_LOG`.
//!
//! Three shapes: plain text for a terminal or a file; under journald
//! (`JOURNAL_STREAM` set, as systemd does for a service's stderr) text
//! without a timestamp (the journal has its own) and with a `<N>` syslog
//! priority prefix per line, which journald turns into the entry's
//! priority; and JSON lines (`[daemon] log_format = "json"`) for log
//! shippers.
//!
//! Text lines are inert: an event's line breaks and control characters
//! are escaped ([`InertStderr`]), so nothing a job prints, nor a name read
//! from Redis or a socket, starts a log line of its own (a forged journal
//! entry) or reaches a terminal as a control sequence. JSON escapes them
//! itself.
//!
//! The spans of runs and claims (target [`SPAN_TARGET`]) never reach the
//! log: without `[daemon.telemetry]` the filter turns their target off, so
//! they cost a disabled callsite; with it ([`init_traced`]) they go to the
//! OpenTelemetry layer alone, and a JSON line written inside one carries
//! its `trace_id` and `span_id`.

use std::fmt;
use std::io::{self, Write};
use std::sync::OnceLock;

use opentelemetry::trace::TraceContextExt;
use tracing::dispatcher::WeakDispatch;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::{LogFormat, TelemetryConfig};
use crate::telemetry::otlp::{self, Exporter};
use crate::trace::SPAN_TARGET;

/// The subscriber of a traced daemon, for the JSON lines' trace ids.
static TRACED: OnceLock<WeakDispatch> = OnceLock::new();

/// `RUST_LOG`, else `default`, with the spans' target off.
fn env_filter(default: &str) -> EnvFilter {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    with_spans_off(filter)
}

/// `filter` with the spans' target off, whatever else it lets through.
fn with_spans_off(filter: EnvFilter) -> EnvFilter {
    let spans_off = format!("{SPAN_TARGET}=off")
        .parse()
        .expect("a target and `off` make a valid directive");
    filter.add_directive(spans_off)
}

/// Installs the global subscriber and, with `telemetry`, the trace
/// exporter beside it (started on `runtime`), which the caller shuts down
/// on its way out. `default` is the filter when `RUST_LOG` is not set.
/// Err: why the exporter cannot start.
pub fn init_traced(
    default: &str,
    format: LogFormat,
    telemetry: Option<&TelemetryConfig>,
    runtime: tokio::runtime::Handle,
) -> Result<Option<Exporter>, String> {
    let Some(telemetry) = telemetry else {
        init(default, format);
        return Ok(None);
    };
    let (exporter, tracer) = otlp::start(telemetry, runtime)?;
    let spans = tracing_subscriber::filter::Targets::new().with_target(SPAN_TARGET, Level::TRACE);
    // The spans' own fields only: no source location, thread or busy and
    // idle times (work on every span that no one asked for).
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_target(false)
        .with_filter(spans);
    let subscriber = Registry::default()
        .with(log_layer(format).with_filter(env_filter(default)))
        .with(otel);
    if subscriber.try_init().is_ok() {
        tracing::dispatcher::get_default(|dispatch| {
            let _ = TRACED.set(dispatch.downgrade());
        });
    }
    tracing::info!(
        endpoint = %crate::config::redact_url(&telemetry.endpoint),
        protocol = telemetry.protocol.as_str(),
        sampling = telemetry.sampling,
        "exporting the spans of runs and claims over OTLP"
    );
    Ok(Some(exporter))
}

/// The log's layer in `format`, for a subscriber with the OpenTelemetry
/// layer beside it.
fn log_layer(format: LogFormat) -> Box<dyn Layer<Registry> + Send + Sync> {
    let layer = tracing_subscriber::fmt::layer();
    match format {
        LogFormat::Json => Box::new(
            layer
                .json()
                .with_writer(io::stderr)
                .event_format(JsonTraced(tracing_subscriber::fmt::format().json())),
        ),
        LogFormat::Text if std::env::var_os("JOURNAL_STREAM").is_some() => Box::new(
            layer
                .with_writer(InertStderr(Escape::AllControls))
                .with_ansi(false)
                .event_format(Journal),
        ),
        LogFormat::Text if std::io::IsTerminal::is_terminal(&io::stderr()) => Box::new(
            layer
                .with_writer(InertStderr(Escape::KeepingColours))
                .with_ansi(true),
        ),
        LogFormat::Text => Box::new(
            layer
                .with_writer(InertStderr(Escape::AllControls))
                .with_ansi(false),
        ),
    }
}

/// The JSON line of an event, with `trace_id` and `span_id` when it
/// happens inside a span the OpenTelemetry layer records.
struct JsonTraced(Format<Json>);

impl<S, N> FormatEvent<S, N> for JsonTraced
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = current_trace_ids() else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.trim_end().strip_suffix('}') {
            Some(open) => writeln!(
                writer,
                "{open},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}"
            ),
            None => writer.write_str(&line),
        }
    }
}

/// The trace and span ids of the innermost span entered on this thread
/// (the registry's, whatever the log's filter shows), when the
/// OpenTelemetry layer records it.
fn current_trace_ids() -> Option<(String, String)> {
    let dispatch = TRACED.get()?.upgrade()?;
    let registry = dispatch.downcast_ref::<Registry>()?;
    let current = registry.current_span();
    let id = current.id()?;
    let context = tracing_opentelemetry::get_otel_context(id, &dispatch)?;
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
}

/// Installs the global subscriber, with no trace exporter. `default` is
/// the filter when `RUST_LOG` is not set.
pub fn init(default: &str, format: LogFormat) {
    let filter = env_filter(default);
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let result = match format {
        LogFormat::Json => builder.with_writer(io::stderr).json().try_init(),
        LogFormat::Text if std::env::var_os("JOURNAL_STREAM").is_some() => builder
            .with_writer(InertStderr(Escape::AllControls))
            .with_ansi(false)
            .event_format(Journal)
            .try_init(),
        LogFormat::Text if std::io::IsTerminal::is_terminal(&io::stderr()) => builder
            .with_writer(InertStderr(Escape::KeepingColours))
            .with_ansi(true)
            .try_init(),
        LogFormat::Text => builder
            .with_writer(InertStderr(Escape::AllControls))
            .with_ansi(false)
            .try_init(),
    };
    // Already installed (a second call in one process): keep the first.
    let _ = result;
}

/// The syslog priority of a level (sd-daemon(3)).
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// `<N>target: message field=value …`, one line per event.
struct Journal;

impl<S, N> FormatEvent<S, N> for Journal
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        write!(
            writer,
            "<{}>{}: ",
            priority(metadata.level()),
            metadata.target()
        )?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Which control characters an event keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    /// None but its final newline.
    AllControls,
    /// ESC too, for the formatter's own colours on a terminal (the events'
    /// fields still lose their line breaks).
    KeepingColours,
}

/// stderr, an event at a time (the formatter writes each event whole, in
/// one call), its control characters escaped as [`Escape`] says.
struct InertStderr(Escape);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for InertStderr {
    type Writer = InertWriter;

    fn make_writer(&'a self) -> InertWriter {
        InertWriter(self.0)
    }
}

struct InertWriter(Escape);

impl Write for InertWriter {
    fn write(&mut self, event: &[u8]) -> io::Result<usize> {
        io::stderr().lock().write_all(&inert_event(event, self.0))?;
        Ok(event.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// `event` with its control characters (C0 but a tab, DEL, C1) escaped
/// (`\n`, `\r`, `\x1b`…), all but a final newline.
fn inert_event(event: &[u8], escape: Escape) -> Vec<u8> {
    let (body, end) = match event.strip_suffix(b"\n") {
        Some(body) => (body, &b"\n"[..]),
        None => (event, &b""[..]),
    };
    let mut out = Vec::with_capacity(event.len() + 16);
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        // C1 controls: U+0080 to U+009F, encoded 0xC2 0x80..=0x9F.
        if b == 0xc2 && body.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)) {
            out.extend_from_slice(format!("\\u{{{:x}}}", body[i + 1]).as_bytes());
            i += 2;
            continue;
        }
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.push(b),
            0x1b if escape == Escape::KeepingColours => out.push(b),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            _ => out.push(b),
        }
        i += 1;
    }
    out.extend_from_slice(end);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_telemetry_the_spans_are_disabled_whatever_the_level() {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(with_spans_off(EnvFilter::new("trace")))
            .with_writer(io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let fields = crate::trace::RunFields {
                job: "a",
                tick_ms: 1_767_225_600_000,
                fence: 1,
                replica: "r",
                run_id: "x",
                trigger: "schedule",
            };
            let run = crate::trace::run_span(fields, None);
            assert!(run.is_disabled());
            assert!(crate::trace::claim_span("a", 1_767_225_600_000).is_disabled());
            assert_eq!(crate::trace::traceparent_of(&run), None);
            // The log's own events at that level still go through.
            assert!(tracing::enabled!(Level::TRACE));
        });
    }

    #[test]
    fn an_event_stays_one_line_without_control_characters() {
        let event = "INFO job=a: evil\n<3>forged entry\r\x1b[2J\u{9b}31m\tok\n".as_bytes();
        let out = String::from_utf8(inert_event(event, Escape::AllControls))
            .expect("UTF-8 in, UTF-8 out");
        assert_eq!(
            out,
            "INFO job=a: evil\\n<3>forged entry\\r\\x1b[2J\\u{9b}31m\tok\n"
        );
        let kept = String::from_utf8(inert_event(
            b"\x1b[32mINFO\x1b[0m a\nb",
            Escape::KeepingColours,
        ))
        .expect("UTF-8");
        assert_eq!(kept, "\x1b[32mINFO\x1b[0m a\\nb");
    }
}
