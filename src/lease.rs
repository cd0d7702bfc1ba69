//! The lease keeper: renews the leases this process holds in Redis, and
//! tells a holder at once when its lease can no longer be proven. The
//! daemon's runs ([`crate::watchdog`]) and the library's locks
//! (`lock/keeper.rs`) are its two users.
//!
//! A hold is added and taken out of the keeper's table directly, under a
//! `std` mutex never held across an `.await`: no message and no wait on
//! the keeper's task per hold, which at thousands of runs a second would
//! be thousands of context switches. The table orders the holds' next
//! renewals and their deadlines, so the earliest of each is known without
//! a look at every hold: planning costs the same at 10 holds and 10,000.
//!
//! Each hold is renewed every third of its own lease. When one is due,
//! the others that are nearly due go along in the same pipeline: a hold
//! never renewed yet if it is due within its first period (so holds taken
//! at different moments fall into step, and a replica's runs, which share
//! one lease, are renewed together once a period), and a renewed one if
//! it is due within half its period. A renewal that says the lease is no
//! longer ours loses the hold; one already taken out meanwhile (released:
//! the release deletes the lease) is left alone. When Redis does not
//! answer, the holds of the round are retried sooner; when a hold's local
//! deadline — the monotonic instant its last successful renewal (or its
//! acquisition) was *sent*, plus the lease, minus a fifth of it — passes,
//! the hold is lost: by then the lease may have lapsed in Redis and
//! someone else may hold it.
//!
//! What a user supplies is a [`Leases`]: how a round is sent to Redis,
//! how a holder is told it lost, and what names a hold in logs and
//! metrics. The keeper's task is [`Keeper::run`], until a cancellation
//! token: the daemon runs it as one of its background tasks, the library
//! spawns it with its first lock and cancels it with its last handle.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::store::{Renewed, StoreError};
use crate::telemetry;

/// Fraction of the lease kept as a safety margin before the local
/// deadline: clock drift between this host and Redis, and the time a
/// renewal spends on its way, fit in it.
const MARGIN_DIVISOR: u32 = 5;

/// A hold is renewed every `lease / RENEW_DIVISOR`: two renewals can fail
/// before its deadline.
const RENEW_DIVISOR: u32 = 3;

/// A renewed hold goes along with a round when it is due within
/// `lease / BATCH_DIVISOR` (half a period): early enough to share the
/// pipeline, late enough not to be renewed twice as often as it needs.
const BATCH_DIVISOR: u32 = 6;

/// After a Redis error the round's holds are retried after
/// `lease / BATCH_DIVISOR`, and at most after this.
const RETRY_AT_MOST: Duration = Duration::from_secs(1);

/// What differs between the keeper's users: the renewal script, how a
/// holder learns it lost, and what names a hold.
pub(crate) trait Leases: Send + Sync + 'static {
    /// One hold: its names, and the way to tell its holder.
    type Hold: Send + 'static;
    /// What a round sends for one hold, taken out of the table so that
    /// the table's mutex is not held across the round trip.
    type Renewal: Send + Sync + 'static;

    /// The renewal of `hold`, whose lease is `lease`.
    fn renewal(&self, hold: &Self::Hold, lease: Duration) -> Self::Renewal;

    /// Renews `renewals` in one pipeline: what each said (held, and then
    /// the lease runs a whole lease again; held with a kill asked; lost).
    fn renew(
        &self,
        renewals: &[Self::Renewal],
    ) -> impl Future<Output = Result<Vec<Renewed>, StoreError>> + Send;

    /// Tells `hold`'s holder that its lease can no longer be proven.
    fn lose(hold: &Self::Hold);

    /// Tells `hold`'s holder that an operator asked for its work to stop
    /// (its lease is still held). Nothing, for the users that are never
    /// asked.
    fn kill(hold: &Self::Hold) {
        let _ = hold;
    }

    /// The `job` label of `hold` on the lost leases counter.
    fn label(hold: &Self::Hold) -> String;

    /// Logs `event` about `hold`, with the fields that name it.
    fn log(hold: &Self::Hold, event: Event<'_>);

    /// The table now has `holds` holds (a gauge, for the users that keep
    /// one).
    fn count_held(&self, holds: usize) {
        let _ = holds;
    }
}

/// What happened to a hold, for [`Leases::log`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event<'a> {
    /// A renewal said the lease is still ours.
    Renewed,
    /// A renewal said the lease is no longer ours; the hold is lost.
    Lost,
    /// No renewal got through before the local deadline; the hold is lost.
    Expired,
    /// Redis did not answer the renewal; it is tried again soon.
    Retrying(&'a StoreError),
}

