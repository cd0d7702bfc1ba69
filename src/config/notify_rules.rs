//! When to notify: the events ([`EventKind`], [`EventSet`]), the rules of
//! `[daemon]` (the defaults, and the replica-level rule for
//! `replica_dead`) and of each job (`notify`, `notify_on`, `late_after`,
//! `expect_success_within`, `repeat_every`), resolved at load time into
//! [`DaemonNotify`] and [`NotifyRules`]. Evaluating them is the delivery
//! pipeline's part; here they are only read and checked.

use std::fmt;
use std::time::Duration;

use toml::Spanned;

use super::checker::{Checker, DurationValue, Given};

/// Something that happened to a job or a replica that a channel can be
/// told about: a name of `notify_on`.
///
/// [`JobBuilder::notify_on`](crate::JobBuilder::notify_on) takes them;
/// in a job table they are written as [`EventKind::as_str`] gives them.
///
/// ```
/// use cronlease::EventKind;
///
/// assert_eq!(EventKind::parse("lost_lease"), Some(EventKind::LostLease));
/// assert_eq!(EventKind::Failed.to_string(), "failed");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventKind {
    /// A run ended `failed` (after its last retry).
    Failed,
    /// A run ended `timeout` (after its last retry).
    Timeout,
    /// A run ended `ok` after one that failed or timed out.
    Recovered,
    /// A tick passed without a run (every replica or Redis away) and the
    /// misfire policy did not run it.
    Missed,
    /// A run was stopped because its lease passed to someone else.
    LostLease,
    /// A run's replica died before recording an outcome.
    Abandoned,
    /// A run started more than `late_after` after its tick.
    Late,
    /// No `ok` outcome for `expect_success_within` (the dead man's switch).
    Overdue,
    /// A replica stopped sending heartbeats: a rule of `[daemon]` only.
    ReplicaDead,
    /// What `cronlease notify test` sends: never asked for by a rule.
    Test,
}

enum_names!(EventKind {
    Failed => "failed",
    Timeout => "timeout",
    Recovered => "recovered",
    Missed => "missed",
    LostLease => "lost_lease",
    Abandoned => "abandoned",
    Late => "late",
    Overdue => "overdue",
    ReplicaDead => "replica_dead",
    Test => "test",
});

impl EventKind {
    /// The events a rule may ask for, in the order the docs list them.
    pub const RULES: [EventKind; 9] = [
        EventKind::Failed,
        EventKind::Timeout,
        EventKind::Recovered,
        EventKind::Missed,
        EventKind::LostLease,
        EventKind::Abandoned,
        EventKind::Late,
        EventKind::Overdue,
        EventKind::ReplicaDead,
    ];

    /// The event named `name` (as written in `notify_on`, or `"test"`).
    ///
    /// ```
    /// use cronlease::EventKind;
    /// assert_eq!(EventKind::parse("overdue"), Some(EventKind::Overdue));
    /// assert_eq!(EventKind::parse("fail"), None);
    /// ```
    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::RULES
            .into_iter()
            .chain([EventKind::Test])
            .find(|kind| kind.as_str() == name)
    }

    /// Its bit in an [`EventSet`].
    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of [`EventKind`]s (a job's or `[daemon]`'s `notify_on`): a
/// bitmask, so rules are `Copy` and a test of membership is one `and`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventSet(u16);

impl EventSet {
    /// No event.
    pub const fn empty() -> EventSet {
        EventSet(0)
    }

    /// What a job is told about when neither it nor `[daemon]` says:
    /// every event but `late` (which also needs `late_after`) and
    /// `replica_dead` (a replica's, not a job's).
    pub fn job_default() -> EventSet {
        EventKind::RULES
            .into_iter()
            .filter(|k| !matches!(k, EventKind::Late | EventKind::ReplicaDead))
            .collect()
    }

    /// `self` with `kind` in it.
    pub fn with(self, kind: EventKind) -> EventSet {
        EventSet(self.0 | kind.bit())
    }

