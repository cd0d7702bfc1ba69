//! A handler's `tracing` events as live output: [`LiveOutputLayer`], a
//! layer an embedding service adds to its own subscriber (the library
//! never installs one).
//!
//! While a handler's future is polled, its run's [`LiveLines`] sit in a
//! task-local ([`in_handler`]); the layer sends each event it sees there to
//! them. Events of tasks the handler spawns are not its own: they reach
//! the live output only through [`crate::Run::output`]. Until a layer is
//! made, handlers run without the task-local.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use super::{LiveLines, MAX_LINE_BYTES, Source};

tokio::task_local! {
    /// The live output of the handler being polled.
    static HANDLER_LINES: LiveLines;
}

/// Whether a [`LiveOutputLayer`] was ever made in this process.
static LAYER_MADE: AtomicBool = AtomicBool::new(false);

/// Whether handlers' futures should carry their live output for a layer.
pub(crate) fn wanted() -> bool {
    LAYER_MADE.load(Ordering::Relaxed)
}

/// `work` polled with `lines` as the handler's live output.
pub(crate) fn in_handler<F: Future>(lines: LiveLines, work: F) -> impl Future<Output = F::Output> {
    HANDLER_LINES.scope(lines, work)
}

/// Sends the `tracing` events an embedded handler emits while it runs to
/// its run's live output (`cronlease logs JOB --follow`, the dashboard's
/// job page), as lines such as `INFO imported batch 3 rows=120`: the
/// level, the message and the other fields. Events at [`Level::INFO`] and
/// above unless [`LiveOutputLayer::with_max_level`] says otherwise.
///
/// Add it to the service's own subscriber; with the `tracing-layer`
/// feature. It sees what the subscriber's filters let through: a global
/// filter (such as an `EnvFilter` layered on the registry) must let the
/// handler's events through; a filter on this layer alone
/// (`.with_filter(…)`) leaves the rest of the subscriber as it was.
///
/// ```
/// use tracing_subscriber::prelude::*;
///
/// tracing_subscriber::registry()
///     .with(tracing_subscriber::fmt::layer())
///     .with(cronlease::LiveOutputLayer::new())
///     .init();
///
/// let job = cronlease::JobBuilder::new("import", "0 2 * * *").run(|_run| async {
///     tracing::info!(rows = 120, "imported batch 3"); // live: "INFO imported batch 3 rows=120"
///     Ok::<(), std::io::Error>(())
/// });
/// ```
#[derive(Debug, Clone)]
pub struct LiveOutputLayer {
    max_level: Level,
}

impl LiveOutputLayer {
    /// A layer that sends events at [`Level::INFO`] and above.
    ///
    /// ```
    /// let layer = cronlease::LiveOutputLayer::new();
    /// ```
    pub fn new() -> LiveOutputLayer {
        LAYER_MADE.store(true, Ordering::Relaxed);
        LiveOutputLayer {
            max_level: Level::INFO,
        }
    }

    /// Sends events at `level` and above (`Level::DEBUG`: debug, info,
    /// warn and error).
    ///
    /// ```
    /// let layer = cronlease::LiveOutputLayer::new().with_max_level(tracing::Level::DEBUG);
    /// ```
    pub fn with_max_level(self, level: Level) -> LiveOutputLayer {
        LiveOutputLayer { max_level: level }
    }
}

impl Default for LiveOutputLayer {
    fn default() -> LiveOutputLayer {
        LiveOutputLayer::new()
    }
}

impl<S: Subscriber> Layer<S> for LiveOutputLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > self.max_level {
            return;
        }
        // Outside a handler (the service's own work, a task it spawned):
        // not a run's output.
        let _ = HANDLER_LINES.try_with(|lines| {
            let line = format_line(level, event);
            lines.push(Source::Handler, line.as_bytes());
        });
    }
}

/// `LEVEL message field=value …`, cut at [`MAX_LINE_BYTES`] by the push.
fn format_line(level: Level, event: &Event<'_>) -> String {
    let mut line = Line {
        message: String::new(),
        fields: String::new(),
    };
    event.record(&mut line);
    let mut text = String::with_capacity(8 + line.message.len() + line.fields.len());
    let _ = write!(text, "{level} {}{}", line.message, line.fields);
    text.truncate(floor_char_boundary(&text, MAX_LINE_BYTES));
    text
}

/// The largest char boundary of `text` at or below `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

/// An event's message and its other fields, as text.
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // A line per event: a field's own line breaks are escaped.
        let text = format!("{value:?}")
            .replace('\n', "\\n")
            .replace('\r', "\\r");
        match field.name() {
            "message" => self.message = text,
            name if name.starts_with("log.") => {}
            name => {
                let _ = write!(self.fields, " {name}={text}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::prelude::*;

    /// The lines `work` leaves in its handler's live output under a
    /// subscriber with the layer.
    fn lines_of(layer: LiveOutputLayer, work: impl FnOnce()) -> Vec<String> {
        let (lines, mut writer) = crate::live::channel("job", "run", 100);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime builds without I/O or time drivers");
            runtime.block_on(in_handler(lines, async { work() }));
        });
        writer.drain_for_test()
    }

    #[test]
    fn a_handlers_event_is_a_line_with_its_level_message_and_fields() {
        let lines = lines_of(LiveOutputLayer::new(), || {
            tracing::info!(rows = 120, table = "users", "imported batch {}", 3);
            tracing::warn!("two\nlines");
        });
        assert_eq!(
            lines,
            [
                "INFO imported batch 3 rows=120 table=users",
                "WARN two\\nlines"
            ]
        );
    }

    #[test]
    fn events_below_the_level_are_left_out() {
        let lines = lines_of(LiveOutputLayer::new(), || {
            tracing::debug!("not shown");
            tracing::error!("shown");
        });
        assert_eq!(lines, ["ERROR shown"]);
        let lines = lines_of(LiveOutputLayer::new().with_max_level(Level::DEBUG), || {
            tracing::debug!("shown too");
        });
        assert_eq!(lines, ["DEBUG shown too"]);
    }

    #[test]
    fn a_long_line_is_cut_on_a_character() {
        let long = "é".repeat(MAX_LINE_BYTES);
        let lines = lines_of(LiveOutputLayer::new(), || tracing::info!("{long}"));
        assert!(lines[0].len() <= MAX_LINE_BYTES, "{}", lines[0].len());
        assert!(lines[0].starts_with("INFO éé"));
    }
}
