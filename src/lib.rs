//! cronlease: scheduled work that runs exactly once per tick across every
//! instance of a service, coordinated through Redis.
//!
//! The same engine has two doors: the `cronlease` daemon (a TOML job table,
//! `cronlease run` on several hosts) and this library, for a Rust service
//! deployed as several instances:
//!
//! - **Jobs** ([`Cluster::scheduler`], [`JobBuilder`]): at each tick of a
//!   job's cron schedule the instances race for its claim, one wins and
//!   calls the job's async handler with a [`Run`] (tick, fence, stop
//!   signal) under a watchdog-renewed lease, and the outcome is recorded.
//!   Embedded jobs are replicas like the daemon's: `cronlease status`,
//!   `history`, `trigger`, `pause` and `resume` work on them unchanged.
//! - **Locks** ([`Cluster::lock`]): cluster-wide locks with a watchdog, a
//!   fencing token on every acquisition, a [`LockGuard::lost`] signal,
//!   reentrancy, waiting without polling, on one Redis or a quorum of
//!   independent masters.
//!
//! ```no_run
//! use std::time::Duration;
//! use cronlease::{Cluster, JobBuilder, Overlap, RedisSettings, Run};
//!
//! # async fn draw_winners(fence: u64) -> Result<(), std::io::Error> { Ok(()) }
//! # async fn migrate(fence: u64) {}
//! # async fn service() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = Cluster::connect(RedisSettings::url("redis://127.0.0.1:6379/0").key_prefix("shop")).await?;
//! let scheduler = cluster
//!     .scheduler()
//!     .job(
//!         JobBuilder::new("lottery-draw", "0 12 * * *")
//!             .timezone("Asia/Shanghai")
//!             .overlap(Overlap::Skip)
//!             .timeout(Duration::from_secs(300))
//!             .run(|run: Run| async move { draw_winners(run.fence()).await }),
//!     )
//!     .start()?;
//!
//! let guard = cluster.lock("nightly-migration").lease(Duration::from_secs(30)).acquire().await?;
//! tokio::select! {
//!     () = migrate(guard.fence()) => {}
//!     () = guard.lost() => eprintln!("lock lost: stop writing"),
//! }
//! guard.release().await?;
//! scheduler.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! `cronlease = "0.1"` is this library alone: no feature is on by default,
//! and none is needed to embed it. The features are the `cronlease`
//! binary's (its package, `cronlease-cli`, turns them on): `cli` (the command line,
//! `run_command_line`, and its log output), `process` (the daemon's
//! process runner: a job's `command` in its own process group),
//! `metrics-server` (`/metrics` served by a daemon replica), `dashboard`
//! (the web dashboard) and `systemd` (`Type=notify`, the watchdog).
//! Times are [`jiff`]'s ([`Run::tick`], [`LockHolder::since`]).
//! ARCHITECTURE.md maps the modules.

#![warn(missing_docs)]
// Without the command line, the operator side of the engine (what
// `status`, `history`, `pause` and `trigger` read and write) is compiled
// but unused by the library; dead code is checked in the default build.
#![cfg_attr(not(feature = "cli"), allow(dead_code, unused_imports))]