/// A hold in the keeper's table: what takes it out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HoldId(u64);

/// The keeper of one user's leases; cheap to clone. Its task is
/// [`Keeper::run`].
pub(crate) struct Keeper<U: Leases> {
    shared: Arc<Shared<U>>,
}

impl<U: Leases> Clone for Keeper<U> {
    fn clone(&self) -> Self {
        Keeper {
            shared: self.shared.clone(),
        }
    }
}

/// What the handles and the task share.
struct Shared<U: Leases> {
    user: U,
    table: Mutex<Table<U::Hold>>,
    /// Wakes the task to plan again: a hold due before it meant to wake.
    wake: Notify,
}

/// One renewal round: the holds it renews and what it sends for them.
struct Round<R> {
    ids: Vec<HoldId>,
    renewals: Vec<R>,
}

impl<U: Leases> Keeper<U> {
    /// A keeper with an empty table; nothing is renewed until
    /// [`Keeper::run`] runs.
    pub(crate) fn new(user: U) -> Keeper<U> {
        Keeper {
            shared: Arc::new(Shared {
                user,
                table: Mutex::new(Table::default()),
                wake: Notify::new(),
            }),
        }
    }

    /// The user this keeper renews for.
    pub(crate) fn user(&self) -> &U {
        &self.shared.user
    }

    /// Keeps `hold`'s lease alive from now on, until [`Keeper::release`].
    /// The lease is valid for at least `lease` from `valid_from`, when
    /// the acquisition that created it was sent.
    pub(crate) fn hold(&self, hold: U::Hold, lease: Duration, valid_from: Instant) -> HoldId {
        let mut table = self.table();
        let id = table.insert(hold, lease, valid_from);
        self.shared.user.count_held(table.len());
        let earliest = table.holds.get(&id.0).map(Held::earliest);
        if table.wake_at.is_none_or(|wake_at| earliest < Some(wake_at)) {
            // Wake the task to plan again (a permit is kept if it is busy).
            table.wake_at = earliest;
            self.shared.wake.notify_one();
        }
        id
    }

    /// Renews hold `id` no more (its run ended, its lock was released or
    /// dropped). A renewal already on its way that finds the lease gone
    /// (a release deletes it) is then not taken for a loss.
    pub(crate) fn release(&self, id: HoldId) {
        let mut table = self.table();
        if table.remove(id).is_some() {
            self.shared.user.count_held(table.len());
        }
    }

    /// `f` of every hold, in no particular order.
    pub(crate) fn map_holds<T>(&self, f: impl FnMut(&U::Hold) -> T) -> Vec<T> {
        self.table()
            .holds
            .values()
            .map(|h| &h.hold)
            .map(f)
            .collect()
    }

