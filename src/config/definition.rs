//! What a job's definition hashes to (replicas that disagree show as
//! drift), and its next tick.

use chrono::{DateTime, Utc};

use super::{Job, Leftovers, Limits, NotifyRules};

impl Job {
    /// The first tick of the job's schedule strictly after `after`; None
    /// when it has no more, or no schedule (it only follows other jobs).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.as_ref()?.next_after(after)
    }

    /// Why the job's calendars leave out the tick at `tick_ms` (ms since
    /// the epoch), if they do: the `exclude` calendar holding it, or the
    /// `only` calendars when none holds it. None for a job without
    /// calendars. A pure function of the tick: every replica with the
    /// same calendars answers alike.
    pub fn excluded_by(&self, tick_ms: i64) -> Option<crate::calendar::Exclusion> {
        if self.calendars.is_empty() {
            return None;
        }
        self.calendars.excluded_by(tick_ms)
    }

    /// A hash of the whole definition (FNV-1a of its debug form, so the same
    /// binary on every host computes the same value). Replicas publish it in
    /// their heartbeat; `cronlease status` names those that differ (drift).
    pub fn definition_hash(&self) -> String {
        // A setting added after the first release counts only when set, so
        // replicas of two releases agree on the jobs that do not use it.
        let mut text = format!("{self:?}");
        // The schedule as it was hashed before a job could go without one.
        if let Some(schedule) = &self.schedule {
            text = text.replacen(
                &format!("schedule: Some({schedule:?})"),
                &format!("schedule: {schedule:?}"),
                1,
            );
        }
        if self.max_runs.is_none() {
            text = text.replacen(", max_runs: None", "", 1);
        }
        if self.params.is_empty() {
            text = text.replace(", params: Params({})", "");
        }
        if self.after.is_none() && self.followers.is_empty() {
            text = text.replacen(", after: None, followers: []", "", 1);
        }
        if self.leftovers == Leftovers::default() {
            text = text.replace(", leftovers: Kill", "");
        }
        if self.limits == Limits::default() {
            text = text.replace(
                ", limits: Limits { memory_max_bytes: None, cpu_max_percent: None, tasks_max: None }",
                "",
            );
        }
        if self.notify == NotifyRules::default() {
            text = text.replace(&format!(", notify: {:?}", NotifyRules::default()), "");
        }
        if self.calendars.is_empty() {
            text = text.replace(", calendars: JobCalendars { exclude: [], only: [] }", "");
        }
        if self.run_on.is_empty() {
            text = text.replacen(", run_on: []", "", 1);
        }
        if self.mode == super::Mode::One {
            text = text.replacen(", mode: One", "", 1);
        }
        if self.group.is_none() {
            text = text.replacen(", group: None", "", 1);
        }
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in text.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{hash:016x}")
    }
}
