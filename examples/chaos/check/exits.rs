//! E: replicas that died by themselves, did not exit 0 on SIGTERM (or not
//! within the stop timeout, and were killed), or did not take a reload of a
//! valid config. The harness sees these as they happen (they are not in
//! any trace the jobs leave) and keeps them in `meta.json`; the checker
//! carries them into the report, where any one fails the run.

use super::Report;
use super::facts::Facts;

pub fn check_e(facts: &Facts, report: &mut Report) {
    report.e = facts.input.exit_problems.to_vec();
}
