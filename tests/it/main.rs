//! The integration tests: one binary (see ARCHITECTURE.md), one module per
//! area, all driving the real `cronlease` binary except `quorum`, which
//! drives the library's `Store` (the quorum protocol, answer by answer), and
//! `engine`, which runs replicas in process through `daemon::run` with
//! in-process tasks. `embedded_processes` runs the library's schedulers and
//! locks in processes of their own: this binary started again, each copy
//! running one hidden test (`support::TestChild`). `dashboard` looks at the
//! replicas' dashboards in a headless Chromium (`support::Browser`).

mod access;
mod ahead;
mod api;
mod backfill;
mod batching;
mod bounds;
mod calendars;
mod capacity;
mod chains;
mod check;
mod containment;
mod cron_differential;
mod cron_reference;
mod daemon;
mod dashboard;
mod drain;
mod embedded;
mod embedded_processes;
mod engine;
mod explain;
mod flood;
mod forged;
mod guide;
mod harness;
mod hostile;
mod http_jobs;
mod kill;
mod live_output;
mod locks;
mod manual;
mod metrics;
mod notify_channels;
mod notify_delivery;
mod notify_events;
mod operator;
mod params;
mod pauses;
mod pid_one;
mod placement;
mod properties;
mod quorum;
mod roles;
mod run_env;
mod spool;
mod sso;
mod state_loss;
mod support;
mod systemd;
mod tidy;
mod timetable;
mod topology;
mod traces;
mod why_own_schedule;