    fn table(&self) -> MutexGuard<'_, Table<U::Hold>> {
        // Every change to the table is made whole under the lock: a panic
        // elsewhere while it was held leaves nothing half-done.
        self.shared
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The keeper's task, until `cancel`: loses the holds past their
    /// deadline, renews those due, and sleeps until the next of either
    /// (or a hold due sooner).
    pub(crate) async fn run(self, cancel: CancellationToken) {
        loop {
            let now = Instant::now();
            let (round, wake_at) = self.plan(now);
            if let Some(round) = round {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = self.renew(round) => {}
                }
                continue;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.shared.wake.notified() => {}
                () = sleep_until(wake_at.unwrap_or(now)), if wake_at.is_some() => {}
            }
        }
    }

    /// Loses what is past its deadline (a stalled process wakes up late:
    /// deadlines are checked before any renewal is trusted), then the
    /// round due now, if any, and when to wake next.
    fn plan(&self, now: Instant) -> (Option<Round<U::Renewal>>, Option<Instant>) {
        let mut table = self.table();
        self.expire(&mut table, now);
        let ids = table.due(now);
        let wake_at = table.next_wake();
        table.wake_at = wake_at;
        if ids.is_empty() {
            return (None, wake_at);
        }
        let renewals = ids
            .iter()
            .filter_map(|id| table.holds.get(&id.0))
            .map(|h| self.shared.user.renewal(&h.hold, h.lease))
            .collect();
        (Some(Round { ids, renewals }), wake_at)
    }

    /// Loses every hold whose local deadline is `now` or earlier.
    fn expire(&self, table: &mut Table<U::Hold>, now: Instant) {
        let before = table.len();
        while let Some(held) = table.pop_expired(now) {
            U::log(&held.hold, Event::Expired);
            metrics::counter!(telemetry::LOST_LEASES, "job" => U::label(&held.hold)).increment(1);
            U::lose(&held.hold);
        }
        if table.len() != before {
            self.shared.user.count_held(table.len());
        }
    }

    /// Sends `round` in one pipeline and records the answer: a renewed
    /// hold's next renewal and deadline move on from the send time, a hold
    /// whose lease is no longer ours is lost, and after an error the
    /// round's holds are retried sooner than their period. Holds taken out
    /// while the round was on its way are no longer in the table: what
    /// Redis said of them is moot.
    async fn renew(&self, round: Round<U::Renewal>) {
        let sent = Instant::now();
        let answer = self.shared.user.renew(&round.renewals).await;
        let mut table = self.table();
        match answer {
            Ok(said) => {
                for (&id, said) in round.ids.iter().zip(said) {
                    match said {
                        Renewed::Held => {
                            note_renewed::<U>(&mut table, id, sent);
                        }
                        Renewed::KillAsked => {
                            if let Some(hold) = note_renewed::<U>(&mut table, id, sent) {
                                U::kill(hold);
                            }
                        }
                        Renewed::Lost => note_lost::<U>(&mut table, id),
                    }
                }
                self.shared.user.count_held(table.len());
            }
            Err(error) => {
                metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "error")
                    .increment(round.ids.len() as u64);
                metrics::counter!(telemetry::REDIS_ERRORS).increment(1);
                let now = Instant::now();
                for &id in &round.ids {
                    if let Some(hold) = table.retry(id, now) {
                        U::log(hold, Event::Retrying(&error));
                    }
                }
            }
        }
    }
}

/// Hold `id`'s renewal, sent at `sent`, said the lease is still ours;
/// returns the hold, when still in the table.
fn note_renewed<U: Leases>(
    table: &mut Table<U::Hold>,
    id: HoldId,
    sent: Instant,
) -> Option<&U::Hold> {
    let hold = table.renewed(id, sent)?;
    metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "ok").increment(1);
    U::log(hold, Event::Renewed);
    Some(hold)
}

/// Hold `id`'s renewal said the lease is no longer ours: its holder is
/// told.
fn note_lost<U: Leases>(table: &mut Table<U::Hold>, id: HoldId) {
    if let Some(held) = table.remove(id) {
        metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "lost").increment(1);
        metrics::counter!(telemetry::LOST_LEASES, "job" => U::label(&held.hold)).increment(1);
        U::log(&held.hold, Event::Lost);
        U::lose(&held.hold);
    }
}

/// Whether a hold has been renewed yet: it decides how early the hold
/// goes along with a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Not renewed since its acquisition: joins any round within its
    /// first period.
    Fresh,
    /// Renewed at least once: joins a round within half its period.
    Renewed,
}

/// One hold in the table.
struct Held<H> {
    hold: H,
    lease: Duration,
    /// When it is due for renewal (a key in `Table::renewals`).
    next_renewal: Instant,
    /// It is lost at this instant unless a renewal succeeds first (a key
    /// in `Table::deadlines`).
    deadline: Instant,
    stage: Stage,
}

impl<H> Held<H> {
    /// The first instant the task has to wake for this hold.
    fn earliest(&self) -> Instant {
        self.next_renewal.min(self.deadline)
    }

    /// How long before its due time it goes along with a round.
    fn window(&self) -> Duration {
        match self.stage {
            Stage::Fresh => self.lease / RENEW_DIVISOR,
            Stage::Renewed => self.lease / BATCH_DIVISOR,
        }
    }
}

/// The holds by id, and their next renewals and deadlines in order (the
/// id after the instant tells holds due at the same instant apart).
struct Table<H> {
    holds: HashMap<u64, Held<H>>,
    renewals: BTreeSet<(Instant, u64)>,
    deadlines: BTreeSet<(Instant, u64)>,
    next_id: u64,
    /// The longest lease ever held: no hold goes along with a round from
    /// further than a period of it.
    longest_lease: Duration,
    /// When the task next wakes by itself; `None` while it waits for
    /// holds, or until it first plans.
    wake_at: Option<Instant>,
}

impl<H> Default for Table<H> {
    fn default() -> Self {
        Table {
            holds: HashMap::new(),
            renewals: BTreeSet::new(),
            deadlines: BTreeSet::new(),
            next_id: 0,
            longest_lease: Duration::ZERO,
            wake_at: None,
        }
    }
}

