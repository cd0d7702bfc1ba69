//! cronlease: a replicated cron daemon in which every tick of every job runs
//! exactly once across all replicas, coordinated through Redis.
//!
//! The modules, in reading order (ARCHITECTURE.md has the full map):
//! [`schedule`] turns cron expressions into UTC instants, [`config`] loads and
//! validates the job table, [`outcome`] is the record that ends a run,
//! [`store`] is the Redis side (keys and scripts), [`runner`] runs commands,
//! and [`cli`] is the command line on top.

#[cfg(feature = "cli")]
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod embed;
pub mod exit;
pub mod link;
pub mod lock;
#[cfg(feature = "cli")]
pub mod logging;
pub mod membership;
pub mod operator;
pub mod outcome;
pub mod runner;
pub mod schedule;
pub mod spool;
pub mod store;
pub mod task;
pub mod telemetry;
pub mod watchdog;
