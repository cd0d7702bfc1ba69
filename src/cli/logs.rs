//! `cronlease logs`: a run's output while it runs, from any host.

use std::io::Write as _;

use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use super::{ConnectArgs, Failure, operator_command};
use crate::exit::Exit;
use crate::inert::escape;
use crate::operator::{self, Follow, LiveEnd};
use crate::store::LiveEntry;

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job.
    pub job: String,
    /// The run (its id, as `status` and `history` show it); default: the
    /// job's newest run in flight, else its last run if it ended within
    /// the last minute.
    #[arg(long = "run", value_name = "RUN_ID")]
    pub run_id: Option<String>,
    /// Print the lines as they come until the run ends (Ctrl-C stops).
    #[arg(long, short)]
    pub follow: bool,
}

/// `cronlease logs`: the lines (stderr's and cronlease's marked), control
/// characters escaped. Exits 0; 1 when the run was not found or, followed,
/// went away without its end.
pub(super) fn logs(args: &LogsArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        operator::require_job(&target.store, target.config.as_ref(), &args.job).await?;
        let run_id = operator::live_run(&target.store, &args.job, args.run_id.as_deref()).await?;
        let follow = if args.follow {
            Follow::UntilEnd
        } else {
            Follow::Once
        };
        let print = |entry: &LiveEntry| {
            let text = escape(&entry.text);
            let line = match entry.source.as_str() {
                "stderr" | "cronlease" => format!("[{}] {text}\n", entry.source),
                _ => format!("{text}\n"),
            };
            // A closed pipe (`logs JOB | head`) ends the printing, not the
            // command with an error.
            let _ = std::io::stdout().lock().write_all(line.as_bytes());
        };
        let mut interrupt = signal(SignalKind::interrupt())
            .map_err(|e| Failure::Runtime(format!("cannot watch for Ctrl-C: {e}")))?;
        let end = tokio::select! {
            end = operator::follow_live(&target.store, &args.job, &run_id, follow, print) => end?,
            _ = interrupt.recv() => return Ok(String::new()),
        };
        match end {
            LiveEnd::Gone => {
                eprintln!(
                    "run {run_id} is no longer in flight and its live output is gone (its replica stopped, or it ended more than a minute ago): `cronlease history {} --output` shows its output tail",
                    args.job
                );
                Err(Failure::Exit(Exit::Failure))
            }
            LiveEnd::Ended | LiveEnd::Read => Ok(String::new()),
        }
    })
}