impl<H> Table<H> {
    fn insert(&mut self, hold: H, lease: Duration, valid_from: Instant) -> HoldId {
        let id = self.next_id;
        self.next_id += 1;
        let held = Held {
            hold,
            lease,
            next_renewal: valid_from + lease / RENEW_DIVISOR,
            deadline: valid_from + lease - lease / MARGIN_DIVISOR,
            stage: Stage::Fresh,
        };
        self.renewals.insert((held.next_renewal, id));
        self.deadlines.insert((held.deadline, id));
        self.longest_lease = self.longest_lease.max(lease);
        self.holds.insert(id, held);
        HoldId(id)
    }

    fn remove(&mut self, id: HoldId) -> Option<Held<H>> {
        let held = self.holds.remove(&id.0)?;
        self.renewals.remove(&(held.next_renewal, id.0));
        self.deadlines.remove(&(held.deadline, id.0));
        Some(held)
    }

    /// Hold `id`'s renewal sent at `sent` succeeded: its next renewal and
    /// deadline move on from then. `None` if it was taken out meanwhile.
    fn renewed(&mut self, id: HoldId, sent: Instant) -> Option<&H> {
        let held = self.holds.get_mut(&id.0)?;
        held.stage = Stage::Renewed;
        let deadline = sent + held.lease - held.lease / MARGIN_DIVISOR;
        self.deadlines.remove(&(held.deadline, id.0));
        self.deadlines.insert((deadline, id.0));
        held.deadline = deadline;
        let next_renewal = sent + held.lease / RENEW_DIVISOR;
        self.renewals.remove(&(held.next_renewal, id.0));
        self.renewals.insert((next_renewal, id.0));
        held.next_renewal = next_renewal;
        Some(&held.hold)
    }

    /// Hold `id`'s renewal failed at `now`: it is tried again sooner than
    /// its period; its deadline stays. `None` if it was taken out.
    fn retry(&mut self, id: HoldId, now: Instant) -> Option<&H> {
        let held = self.holds.get_mut(&id.0)?;
        let next_renewal = now + (held.lease / BATCH_DIVISOR).min(RETRY_AT_MOST);
        self.renewals.remove(&(held.next_renewal, id.0));
        self.renewals.insert((next_renewal, id.0));
        held.next_renewal = next_renewal;
        Some(&held.hold)
    }

    /// A hold whose deadline is `now` or earlier, taken out of the table.
    fn pop_expired(&mut self, now: Instant) -> Option<Held<H>> {
        let &(deadline, id) = self.deadlines.first()?;
        if deadline > now {
            return None;
        }
        self.remove(HoldId(id))
    }

    /// The holds to renew now, in the order they are due: none unless one
    /// is due, and then also those nearly due ([`Held::window`]).
    fn due(&self, now: Instant) -> Vec<HoldId> {
        if self.renewals.first().is_none_or(|&(at, _)| at > now) {
            return Vec::new();
        }
        let horizon = now + self.longest_lease / RENEW_DIVISOR;
        self.renewals
            .range(..=(horizon, u64::MAX))
            .filter(|&&(at, id)| {
                self.holds
                    .get(&id)
                    .is_some_and(|held| at <= now + held.window())
            })
            .map(|&(_, id)| HoldId(id))
            .collect()
    }

    /// When the task has to wake next: the earliest renewal or deadline.
    fn next_wake(&self) -> Option<Instant> {
        let renewal = self.renewals.first().map(|&(at, _)| at);
        let deadline = self.deadlines.first().map(|&(at, _)| at);
        match (renewal, deadline) {
            (Some(r), Some(d)) => Some(r.min(d)),
            (r, d) => r.or(d),
        }
    }