    /// `self` without `kind`.
    pub fn without(self, kind: EventKind) -> EventSet {
        EventSet(self.0 & !kind.bit())
    }

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: EventKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// The events of the set, in [`EventKind::RULES`] order (then `test`).
    pub fn iter(self) -> impl Iterator<Item = EventKind> {
        EventKind::RULES
            .into_iter()
            .chain([EventKind::Test])
            .filter(move |kind| self.contains(*kind))
    }
}

impl FromIterator<EventKind> for EventSet {
    fn from_iter<I: IntoIterator<Item = EventKind>>(kinds: I) -> EventSet {
        kinds.into_iter().fold(EventSet::empty(), EventSet::with)
    }
}

// The names, not the bits: a job's definition hash reads its `Debug`.
impl fmt::Debug for EventSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(EventKind::as_str))
            .finish()
    }
}

/// The default of `repeat_every`: one reminder an hour while a job keeps
/// failing.
pub const DEFAULT_REPEAT_EVERY: Duration = Duration::from_secs(3600);

/// The default of `[daemon] retry_for`: how long one delivery is retried.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(3600);

/// The longest `late_after`, `repeat_every` and `retry_for`.
const MAX_RULE_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest `expect_success_within`: a yearly job's switch.
const MAX_EXPECT_SUCCESS: Duration = Duration::from_secs(400 * 24 * 3600);

/// A job's notification rules, `[daemon]`'s defaults resolved in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyRules {
    /// The channels (names of `[notify.<name>]` tables) its events go to;
    /// empty: none.
    pub channels: Vec<String>,
    /// The events its channels are told about (never `replica_dead`).
    pub on: EventSet,
    /// A run that starts later than this after its tick is `late`.
    pub late_after: Option<Duration>,
    /// No `ok` outcome for this long is `overdue`.
    pub expect_success_within: Option<Duration>,
    /// While the job keeps failing, at most one reminder per this.
    pub repeat_every: Duration,
}

impl Default for NotifyRules {
    fn default() -> NotifyRules {
        NotifyRules {
            channels: Vec::new(),
            on: EventSet::job_default(),
            late_after: None,
            expect_success_within: None,
            repeat_every: DEFAULT_REPEAT_EVERY,
        }
    }
}

/// `[daemon]`'s notification settings: the jobs' defaults, the
/// replica-level rule (`replica_dead`), and the delivery's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonNotify {
    /// `notify`: every job's channels unless it names its own, and the
    /// channels `replica_dead` goes to.
    pub channels: Vec<String>,
    /// `notify_on` as written; `None`: the default set.
    pub notify_on: Option<EventSet>,
    /// `late_after`: every job's unless it sets its own.
    pub late_after: Option<Duration>,
    /// `repeat_every`: every job's unless it sets its own.
    pub repeat_every: Duration,
    /// `retry_for`: how long one delivery is retried.
    pub retry_for: Duration,
    /// `dashboard_url`: the dashboard's external base URL (no trailing
    /// `/`), for links in messages.
    pub dashboard_url: Option<String>,
}

impl Default for DaemonNotify {
    fn default() -> DaemonNotify {
        DaemonNotify {
            channels: Vec::new(),
            notify_on: None,
            late_after: None,
            repeat_every: DEFAULT_REPEAT_EVERY,
            retry_for: DEFAULT_RETRY_FOR,
            dashboard_url: None,
        }
    }
}

impl DaemonNotify {
    /// The channels a dead replica is announced to: `notify`, when
    /// `notify_on` (written or by default) holds `replica_dead`.
    pub fn replica_dead_channels(&self) -> &[String] {
        let on = self
            .notify_on
            .unwrap_or_else(|| EventSet::job_default().with(EventKind::ReplicaDead));
        if on.contains(EventKind::ReplicaDead) {
            &self.channels
        } else {
            &[]
        }
    }

    /// The events of a job that says nothing itself, whose `late_after`
    /// (its own or this one) is `late_after`.
    fn job_events(&self, late_after: Option<Duration>) -> EventSet {
        match self.notify_on {
            Some(on) => on.without(EventKind::ReplicaDead),
            None if late_after.is_some() => EventSet::job_default().with(EventKind::Late),
            None => EventSet::job_default(),
        }
    }
}

