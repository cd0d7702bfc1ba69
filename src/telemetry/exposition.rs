//! `/metrics` without an exporter crate: a `metrics` recorder that keeps
//! each series as a few atomics and writes the Prometheus text format
//! straight into the response, a slice at a time.
//!
//! Not `metrics-exporter-prometheus`: it keeps a copy of every key, a
//! sample buffer per histogram until the next scrape and a distribution
//! per histogram after it, and on each scrape clones its registry and
//! renders the whole page into one `String` — memory that grows with the
//! jobs and spikes at each scrape, most of a busy replica's peak. Here:
//!
//! - a counter or gauge is one `AtomicU64`, a histogram its fixed buckets'
//!   counts and its sum, counted when a value is recorded: nothing waits
//!   for a scrape, so nothing grows between scrapes;
//! - a series keeps only its label values: the names are its family's,
//!   kept once (a job's name is shared by its series when the caller hands
//!   it over as an `Arc<str>`, as `daemon::meters` does);
//! - a scrape writes [`SLICE`] bytes at a time under the lock and sends
//!   them before it writes more: its memory does not grow with the jobs.
//!
//! Series are never removed: a job dropped by a reload keeps its last
//! figures until the replica restarts. Units given to `describe_*` are not
//! written.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::Write as _;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use indexmap::IndexMap;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Label, Metadata,
    Recorder, SharedString, Unit,
};

/// About how much text one slice of a scrape holds.
const SLICE: usize = 64 * 1024;

/// The buckets of a histogram no bucket list was given for (Prometheus'
/// client libraries' defaults), in seconds.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The `Content-Type` of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The recorder and what serves its page: clones share one registry.
#[derive(Clone)]
pub struct Exposition {
    registry: Arc<Registry>,
}

