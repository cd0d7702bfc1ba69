//! The process task: a job's command, one process group per attempt, its
//! output to the log and a bounded tail, stopped from outside.
//!
//! The runner never talks to Redis. It is one kind of [`Task`]: the engine
//! ([`crate::task::execute`]) runs its attempts, times them out and retries
//! them, and tells it to stop through a [`StopSignal`] (lost lease: SIGKILL
//! at once; timeout or shutdown: SIGTERM, then SIGKILL after `kill_grace`).
//!
//! Every attempt runs in its own process group (so a timeout or a lost lease
//! stops the whole tree, not just the first process), with `PR_SET_PDEATHSIG`
//! set to SIGKILL (a replica killed with -9 does not leave its job running
//! without a lease). When the command exits, what is left of its group is
//! killed too: cronlease never leaves work running that no lease covers.
//!
//! The runner reaps each attempt's process itself (`runner/child.rs`), so
//! that every outcome has that attempt's CPU time and peak memory, never
//! another run's: the cgroup's figures where it has them, else those the
//! kernel gives with the process's exit.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::time::{Instant, sleep_until};
use tracing::{error, info, warn};

use crate::config::{Command, ContainmentSetting, Leftovers, Limits};
use crate::outcome::{Status, Tail};
use crate::task::{Attempt, AttemptEnd, RunContext, Stop, StopSignal, Task};

mod cgroup;
mod child;
mod environment;
pub mod orphans;
mod output;
mod spawn;
mod tagged;

pub use cgroup::Cgroups;
use cgroup::RunCgroup;
use child::{Child, Spawned};
pub use environment::{ReplicaEnv, RunEnv};
use output::Output;
pub use spawn::raise_open_files_limit;

/// How long the processes of a run's cgroup may take to die once killed.
const EMPTY_AFTER_KILL: Duration = Duration::from_secs(5);

/// How a replica keeps each run's processes together, so that none
/// outlives the run.
#[derive(Debug, Clone)]
pub enum Containment {
    /// Every attempt in a cgroup of its own (see [`Cgroups`]): nothing it
    /// starts can leave it.
    Cgroup(std::sync::Arc<Cgroups>),
    /// Every attempt in a process group of its own: what leaves the group
    /// (`setsid`, a double fork, a daemonizing tool) escapes the kill.
    ProcessGroup,
    /// `containment = "cgroup"` and there is no cgroup to be had: every
    /// attempt fails with this reason.
    Unavailable(String),
}

impl Containment {
    /// What `setting` gives on this host, logged with its reason: cgroups
    /// where this process can make them (`auto`, `cgroup`), else process
    /// groups (`auto`, `process_group`).
    pub fn detect(replica: &str, setting: ContainmentSetting) -> Containment {
        if setting == ContainmentSetting::ProcessGroup {
            info!("runs are contained in process groups (containment = \"process_group\")");
            return Containment::ProcessGroup;
        }
        match (Cgroups::detect(replica), setting) {
            (Ok(cgroups), _) => {
                info!(cgroup = %cgroups.base().display(), "runs are contained in cgroups: nothing a run starts outlives it");
                Containment::Cgroup(std::sync::Arc::new(cgroups))
            }
            (Err(reason), ContainmentSetting::Cgroup) => {
                error!(%reason, "containment = \"cgroup\", but this replica cannot make cgroups: no job command can run");
                Containment::Unavailable(reason)
            }
            (Err(reason), _) => {
                warn!(%reason, "runs are contained in process groups only: a process a run moves out of its group (setsid, double fork) survives it (see the guide, \"Runs and their processes\")");
                Containment::ProcessGroup
            }
        }
    }

    /// Whether runs can have `limits` here: their controllers enabled for
    /// the runs' cgroups; the reason when not.
    pub fn check_limits(&self, limits: &Limits) -> Result<(), String> {
        let controllers = limits.controllers();
        if controllers.is_empty() {
            return Ok(());
        }
        match self {
            Containment::Cgroup(cgroups) => cgroups.enable(&controllers),
            Containment::ProcessGroup => Err(
                "limits need runs in cgroups, and this replica runs them in process groups (see its log for why)"
                    .to_string(),
            ),
            Containment::Unavailable(reason) => Err(reason.clone()),
        }
    }

    /// The name `status` shows.
    pub fn as_str(&self) -> &'static str {
        match self {
            Containment::Cgroup(_) => "cgroup",
            Containment::ProcessGroup => "process_group",
            Containment::Unavailable(_) => "unavailable",
        }
    }
}