/// What a job's rules are checked against: the channels defined and
/// `[daemon]`'s defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct NotifyContext {
    /// The names of the `[notify.<name>]` tables, sorted.
    pub(crate) channels: Vec<String>,
    pub(crate) defaults: DaemonNotify,
}

/// `[daemon]`'s rule settings as written.
pub(super) struct RawDaemonRules<'a> {
    pub(super) notify: Option<&'a Given<Vec<Given<String>>>>,
    pub(super) notify_on: Option<&'a Given<Vec<Given<String>>>>,
    pub(super) late_after: Option<&'a Spanned<String>>,
    pub(super) repeat_every: Option<&'a Spanned<String>>,
    pub(super) retry_for: Option<&'a Spanned<String>>,
    pub(super) dashboard_url: Option<&'a Spanned<String>>,
}

/// `[daemon]`'s rules: channels among `channels`, events by name, the
/// durations, and `late` only with a `late_after`.
pub(super) fn daemon_rules(
    checker: &mut Checker<'_>,
    raw: RawDaemonRules<'_>,
    channels: &[String],
) -> DaemonNotify {
    const S: &str = "daemon";
    let max = MAX_RULE_DURATION;
    let late_after = raw
        .late_after
        .map(|d| checker.duration(S, "late_after", Some(d), max, max));
    let notify_on = raw.notify_on.map(|on| {
        let set = events(checker, S, on);
        if set.contains(EventKind::Late) && late_after.is_none() {
            checker.problem(on.at(), Some(S), Some("notify_on"), LATE_NEEDS.into());
        }
        set
    });
    DaemonNotify {
        channels: channel_names(checker, S, raw.notify, channels),
        notify_on,
        late_after,
        // Zero: every failure of a streak is told.
        repeat_every: match raw.repeat_every {
            Some(text) if DurationValue::Written(text.get_ref().clone()).is_zero() => {
                Duration::ZERO
            }
            text => checker.duration(S, "repeat_every", text, DEFAULT_REPEAT_EVERY, max),
        },
        retry_for: checker.duration(S, "retry_for", raw.retry_for, DEFAULT_RETRY_FOR, max),
        dashboard_url: raw.dashboard_url.and_then(|url| {
            let text = url.get_ref().trim_end_matches('/');
            match http_url_problem(text) {
                None => Some(text.to_string()),
                Some(problem) => {
                    let message = format!("{problem}, such as \"https://cron.example.com\"");
                    checker.problem(Some(url.span()), Some(S), Some("dashboard_url"), message);
                    None
                }
            }
        }),
    }
}

const LATE_NEEDS: &str = "`late` needs `late_after` (a run starting that long after its tick is late): set late_after = \"5m\" here or in [daemon], or remove `late`";

/// A job's rule settings as given.
pub(super) struct RawJobRules<'a> {
    pub(super) notify: Option<&'a Given<Vec<Given<String>>>>,
    pub(super) notify_on: Option<&'a Given<Vec<Given<String>>>>,
    pub(super) late_after: Option<&'a Given<DurationValue>>,
    pub(super) expect_success_within: Option<&'a Given<DurationValue>>,
    pub(super) repeat_every: Option<&'a Given<DurationValue>>,
}

