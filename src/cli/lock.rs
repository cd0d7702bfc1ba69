//! `cronlease lock`: a command run under a cluster lock.

use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{
    ConnectArgs, Failure, operator_command, parse_cli_duration, parse_env_pattern, parse_lease,
    parse_name, watch_signals,
};
use crate::exit::Exit;
use crate::lock::LockError;
use crate::lock::command::CommandError;
use crate::operator;

#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The lock's name: [A-Za-z0-9_.-], 1 to 128 characters.
    #[arg(value_parser = parse_name)]
    pub name: String,
    /// How long the lock stays valid without renewal (renewed every third):
    /// more than 3 × the Redis command timeout (the config's, or 5 s with
    /// --redis-url), and at most 1h.
    #[arg(long, value_name = "D", default_value = "30s", value_parser = parse_lease)]
    pub lease: Duration,
    /// Wait up to this long for the lock instead of exiting 75 at once.
    #[arg(long, value_name = "D", value_parser = parse_cli_duration)]
    pub wait: Option<Duration>,
    /// Also pass this variable of the caller's environment to the command
    /// (a name, or a prefix ending in `*`); repeatable. By default the
    /// command gets PATH, LANG, LC_*, TZ, HOME, USER, LOGNAME and TMPDIR,
    /// and the config's `[daemon] inherit_env`; never a secret of
    /// cronlease's own (its Redis password or URL variables).
    #[arg(long = "inherit-env", value_name = "NAME", value_parser = parse_env_pattern)]
    pub inherit_env: Vec<crate::config::EnvPattern>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `cronlease lock`.
pub(super) fn lock(args: LockArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        let shutdown = CancellationToken::new();
        let signals = watch_signals(shutdown.clone(), None)
            .map_err(|e| Failure::Runtime(format!("cannot install signal handlers: {e}")))?;
        let identity = crate::daemon::Identity::new(None);
        let options = crate::lock::command::LockOptions {
            name: args.name.clone(),
            lease: args.lease,
            wait: args.wait,
            kill_grace: target
                .config
                .as_ref()
                .map_or(Duration::from_secs(10), |c| c.daemon.kill_grace),
            command: args.command.clone(),
            env: crate::runner::RunEnv::for_lock(target.config.as_ref(), &args.inherit_env),
            holder: format!("{}:{}", operator::operator_identity(), identity.pid),
            host: identity.host,
        };
        let result = crate::lock::command::run(target.store, options, shutdown.clone()).await;
        shutdown.cancel();
        let _ = signals.await;
        match result {
            Ok(Exit::Success) => Ok(String::new()),
            Ok(code) => Err(Failure::Exit(code)),
            Err(e @ CommandError::Lock(LockError::Name(_) | LockError::Lease { .. })) => {
                Err(Failure::Invalid(e.to_string()))
            }
            Err(e) => Err(Failure::Runtime(e.to_string())),
        }
    })
}