/// `as_str` (the name in the job table and in Redis) and `Display` for a
/// public enum of the job settings, with a doctest of every name.
macro_rules! enum_names {
    ($ty:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            /// The name used in the config file and in Redis (also what
            /// `Display` prints).
            ///
            /// ```
            #[doc = concat!("use cronlease::", stringify!($ty), ";")]
            $(#[doc = concat!("assert_eq!(", stringify!($ty), "::", stringify!($variant), ".as_str(), \"", $name, "\");")])*
            /// ```
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $name),* }
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

// The engine's modules: private to the crate, and public but hidden from
// the docs with the `internals` feature, which only this crate's own
// tests, examples and benchmarks enable. Declared one by one (not by a
// macro) so that rustfmt and every lint see each file.

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod calendar;
#[cfg(not(feature = "internals"))]
mod calendar;
#[cfg(feature = "cli")]
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod cli;
#[cfg(feature = "cli")]
#[cfg(not(feature = "internals"))]
mod cli;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod clock;
#[cfg(not(feature = "internals"))]
mod clock;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod config;
#[cfg(not(feature = "internals"))]
mod config;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod daemon;
#[cfg(not(feature = "internals"))]
mod daemon;
#[cfg(feature = "dashboard")]
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod dashboard;
#[cfg(feature = "dashboard")]
#[cfg(not(feature = "internals"))]
mod dashboard;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod embed;
#[cfg(not(feature = "internals"))]
mod embed;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod exit;
#[cfg(not(feature = "internals"))]
mod exit;
#[cfg(feature = "http-server")]
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod http;
#[cfg(feature = "http-server")]
#[cfg(not(feature = "internals"))]
mod http;
#[cfg(feature = "http-jobs")]
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod http_job;
#[cfg(feature = "http-jobs")]
#[cfg(not(feature = "internals"))]
mod http_job;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod inert;
#[cfg(not(feature = "internals"))]
mod inert;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod lease;
#[cfg(not(feature = "internals"))]
mod lease;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod link;
#[cfg(not(feature = "internals"))]
mod link;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod live;
#[cfg(not(feature = "internals"))]
mod live;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod lock;
#[cfg(not(feature = "internals"))]
mod lock;
#[cfg(feature = "cli")]
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod logging;
#[cfg(feature = "cli")]
#[cfg(not(feature = "internals"))]
mod logging;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod membership;
#[cfg(not(feature = "internals"))]
mod membership;
#[cfg(feature = "notify")]
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod notify;
#[cfg(feature = "notify")]
#[cfg(not(feature = "internals"))]
mod notify;
#[cfg(feature = "cli")]
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod operator;
#[cfg(feature = "cli")]
#[cfg(not(feature = "internals"))]
mod operator;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod outcome;
#[cfg(not(feature = "internals"))]
mod outcome;
#[cfg(feature = "process")]
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod runner;
#[cfg(feature = "process")]
#[cfg(not(feature = "internals"))]
mod runner;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod schedule;
#[cfg(not(feature = "internals"))]
mod schedule;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod spool;
#[cfg(not(feature = "internals"))]
mod spool;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod store;
#[cfg(not(feature = "internals"))]
mod store;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod task;
#[cfg(not(feature = "internals"))]
mod task;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod telemetry;
#[cfg(not(feature = "internals"))]
mod telemetry;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod trace;
#[cfg(not(feature = "internals"))]
mod trace;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod watchdog;
#[cfg(not(feature = "internals"))]
mod watchdog;

pub use calendar::{Calendar, CalendarError};
pub use config::{
    AfterOn, AfterParams, ConfigError, Join, Misfire, Mode, OnHolderLost, Overlap, ParamError,
    Problem,
};
#[cfg(feature = "notify")]
pub use config::{EventKind, SmtpTls};
pub use embed::{
    Cluster, ConnectionError, Job, JobBuilder, ParamSpec, RedisSettings, RefusedError, Run,
    RunOutput, Scheduler, SchedulerBuilder, SchedulerError,
};
#[cfg(feature = "tracing-layer")]
pub use live::layer::LiveOutputLayer;
pub use lock::{LockBuilder, LockError, LockGuard};
#[cfg(feature = "notify")]
pub use notify::Channel;
pub use outcome::{Trigger, Upstream, UpstreamRun};
pub use schedule::{DstGap, DstRepeat};
pub use store::LockHolder;
pub use task::Stop;

/// The `cronlease` command line: parses this process's arguments, runs the
/// command and returns its exit status (0 success, 1 failure, 2 usage or
/// config error, 75 temporary failure, 78 unsafe Redis settings; `cronlease
/// --help` lists the commands). The `cronlease` binary (package
/// `cronlease-cli`) is this function. With the `cli` feature.
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     cronlease::run_command_line()
/// }
/// ```
#[cfg(feature = "cli")]
pub fn run_command_line() -> std::process::ExitCode {
    use clap::Parser;
    cli::run(cli::Cli::parse()).into()
}
