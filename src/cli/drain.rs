//! `cronlease drain` and `cronlease undrain`: a replica out of the
//! rendezvous for a deploy, and back in.

use std::time::Duration;

use clap::Args;

use super::{ConnectArgs, Failure, operator_command, parse_cli_duration};
use crate::exit::Exit;
use crate::operator::{self, DrainWait};

#[derive(Debug, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The replica's id, as `cronlease status` lists it.
    pub replica: String,
    /// Return once the replica has no run in flight (its heartbeat says
    /// drained); exit 1 if it still has some after --timeout.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: how long to wait.
    #[arg(long, value_name = "D", default_value = "5m", value_parser = parse_cli_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct UndrainArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The replica's id, as `cronlease status` lists it.
    pub replica: String,
}

/// `cronlease drain`.
pub(super) fn drain(args: &DrainArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        let who = operator::operator_identity();
        let replica = &args.replica;
        let done = operator::drain(&target.store, replica, &who).await?;
        let said = if done.changed {
            format!(
                "{replica} drained by {who}: it claims nothing until `cronlease undrain {replica}`; its runs in flight go on\n"
            )
        } else {
            format!("{replica} was drained already (recorded again by {who})\n")
        };
        if !args.wait {
            return Ok(said);
        }
        match operator::wait_drained(&target.store, replica, args.timeout).await? {
            DrainWait::Drained => Ok(format!("{said}{replica} is drained: no run in flight\n")),
            DrainWait::Gone => Ok(format!(
                "{said}{replica} has no heartbeat record (not running): nothing in flight\n"
            )),
            DrainWait::Silent { last_seen_ms } => {
                print!("{said}");
                Err(Failure::Runtime(format!(
                    "{replica} went silent (last heartbeat at {}) before it said drained: its runs are swept by the others once its lease lapses",
                    chrono::DateTime::from_timestamp_millis(last_seen_ms)
                        .unwrap_or_default()
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                )))
            }
            DrainWait::TimedOut { runs } => {
                print!("{said}");
                let list: Vec<String> = runs
                    .iter()
                    .map(|run| format!("{} {}", run.job, run.run_id))
                    .collect();
                Err(Failure::Runtime(format!(
                    "{replica} still has {} run(s) in flight after {}: {} (it stays drained; wait longer with --timeout, or see `cronlease status`)",
                    runs.len(),
                    humantime::format_duration(args.timeout),
                    list.join(", ")
                )))
            }
        }
    })
}

/// `cronlease undrain`.
pub(super) fn undrain(args: &UndrainArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        let who = operator::operator_identity();
        let replica = &args.replica;
        let done = operator::undrain(&target.store, replica, &who).await?;
        Ok(if done.changed {
            format!("{replica} undrained by {who}: it claims again\n")
        } else {
            format!("{replica} was not drained (recorded by {who})\n")
        })
    })
}
