//! The integration tests: one binary (see ARCHITECTURE.md), one module per
//! area, all driving the real `cronlease` binary.

mod check;
mod daemon;
mod harness;
mod metrics;
mod operator;
mod support;
mod systemd;
mod topology;
mod why_croner;