struct Registry {
    families: Mutex<BTreeMap<String, Family>>,
    /// Bucket upper bounds by histogram name, ascending.
    buckets: Vec<(&'static str, Arc<[f64]>)>,
}

/// What a metric is: the first `describe_*` or `register_*` of a name
/// decides it; a later registration of the name as something else (or
/// with other label names than its first series) gets a handle that
/// records nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

struct Family {
    kind: Kind,
    help: Option<SharedString>,
    /// The label names of every series, in order: its first series'.
    names: Option<Box<[SharedString]>>,
    /// By label values, in the order they were first registered; never
    /// removed, so that a scrape can resume at an index after it let go of
    /// the lock.
    series: IndexMap<Box<[SharedString]>, Cell>,
}

#[derive(Clone)]
enum Cell {
    Counter(Arc<CounterCell>),
    Gauge(Arc<GaugeCell>),
    Histogram(Arc<HistogramCell>),
}

#[derive(Default)]
struct CounterCell(AtomicU64);

impl CounterFn for CounterCell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

/// An `f64`, as its bits.
#[derive(Default)]
struct GaugeCell(AtomicU64);

impl GaugeCell {
    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// Adds `value` to the `f64` whose bits `cell` holds.
fn add_f64(cell: &AtomicU64, value: f64) {
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let new = (f64::from_bits(current) + value).to_bits();
        match cell.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

impl GaugeFn for GaugeCell {
    fn increment(&self, value: f64) {
        add_f64(&self.0, value);
    }

    fn decrement(&self, value: f64) {
        add_f64(&self.0, -value);
    }

    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

struct HistogramCell {
    bounds: Arc<[f64]>,
    /// Per bucket, not cumulative; one more than `bounds`: above the last.
    counts: Box<[AtomicU64]>,
    /// The sum of the values, as `f64` bits.
    sum: AtomicU64,
}

impl HistogramCell {
    fn new(bounds: Arc<[f64]>) -> HistogramCell {
        HistogramCell {
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            bounds,
            sum: AtomicU64::new(0.0_f64.to_bits()),
        }
    }
}

impl HistogramFn for HistogramCell {
    /// Counts `value` in the first bucket whose bound is at least it. A NaN
    /// is dropped: it has no bucket, and would make the sum NaN for good.
    fn record(&self, value: f64) {
        if value.is_nan() {
            return;
        }
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        add_f64(&self.sum, value);
    }
}

/// Where a scrape is: the family it writes and the index of its next
/// series there (0: the family's `# HELP`/`# TYPE` lines are not written
/// yet).
#[derive(Default)]
struct Cursor {
    family: Option<String>,
    series: usize,
}

/// Whether a slice ended the page.
#[derive(Debug, PartialEq, Eq)]
enum Slice {
    More,
    Last,
}

impl Exposition {
    /// An empty registry whose histograms named in `buckets` count into
    /// those bounds (ascending), the others into [`DEFAULT_BUCKETS`].
    pub fn new(buckets: &[(&'static str, &[f64])]) -> Exposition {
        Exposition {
            registry: Arc::new(Registry {
                families: Mutex::new(BTreeMap::new()),
                buckets: buckets
                    .iter()
                    .map(|(name, bounds)| (*name, Arc::from(*bounds)))
                    .collect(),
            }),
        }
    }

    /// The page as a streamed body: each slice is written when the client
    /// is ready for it.
    #[cfg(feature = "metrics-server")]
    pub fn body(&self) -> axum::body::Body {
        let registry = self.registry.clone();
        let slices = futures_util::stream::unfold(Some(Cursor::default()), move |cursor| {
            let registry = registry.clone();
            async move {
                let mut cursor = cursor?;
                let mut text = Vec::with_capacity(SLICE + 4096);
                let next = match registry.write(&mut cursor, &mut text, SLICE) {
                    Slice::More => Some(cursor),
                    Slice::Last => None,
                };
                Some((Ok::<_, Infallible>(text), next))
            }
        });
        axum::body::Body::from_stream(slices)
    }

    /// The whole page at once, in slices of `limit` bytes or so, and how
    /// many slices.
    #[cfg(test)]
    pub(crate) fn page(&self, limit: usize) -> (String, usize) {
        let mut cursor = Cursor::default();
        let mut page = Vec::new();
        let mut slices = 0;
        loop {
            let mut text = Vec::new();
            let slice = self.registry.write(&mut cursor, &mut text, limit);
            page.extend_from_slice(&text);
            slices += 1;
            if slice == Slice::Last {
                let page = String::from_utf8(page).expect("the page is written from &str only");
                return (page, slices);
            }
        }
    }

    fn describe(&self, key: KeyName, kind: Kind, help: SharedString) {
        let mut families = self.registry.families();
        let family = families
            .entry(key.as_str().to_string())
            .or_insert_with(|| Family::new(kind));
        family.help = Some(help);
    }

    fn register(&self, key: &Key, kind: Kind) -> Option<Cell> {
        let mut families = self.registry.families();
        let family = match families.get_mut(key.name()) {
            Some(family) => family,
            None => families
                .entry(key.name().to_string())
                .or_insert_with(|| Family::new(kind)),
        };
        if family.kind != kind {
            return None;
        }
        let names = family
            .names
            .get_or_insert_with(|| key.labels().map(label_name).collect());
        if !names
            .iter()
            .map(|n| n.as_ref())
            .eq(key.labels().map(Label::key))
        {
            return None;
        }
        let values: Vec<SharedString> = key.labels().map(label_value).collect();
        if let Some(cell) = family.series.get(values.as_slice()) {
            return Some(cell.clone());
        }
        let cell = match kind {
            Kind::Counter => Cell::Counter(Arc::default()),
            Kind::Gauge => Cell::Gauge(Arc::default()),
            Kind::Histogram => Cell::Histogram(Arc::new(HistogramCell::new(
                self.registry.buckets_of(key.name()),
            ))),
        };
        family
            .series
            .insert(values.into_boxed_slice(), cell.clone());
        Some(cell)
    }
}

impl Family {
    fn new(kind: Kind) -> Family {
        Family {
            kind,
            help: None,
            names: None,
            series: IndexMap::new(),
        }
    }
}

impl Registry {
    fn families(&self) -> MutexGuard<'_, BTreeMap<String, Family>> {
        // The map is consistent between statements: a panic elsewhere
        // while it was held leaves nothing half-made.
        self.families.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn buckets_of(&self, name: &str) -> Arc<[f64]> {
        self.buckets
            .iter()
            .find(|(n, _)| *n == name)
            .map_or_else(|| Arc::from(&DEFAULT_BUCKETS[..]), |(_, b)| b.clone())
    }

    /// Writes the page from `cursor` on into `text` until it holds `limit`
    /// bytes or more (a series is never cut) or the page ends.
    fn write(&self, cursor: &mut Cursor, text: &mut Vec<u8>, limit: usize) -> Slice {
        let families = self.families();
        let from = match &cursor.family {
            None => Bound::Unbounded,
            Some(name) => Bound::Included(name.as_str()),
        };
        for (name, family) in families.range::<str, _>((from, Bound::Unbounded)) {
            if cursor.family.as_deref() != Some(name.as_str()) {
                cursor.family = Some(name.clone());
                cursor.series = 0;
            }
            if family.series.is_empty() {
                continue;
            }
            if cursor.series == 0 {
                write_header(text, name, family);
            }
            let names = family.names.as_deref().unwrap_or_default();
            while let Some((values, cell)) = family.series.get_index(cursor.series) {
                let labels = Labels { names, values };
                write_series(text, name, labels, cell);
                cursor.series += 1;
                if text.len() >= limit {
                    return Slice::More;
                }
            }
        }
        Slice::Last
    }
}

// Writing into a Vec<u8> cannot fail: the results of `write!` below are
// ignored for that reason.

/// A series' labels as the page writes them: its family's names, its values.
#[derive(Clone, Copy)]
struct Labels<'a> {
    names: &'a [SharedString],
    values: &'a [SharedString],
}

/// A label's name, as the family keeps it (shared, not copied, when it is).
fn label_name(label: &Label) -> SharedString {
    let (name, _) = label.clone().into_parts();
    name
}

/// A label's value, as a series keeps it (a job's name handed over as an
/// `Arc<str>` stays shared).
fn label_value(label: &Label) -> SharedString {
    let (_, value) = label.clone().into_parts();
    value
}

fn write_header(text: &mut Vec<u8>, name: &str, family: &Family) {
    if let Some(help) = &family.help {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(text, "# HELP {name} {help}");
    }
    let _ = writeln!(text, "# TYPE {name} {}", family.kind.as_str());
}

fn write_series(text: &mut Vec<u8>, name: &str, labels: Labels<'_>, cell: &Cell) {
    match cell {
        Cell::Counter(c) => {
            write_name(text, name, "", labels, None);
            let _ = writeln!(text, " {}", c.0.load(Ordering::Relaxed));
        }
        Cell::Gauge(g) => {
            write_name(text, name, "", labels, None);
            text.push(b' ');
            write_f64(text, g.get());
            text.push(b'\n');
        }
        Cell::Histogram(h) => {
            let mut seen = 0u64;
            for (bound, count) in h.bounds.iter().zip(h.counts.iter()) {
                seen += count.load(Ordering::Relaxed);
                write_name(text, name, "_bucket", labels, Some(*bound));
                let _ = writeln!(text, " {seen}");
            }
            if let Some(above) = h.counts.last() {
                seen += above.load(Ordering::Relaxed);
            }
            write_name(text, name, "_bucket", labels, Some(f64::INFINITY));
            let _ = writeln!(text, " {seen}");
            write_name(text, name, "_sum", labels, None);
            text.push(b' ');
            write_f64(text, f64::from_bits(h.sum.load(Ordering::Relaxed)));
            text.push(b'\n');
            write_name(text, name, "_count", labels, None);
            let _ = writeln!(text, " {seen}");
        }
    }
}

/// `name{a="x",b="y",le="0.5"}`, the braces left out when there is no label.
fn write_name(text: &mut Vec<u8>, name: &str, suffix: &str, labels: Labels<'_>, le: Option<f64>) {
    text.extend_from_slice(name.as_bytes());
    text.extend_from_slice(suffix.as_bytes());
    if labels.values.is_empty() && le.is_none() {
        return;
    }
    text.push(b'{');
    for (i, (key, value)) in labels.names.iter().zip(labels.values).enumerate() {
        if i > 0 {
            text.push(b',');
        }
        text.extend_from_slice(key.as_bytes());
        text.extend_from_slice(b"=\"");
        write_label_value(text, value);
        text.push(b'"');
    }
    if let Some(le) = le {
        if !labels.values.is_empty() {
            text.push(b',');
        }
        text.extend_from_slice(b"le=\"");
        write_f64(text, le);
        text.push(b'"');
    }
    text.push(b'}');
}

fn write_label_value(text: &mut Vec<u8>, value: &str) {
    for byte in value.bytes() {
        match byte {
            b'\\' => text.extend_from_slice(b"\\\\"),
            b'"' => text.extend_from_slice(b"\\\""),
            b'\n' => text.extend_from_slice(b"\\n"),
            b => text.push(b),
        }
    }
}

/// As Prometheus reads them: `+Inf`, `-Inf`, `NaN`, else Rust's shortest
/// decimal that reads back the same (`0.001`, `1`, `1732000000.5`).
fn write_f64(text: &mut Vec<u8>, value: f64) {
    if value.is_nan() {
        text.extend_from_slice(b"NaN");
    } else if value == f64::INFINITY {
        text.extend_from_slice(b"+Inf");
    } else if value == f64::NEG_INFINITY {
        text.extend_from_slice(b"-Inf");
    } else {
        let _ = write!(text, "{value}");
    }
}

impl Recorder for Exposition {
    fn describe_counter(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, Kind::Counter, description);
    }

    fn describe_gauge(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, Kind::Gauge, description);
    }

    fn describe_histogram(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, Kind::Histogram, description);
    }

    fn register_counter(&self, key: &Key, _metadata: &Metadata<'_>) -> Counter {
        match self.register(key, Kind::Counter) {
            Some(Cell::Counter(c)) => Counter::from_arc(c),
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, _metadata: &Metadata<'_>) -> Gauge {
        match self.register(key, Kind::Gauge) {
            Some(Cell::Gauge(g)) => Gauge::from_arc(g),
            _ => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, _metadata: &Metadata<'_>) -> Histogram {
        match self.register(key, Kind::Histogram) {
            Some(Cell::Histogram(h)) => Histogram::from_arc(h),
            _ => Histogram::noop(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition() -> Exposition {
        Exposition::new(&[("lateness_seconds", &[0.001, 0.01, 1.0])])
    }

    #[test]
    fn writes_each_kind_in_the_text_format() {
        let e = exposition();
        metrics::with_local_recorder(&e, || {
            metrics::describe_counter!("runs_total", "Runs.\nBy job \\ status.");
            let job: Arc<str> = Arc::from("nightly \"db\"");
            metrics::counter!("runs_total", "job" => job.clone(), "status" => "ok").increment(2);
            metrics::counter!("runs_total", "job" => job.clone(), "status" => "ok").increment(1);
            metrics::counter!("runs_total", "job" => "b", "status" => "failed").absolute(7);
            metrics::gauge!("held").set(3.0);
            metrics::gauge!("held").decrement(0.5);
            let lateness = metrics::histogram!("lateness_seconds", "job" => job);
            for v in [0.0005, 0.001, 0.002, 0.5, 3.0, f64::NAN] {
                lateness.record(v);
            }
            metrics::histogram!("other_seconds").record(0.2);
        });
        let (page, _) = e.page(usize::MAX);
        assert_eq!(
            page,
            "# TYPE held gauge\n\
             held 2.5\n\
             # TYPE lateness_seconds histogram\n\
             lateness_seconds_bucket{job=\"nightly \\\"db\\\"\",le=\"0.001\"} 2\n\
             lateness_seconds_bucket{job=\"nightly \\\"db\\\"\",le=\"0.01\"} 3\n\
             lateness_seconds_bucket{job=\"nightly \\\"db\\\"\",le=\"1\"} 4\n\
             lateness_seconds_bucket{job=\"nightly \\\"db\\\"\",le=\"+Inf\"} 5\n\
             lateness_seconds_sum{job=\"nightly \\\"db\\\"\"} 3.5035\n\
             lateness_seconds_count{job=\"nightly \\\"db\\\"\"} 5\n\
             # TYPE other_seconds histogram\n\
             other_seconds_bucket{le=\"0.005\"} 0\n\
             other_seconds_bucket{le=\"0.01\"} 0\n\
             other_seconds_bucket{le=\"0.025\"} 0\n\
             other_seconds_bucket{le=\"0.05\"} 0\n\
             other_seconds_bucket{le=\"0.1\"} 0\n\
             other_seconds_bucket{le=\"0.25\"} 1\n\
             other_seconds_bucket{le=\"0.5\"} 1\n\
             other_seconds_bucket{le=\"1\"} 1\n\
             other_seconds_bucket{le=\"2.5\"} 1\n\
             other_seconds_bucket{le=\"5\"} 1\n\
             other_seconds_bucket{le=\"10\"} 1\n\
             other_seconds_bucket{le=\"+Inf\"} 1\n\
             other_seconds_sum 0.2\n\
             other_seconds_count 1\n\
             # HELP runs_total Runs.\\nBy job \\\\ status.\n\
             # TYPE runs_total counter\n\
             runs_total{job=\"nightly \\\"db\\\"\",status=\"ok\"} 3\n\
             runs_total{job=\"b\",status=\"failed\"} 7\n"
        );
    }

    #[test]
    fn a_page_in_small_slices_is_the_page_whole() {
        let e = exposition();
        metrics::with_local_recorder(&e, || {
            metrics::describe_histogram!("lateness_seconds", "Lateness.");
            for job in 0..50 {
                let job: Arc<str> = Arc::from(format!("job-{job}"));
                metrics::counter!("claims_total", "job" => job.clone()).increment(1);
                metrics::histogram!("lateness_seconds", "job" => job).record(0.002);
            }
        });
        let (whole, one) = e.page(usize::MAX);
        assert_eq!(one, 1);
        let (sliced, slices) = e.page(1);
        assert_eq!(sliced, whole);
        // One series a slice, and a last slice that finds nothing more.
        assert_eq!(slices, 101);
        assert_eq!(whole.matches("# TYPE").count(), 2);
        assert_eq!(whole.matches("# HELP").count(), 1);
    }

    #[test]
    fn a_name_keeps_its_first_kind_and_a_described_family_without_series_is_not_written() {
        let e = exposition();
        metrics::with_local_recorder(&e, || {
            metrics::describe_gauge!("spooled", "Spooled.");
            metrics::counter!("both").increment(1);
            metrics::gauge!("both").set(5.0);
            metrics::histogram!("both").record(1.0);
        });
        assert_eq!(e.page(usize::MAX).0, "# TYPE both counter\nboth 1\n");
    }

    #[test]
    fn a_family_keeps_its_first_label_names_and_each_series_only_its_values() {
        let e = exposition();
        metrics::with_local_recorder(&e, || {
            let job: std::sync::Arc<str> = std::sync::Arc::from("draw");
            metrics::counter!("claims", "job" => job.clone(), "result" => "claimed").increment(2);
            metrics::counter!("claims", "job" => job, "result" => "taken").increment(1);
            // Other names, or another number of them: records nothing.
            metrics::counter!("claims", "result" => "claimed", "job" => "draw").increment(7);
            metrics::counter!("claims", "job" => "draw").increment(7);
        });
        assert_eq!(
            e.page(usize::MAX).0,
            "# TYPE claims counter\nclaims{job=\"draw\",result=\"claimed\"} 2\n\
             claims{job=\"draw\",result=\"taken\"} 1\n"
        );
    }

    #[test]
    fn handles_made_once_count_without_the_registry() {
        let e = exposition();
        let counter = metrics::with_local_recorder(&e, || metrics::counter!("c_total"));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let counter = counter.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        counter.increment(1);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("the counting threads do not panic");
        }
        assert_eq!(
            e.page(usize::MAX).0,
            "# TYPE c_total counter\nc_total 40000\n"
        );
    }
}