/// A job's command as a task: one process group per attempt, in a cgroup
/// of its own where the replica has cgroups.
#[derive(Debug, Clone)]
pub struct Process {
    /// The program and its arguments (`argv[0]` is looked up in `PATH`);
    /// see [`Process::argv`].
    pub argv: Vec<String>,
    pub workdir: PathBuf,
    /// What the command's environment is made of, read at each attempt:
    /// nothing of the replica's but what its allowlist names.
    pub env: RunEnv,
    pub stdio: StdioMode,
    pub containment: Containment,
    /// What becomes of processes left in the attempt's cgroup when the
    /// command exits.
    pub leftovers: Leftovers,
    /// The attempt's cgroup's resource limits (checked against the
    /// replica's cgroups by [`Containment::check_limits`]).
    pub limits: Limits,
}

impl Process {
    /// The argv of a job's command: itself, or `/bin/sh -c SCRIPT`; None
    /// for a handler or a request, which are no process.
    pub fn argv(command: &Command) -> Option<Vec<String>> {
        match command {
            Command::Argv(argv) => Some(argv.clone()),
            Command::Shell(script) => Some(vec![
                "/bin/sh".to_string(),
                "-c".to_string(),
                script.clone(),
            ]),
            Command::Http(_) | Command::Handler => None,
        }
    }
}

impl Task for Process {
    fn attempt<'a>(
        &'a self,
        run: &'a RunContext,
        stop: StopSignal,
        output: &'a mut Tail,
    ) -> Attempt<'a> {
        Box::pin(run_once(self, run, stop, output))
    }
}

/// Where a command's standard streams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdioMode {
    /// stdin from /dev/null; stdout and stderr to the log, line by line, and
    /// their tail into the outcome (jobs).
    Capture,
    /// All three inherited from cronlease (`cronlease lock -- CMD`).
    Inherit,
}

