//! `cronlease kill`: a job's runs in flight, or one of them, stopped on
//! whichever replica holds them.

use clap::Args;

use super::{ConnectArgs, operator_command};
use crate::exit::Exit;
use crate::operator;

#[derive(Debug, Args)]
pub struct KillArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job.
    pub job: String,
    /// The run to stop; default: every run of the job in flight.
    pub run_id: Option<String>,
}

/// `cronlease kill`: prints a line per run asked to stop.
pub(super) fn kill(args: &KillArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        operator::require_job(&target.store, target.config.as_ref(), &args.job).await?;
        let who = operator::operator_identity();
        let asked = operator::kill(&target.store, &args.job, args.run_id.as_deref(), &who).await?;
        let mut out = String::new();
        for run_id in asked {
            out.push_str(&format!("{} {run_id}: kill asked by {who}\n", args.job));
        }
        Ok(out)
    })
}