/// A job's rules, each setting over `[daemon]`'s default.
pub(super) fn job_rules(
    checker: &mut Checker<'_>,
    section: &str,
    raw: RawJobRules<'_>,
    context: &NotifyContext,
) -> NotifyRules {
    let defaults = &context.defaults;
    let max = MAX_RULE_DURATION;
    let late_after = match raw.late_after {
        Some(d) => Some(checker.duration_value(section, "late_after", Some(d), max, max)),
        None => defaults.late_after,
    };
    let expect_success_within = raw.expect_success_within.map(|d| {
        let max = MAX_EXPECT_SUCCESS;
        checker.duration_value(section, "expect_success_within", Some(d), max, max)
    });
    let on = match raw.notify_on {
        None => defaults.job_events(late_after),
        Some(given) => {
            let on = events(checker, section, given);
            let mut wrong = |message: &str| {
                checker.problem(given.at(), Some(section), Some("notify_on"), message.into());
            };
            if on.contains(EventKind::Late) && late_after.is_none() {
                wrong(LATE_NEEDS);
            }
            if on.contains(EventKind::Overdue) && expect_success_within.is_none() {
                wrong(
                    "`overdue` needs `expect_success_within` (how long the job may go without an `ok` outcome): set expect_success_within = \"1d\", or remove `overdue`",
                );
            }
            if on.contains(EventKind::ReplicaDead) {
                wrong(
                    "`replica_dead` is about replicas, not a job: it belongs in [daemon] notify_on (its channels are [daemon] notify)",
                );
            }
            on.without(EventKind::ReplicaDead)
        }
    };
    let channels = match raw.notify {
        Some(given) => channel_names(checker, section, Some(given), &context.channels),
        None => defaults.channels.clone(),
    };
    // Zero: every failure of a streak is told.
    let repeat_every = match raw.repeat_every {
        Some(given) if given.get().is_zero() => Duration::ZERO,
        given => checker.duration_value(section, "repeat_every", given, defaults.repeat_every, max),
    };
    NotifyRules {
        channels,
        on,
        late_after,
        expect_success_within,
        repeat_every,
    }
}

/// `notify_on`: the events named, each one a rule may ask for.
fn events(checker: &mut Checker<'_>, section: &str, given: &Given<Vec<Given<String>>>) -> EventSet {
    let mut set = EventSet::empty();
    for name in given.get() {
        match EventKind::parse(name.get()).filter(|k| *k != EventKind::Test) {
            Some(kind) => set = set.with(kind),
            None => {
                let names: Vec<&str> = EventKind::RULES.iter().map(|k| k.as_str()).collect();
                checker.problem(
                    name.at().or_else(|| given.at()),
                    Some(section),
                    Some("notify_on"),
                    format!(
                        "unknown event {:?}: expected one of {}",
                        name.get(),
                        names.join(", ")
                    ),
                );
            }
        }
    }
    set
}

/// `notify`: names of defined channels (`defined`), each once.
fn channel_names(
    checker: &mut Checker<'_>,
    section: &str,
    given: Option<&Given<Vec<Given<String>>>>,
    defined: &[String],
) -> Vec<String> {
    let Some(given) = given else {
        return Vec::new();
    };
    let mut names: Vec<String> = Vec::new();
    for name in given.get() {
        let at = name.at().or_else(|| given.at());
        if !defined.iter().any(|d| d == name.get()) {
            let expected = if defined.is_empty() {
                "no channel is defined: add a [notify.<name>] table".to_string()
            } else {
                format!(
                    "expected one of {} (the [notify.<name>] tables)",
                    defined.join(", ")
                )
            };
            let message = format!("unknown channel {:?}: {expected}", name.get());
            checker.problem(at, Some(section), Some("notify"), message);
        } else if names.contains(name.get()) {
            let message = format!("channel {:?} is listed twice", name.get());
            checker.problem(at, Some(section), Some("notify"), message);
        } else {
            names.push(name.get().clone());
        }
    }
    names
}

/// What is wrong with `text` as an http or https URL, if anything: a
/// scheme, a host, no spaces or control characters.
pub(super) fn http_url_problem(text: &str) -> Option<String> {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    let Some(rest) = rest else {
        return Some(format!(
            "invalid URL {text:?}: expected http:// or https://"
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    let host_name = if host.starts_with('[') {
        host.split(']')
            .next()
            .unwrap_or_default()
            .trim_start_matches('[')
    } else {
        host.split(':').next().unwrap_or_default()
    };
    if host_name.is_empty() {
        return Some(format!(
            "invalid URL {text:?}: expected a host after the scheme"
        ));
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!(
            "invalid URL {text:?}: it holds spaces or control characters"
        ));
    }
    None
}