/// The command of an attempt (`runner/spawn/`: its own process group,
/// `PR_SET_PDEATHSIG`, no fork), reaped by no one but [`Child`] (see
/// `runner/child.rs`), with the environment `env` and nothing else.
fn build_command(
    spec: &Process,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> spawn::Command {
    let mut command = spawn::Command::new(&spec.argv, &spec.workdir);
    for (key, value) in env {
        command.env(key, value);
    }
    command.stdio(spec.stdio);
    command
}

async fn run_once(
    spec: &Process,
    run: &RunContext,
    mut stop: StopSignal,
    tail: &mut Tail,
) -> AttemptEnd {
    let Launched {
        spawned: Spawned {
            mut child,
            stdout,
            stderr,
        },
        cgroup,
        redactor,
    } = match launch(spec, run) {
        Ok(launched) => launched,
        Err(why) => return cannot_start(run, tail, why),
    };
    let members = Members {
        group: Group(child.pid()),
        scope: match &cgroup {
            Some(cgroup) => Scope::Cgroup(cgroup),
            None => Scope::Tagged(&run.run_id),
        },
    };
    info!(
        job = %run.job, tick = %run.tick_label(), fence = run.fence, run_id = %run.run_id,
        replica = %run.replica, pid = child.pid().as_raw(), "started"
    );
    let mut output = Output::new(stdout, stderr, redactor);
    let (exit, mut ending) =
        supervise(run, &mut child, members, &mut stop, &mut output, tail).await;
    // Whatever the command left behind goes with it, or is waited for.
    if spec.leftovers == Leftovers::Kill {
        members.group.signal(Signal::SIGKILL);
    }
    if let Some(reason) = leftovers(
        run,
        members.scope,
        spec.leftovers,
        &mut stop,
        &mut output,
        tail,
    )
    .await
    {
        ending = ending.or(Some(reason));
    }
    members.group.signal(Signal::SIGKILL);
    output.drain(run, tail).await;
    output.report(run);
    let usage = child::attempt_usage(
        cgroup.as_ref().map(RunCgroup::usage).unwrap_or_default(),
        exit.as_ref().ok().map(|exit| exit.usage),
    );
    note_oom_kills(run, &usage, tail);
    if let Some(cgroup) = &cgroup {
        cgroup.remove();
    }
    attempt_end(run, &exit, ending, usage, tail)
}

/// An attempt's process, started, with what it runs in and what its
/// output must not show.
struct Launched {
    spawned: Spawned,
    cgroup: Option<RunCgroup>,
    redactor: environment::Redactor,
}

/// Starts an attempt's process: its environment read (at each attempt:
/// an env file or credential may change between runs), its cgroup made
/// where runs have them, the process spawned in it. Err: the line that
/// says why it could not start (nothing is left behind).
fn launch(spec: &Process, run: &RunContext) -> Result<Launched, String> {
    let (env, redactor) = spec.env.resolve().map_err(|e| format!("[cronlease] {e}"))?;
    let cgroup = attempt_cgroup(spec, run)?;
    let mut command = build_command(spec, &env);
    if let Some(cgroup) = &cgroup {
        let procs = cgroup.procs_for_child().map_err(|e| {
            cgroup.remove();
            format!("[cronlease] cannot open the run's cgroup: {e}")
        })?;
        command.join_cgroup(procs);
    }
    match Child::spawn(&command) {
        Ok(spawned) => Ok(Launched {
            spawned,
            cgroup,
            redactor,
        }),
        Err(e) => {
            if let Some(cgroup) = &cgroup {
                cgroup.remove();
            }
            Err(format!(
                "[cronlease] cannot start {:?} in {}: {e}",
                spec.argv,
                spec.workdir.display()
            ))
        }
    }
}

/// Says in the log and the run's output when the kernel's OOM killer
/// killed processes of the run.
fn note_oom_kills(run: &RunContext, usage: &crate::task::Usage, tail: &mut Tail) {
    if let Some(kills) = usage.oom_kills.filter(|&n| n > 0) {
        let line = format!(
            "[cronlease] the kernel's OOM killer killed {kills} process(es) of this run: memory_max reached"
        );
        warn!(job = %run.job, run_id = %run.run_id, oom_kills = kills, "{line}");
        tail.push_line(line.as_bytes());
    }
}

/// The attempt's cgroup, where runs have them (None: a process group
/// only); Err: why the attempt cannot start.
fn attempt_cgroup(spec: &Process, run: &RunContext) -> Result<Option<RunCgroup>, String> {
    match &spec.containment {
        Containment::Cgroup(cgroups) => cgroups
            .create(&run.run_id, run.attempt, &spec.limits)
            .map(Some)
            .map_err(|e| format!("[cronlease] cannot create the run's cgroup: {e}")),
        Containment::ProcessGroup => Ok(None),
        Containment::Unavailable(reason) => Err(format!(
            "[cronlease] containment = \"cgroup\" and no cgroup can be made: {reason}"
        )),
    }
}

/// How an attempt ended: from its exit (or why it could not be waited
/// for) and the stop that ended it, if one did; logged.
fn attempt_end(
    run: &RunContext,
    exit: &std::io::Result<child::Exit>,
    ending: Option<Stop>,
    usage: crate::task::Usage,
    tail: &mut Tail,
) -> AttemptEnd {
    let (exit_code, signal) = match exit {
        Ok(exit) => (exit.status.code(), exit.status.signal()),
        Err(_) => (None, None),
    };
    let status = ending.map_or(
        match exit_code {
            Some(0) => Status::Ok,
            _ => Status::Failed,
        },
        Stop::status,
    );
    if let Err(e) = exit {
        tail.push_line(format!("[cronlease] cannot wait for the command: {e}").as_bytes());
    }
    info!(
        job = %run.job, tick = %run.tick_label(), fence = run.fence, run_id = %run.run_id,
        replica = %run.replica, %status, exit_code, signal, "exited"
    );
    AttemptEnd {
        status,
        exit_code,
        signal,
        usage,
    }
}

/// An attempt that could not start: `failed`, with the reason in the log
/// and the tail.
fn cannot_start(run: &RunContext, tail: &mut Tail, message: String) -> AttemptEnd {
    warn!(job = %run.job, run_id = %run.run_id, "{message}");
    tail.push_line(message.as_bytes());
    AttemptEnd::bare(Status::Failed)
}

/// The processes the command left behind (in its cgroup, or carrying its
/// run id) when it exited: killed (`leftovers = "kill"`, logged with their
/// command lines) or waited for (`"wait"`, until none is left or a stop
/// comes: timeout, lost lease, shutdown, which kills them and is
/// returned). Either way none is left after, or the survivors are logged.
async fn leftovers(
    run: &RunContext,
    cgroup: Scope<'_>,
    policy: Leftovers,
    stop: &mut StopSignal,
    output: &mut Output,
    tail: &mut Tail,
) -> Option<Stop> {
    let left = cgroup.members();
    if left.is_empty() {
        return None;
    }
    let described: Vec<String> = left.iter().map(|&pid| cgroup::describe(pid)).collect();
    let mut ending = None;
    match policy {
        Leftovers::Kill => {
            warn!(
                job = %run.job, run_id = %run.run_id, processes = ?described,
                "the command exited and left processes behind: killing them (leftovers = \"kill\")"
            );
            cgroup.signal(Signal::SIGKILL);
        }
        Leftovers::Wait => {
            info!(
                job = %run.job, run_id = %run.run_id, processes = ?described,
                "the command exited; waiting for the processes it left (leftovers = \"wait\")"
            );
            loop {
                tokio::select! {
                    () = output.next(run, tail) => {}
                    () = tokio::time::sleep(Duration::from_millis(50)) => {
                        if cgroup.members().is_empty() {
                            return None;
                        }
                    }
                    reason = stop.next() => {
                        warn!(job = %run.job, run_id = %run.run_id, ?reason, "stopped while waiting for the processes the command left: killing them");
                        ending = Some(reason);
                        cgroup.signal(Signal::SIGKILL);
                        break;
                    }
                }
            }
        }
    }
    if !cgroup
        .kill_until_empty(Instant::now() + EMPTY_AFTER_KILL)
        .await
    {
        error!(
            job = %run.job, run_id = %run.run_id, processes = ?cgroup.members(),
            "processes the run left survive SIGKILL (uninterruptible sleep?)"
        );
    }
    ending
}

/// Everything of one attempt a signal must reach: its process group, and
/// the rest of its processes.
#[derive(Debug, Clone, Copy)]
struct Members<'a> {
    group: Group,
    scope: Scope<'a>,
}

