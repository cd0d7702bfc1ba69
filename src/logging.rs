//! Where the log goes and how it looks: stderr, filtered by `RUST_LOG`.
//!
//! Three shapes: plain text for a terminal or a file; under journald
//! (`JOURNAL_STREAM` set, as systemd does for a service's stderr) text
//! without a timestamp (the journal has its own) and with a `<N>` syslog
//! priority prefix per line, which journald turns into the entry's
//! priority; and JSON lines (`[daemon] log_format = "json"`) for log
//! shippers.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::LogFormat;

/// Installs the global subscriber. `default` is the filter when `RUST_LOG`
/// is not set.
pub fn init(default: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text if std::env::var_os("JOURNAL_STREAM").is_some() => {
            builder.with_ansi(false).event_format(Journal).try_init()
        }
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