    fn len(&self) -> usize {
        self.holds.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// With a lease of 5 s, a hold's deadline is 4 s after `valid_from`.
    const LEASE: Duration = Duration::from_secs(5);

    /// A hold of [`LEASE`] whose deadline is `deadline`.
    fn hold_until(
        table: &mut Table<&'static str>,
        name: &'static str,
        deadline: Instant,
    ) -> HoldId {
        table.insert(name, LEASE, deadline - 4 * S)
    }

    fn expired(table: &mut Table<&'static str>, now: Instant) -> Vec<&'static str> {
        std::iter::from_fn(|| table.pop_expired(now))
            .map(|h| h.hold)
            .collect()
    }

    fn names(table: &Table<&'static str>, ids: &[HoldId]) -> Vec<&'static str> {
        ids.iter().map(|id| table.holds[&id.0].hold).collect()
    }

    #[test]
    fn holds_expire_in_deadline_order_and_a_released_one_never() {
        let t0 = Instant::now() + 10 * S;
        let mut table = Table::default();
        hold_until(&mut table, "late", t0 + 3 * S);
        hold_until(&mut table, "early", t0 + S);
        hold_until(&mut table, "same", t0 + S);
        let gone = hold_until(&mut table, "gone", t0);
        assert_eq!(table.remove(gone).map(|h| h.hold), Some("gone"));
        assert_eq!(table.deadlines.first().map(|d| d.0), Some(t0 + S));
        assert!(expired(&mut table, t0).is_empty());
        assert_eq!(expired(&mut table, t0 + 2 * S), ["early", "same"]);
        assert_eq!(table.len(), 1);
        assert_eq!(table.deadlines.first().map(|d| d.0), Some(t0 + 3 * S));
        assert_eq!(table.renewals.len(), 1);
    }

    #[test]
    fn a_renewal_moves_the_deadline_and_the_next_renewal() {
        let t0 = Instant::now() + 10 * S;
        let mut table = Table::default();
        let a = hold_until(&mut table, "a", t0 + S);
        hold_until(&mut table, "b", t0 + 2 * S);
        assert_eq!(table.renewed(a, t0 + 2 * S), Some(&"a"));
        assert_eq!(table.renewed(HoldId(99), t0), None);
        assert_eq!(table.holds[&a.0].deadline, t0 + 6 * S);
        assert_eq!(table.holds[&a.0].next_renewal, t0 + 2 * S + LEASE / 3);
        assert_eq!(table.deadlines.len(), 2);
        assert_eq!(table.renewals.len(), 2);
        assert_eq!(expired(&mut table, t0 + 5 * S), ["b"]);
        assert_eq!(expired(&mut table, t0 + 6 * S), ["a"]);
        assert_eq!(table.len(), 0);
        assert!(table.renewals.is_empty());
        assert_eq!(table.next_wake(), None);
    }

    #[test]
    fn a_failed_renewal_is_retried_sooner_and_keeps_its_deadline() {
        let t0 = Instant::now();
        let mut table = Table::default();
        let short = table.insert("short", 3 * S, t0);
        let long = table.insert("long", 60 * S, t0);
        table.retry(short, t0 + S);
        table.retry(long, t0 + S);
        assert_eq!(table.holds[&short.0].next_renewal, t0 + S + S / 2);
        assert_eq!(table.holds[&long.0].next_renewal, t0 + 2 * S);
        assert_eq!(table.holds[&short.0].deadline, t0 + 3 * S - 3 * S / 5);
        assert_eq!(table.next_wake(), Some(t0 + S + S / 2));
    }

    /// Holds with different leases: a round starts when one is due; a
    /// fresh hold goes along within its first period, a renewed one within
    /// half its period, and a hold due later than that waits.
    #[test]
    fn a_round_takes_the_holds_nearly_due_each_by_its_own_lease() {
        let t0 = Instant::now();
        let mut table = Table::default();
        let short = table.insert("short", 3 * S, t0); // due t0 + 1 s
        let long = table.insert("long", 30 * S, t0); // due t0 + 10 s, fresh
        let later = table.insert("later", 30 * S, t0 + 5 * S); // due t0 + 15 s
        assert!(table.due(t0 + S / 2).is_empty());
        assert_eq!(names(&table, &table.due(t0 + S)), ["short", "long"]);
        table.renewed(short, t0 + S); // due t0 + 2 s
        table.renewed(long, t0 + S); // due t0 + 11 s, now within 5 s only
        assert_eq!(names(&table, &table.due(t0 + 2 * S)), ["short"]);
        table.renewed(short, t0 + 2 * S);
        table.renewed(later, t0 + 2 * S); // due t0 + 12 s
        // At t0 + 6 s `short` is due and `long` (t0 + 11 s) is within
        // 5 s of it; `later` (t0 + 12 s) is not, until a second after.
        assert_eq!(names(&table, &table.due(t0 + 6 * S)), ["short", "long"]);
        assert_eq!(
            names(&table, &table.due(t0 + 7 * S)),
            ["short", "long", "later"]
        );
        assert_eq!(table.next_wake(), Some(t0 + 3 * S));
    }
}