impl Members<'_> {
    fn signal(self, signal: Signal) {
        self.group.signal(signal);
        self.scope.signal(signal);
    }
}

/// Where all of an attempt's processes are: its cgroup, or (without one)
/// wherever its run id is in the environment.
#[derive(Debug, Clone, Copy)]
enum Scope<'a> {
    Cgroup(&'a RunCgroup),
    Tagged(&'a str),
}

impl Scope<'_> {
    fn members(self) -> Vec<i32> {
        match self {
            Scope::Cgroup(cgroup) => cgroup.members(),
            Scope::Tagged(run_id) => tagged::processes_of(run_id),
        }
    }

    fn signal(self, signal: Signal) {
        match self {
            Scope::Cgroup(cgroup) => cgroup.signal(signal),
            Scope::Tagged(run_id) => {
                for pid in tagged::processes_of(run_id) {
                    let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
                }
            }
        }
    }

    /// SIGKILLs what is left until nothing is, at most until `deadline`.
    async fn kill_until_empty(self, deadline: Instant) -> bool {
        loop {
            if self.members().is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.signal(Signal::SIGKILL);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An attempt's process group.
#[derive(Debug, Clone, Copy)]
struct Group(Pid);

impl Group {
    fn signal(self, signal: Signal) {
        // ESRCH: the group is already gone, which is what we wanted.
        let _ = killpg(self.0, signal);
    }
}

/// Waits for the command to exit, logging its output, and stops its group
/// as the stop signal says. Returns the exit and the stop that ended it.
async fn supervise(
    run: &RunContext,
    child: &mut Child,
    group: Members<'_>,
    stop: &mut StopSignal,
    output: &mut Output,
    tail: &mut Tail,
) -> (std::io::Result<child::Exit>, Option<Stop>) {
    let mut ending: Option<Stop> = None;
    let mut kill_at: Option<Instant> = None;
    let exit = loop {
        tokio::select! {
            () = output.next(run, tail) => {}
            exit = child.wait() => break exit,
            () = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                warn!(job = %run.job, run_id = %run.run_id, "still running after kill_grace, sending SIGKILL");
                group.signal(Signal::SIGKILL);
                kill_at = None;
            }
            reason = stop.next() => match (reason, ending) {
                (Stop::LostLease, _) => {
                    warn!(
                        job = %run.job, tick = %run.tick_label(), fence = run.fence, run_id = %run.run_id,
                        replica = %run.replica, "lease lost: killing the run's process group"
                    );
                    ending = Some(Stop::LostLease);
                    group.signal(Signal::SIGKILL);
                    kill_at = None;
                }
                (Stop::Timeout | Stop::Shutdown | Stop::Killed, None) => {
                    if reason == Stop::Shutdown {
                        warn!(
                            job = %run.job, tick = %run.tick_label(), fence = run.fence, run_id = %run.run_id,
                            replica = %run.replica, "shutdown grace over: interrupting the run"
                        );
                    }
                    if reason == Stop::Killed {
                        warn!(
                            job = %run.job, tick = %run.tick_label(), fence = run.fence, run_id = %run.run_id,
                            replica = %run.replica, "an operator asked for the run to stop: terminating its process group"
                        );
                    }
                    ending = Some(reason);
                    group.signal(Signal::SIGTERM);
                    kill_at = Some(Instant::now() + run.grace);
                }
                (Stop::Timeout | Stop::Shutdown | Stop::Killed, Some(_)) => {}
            },
        }
    };
    (exit, ending)
}

#[cfg(test)]
mod tests;
