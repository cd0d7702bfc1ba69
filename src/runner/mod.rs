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
                warn!(%reason, "runs are contained in process groups only: a process a run moves out of its group (setsid, double fork) survives it (see README, \"Runs that cannot escape\")");
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
    /// for a handler, which is no process.
    pub fn argv(command: &Command) -> Option<Vec<String>> {
        match command {
            Command::Argv(argv) => Some(argv.clone()),
            Command::Shell(script) => Some(vec![
                "/bin/sh".to_string(),
                "-c".to_string(),
                script.clone(),
            ]),
            Command::Handler => None,
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
    // Read at each attempt: an env file or credential may change between runs.
    let (env, redactor) = match spec.env.resolve() {
        Ok(resolved) => resolved,
        Err(e) => return cannot_start(run, tail, format!("[cronlease] {e}")),
    };
    let cgroup = match attempt_cgroup(spec, run) {
        Ok(cgroup) => cgroup,
        Err(why) => return cannot_start(run, tail, why),
    };
    let mut command = build_command(spec, &env);
    if let Some(cgroup) = &cgroup {
        let procs = match cgroup.procs_for_child() {
            Ok(procs) => procs,
            Err(e) => {
                cgroup.remove();
                return cannot_start(
                    run,
                    tail,
                    format!("[cronlease] cannot open the run's cgroup: {e}"),
                );
            }
        };
        command.join_cgroup(procs);
    }
    let Spawned {
        mut child,
        stdout,
        stderr,
    } = match Child::spawn(&command) {
        Ok(spawned) => spawned,
        Err(e) => {
            if let Some(cgroup) = &cgroup {
                cgroup.remove();
            }
            return cannot_start(
                run,
                tail,
                format!(
                    "[cronlease] cannot start {:?} in {}: {e}",
                    spec.argv,
                    spec.workdir.display()
                ),
            );
        }
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
    if let Some(kills) = usage.oom_kills.filter(|&n| n > 0) {
        let line = format!(
            "[cronlease] the kernel's OOM killer killed {kills} process(es) of this run: memory_max reached"
        );
        warn!(job = %run.job, run_id = %run.run_id, oom_kills = kills, "{line}");
        tail.push_line(line.as_bytes());
    }
    if let Some(cgroup) = &cgroup {
        cgroup.remove();
    }
    attempt_end(run, &exit, ending, usage, tail)
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
                (Stop::Timeout | Stop::Shutdown, None) => {
                    if reason == Stop::Shutdown {
                        warn!(
                            job = %run.job, tick = %run.tick_label(), fence = run.fence, run_id = %run.run_id,
                            replica = %run.replica, "shutdown grace over: interrupting the run"
                        );
                    }
                    ending = Some(reason);
                    group.signal(Signal::SIGTERM);
                    kill_at = Some(Instant::now() + run.grace);
                }
                (Stop::Timeout | Stop::Shutdown, Some(_)) => {}
            },
        }
    };
    (exit, ending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{Attempts, Noop, RunResult, execute};
    use tokio::sync::watch;

    fn process(command: Command) -> Process {
        Process {
            argv: Process::argv(&command).expect("the tests run argv and shell commands"),
            workdir: std::env::temp_dir(),
            env: RunEnv {
                inherited: vec![("PATH".into(), "/usr/bin:/bin".into())],
                job: vec![("GREETING".into(), "hello".into())],
                ..RunEnv::default()
            },
            stdio: StdioMode::Capture,
            containment: Containment::ProcessGroup,
            leftovers: Leftovers::Kill,
            limits: Limits::default(),
        }
    }

    fn context() -> RunContext {
        RunContext {
            job: "test".into(),
            tick_ms: 1_767_225_600_000,
            fence: 1,
            run_id: "r".into(),
            replica: "test".into(),
            attempt: 0,
            grace: Duration::from_millis(200),
        }
    }

    fn once() -> Attempts {
        Attempts {
            timeout: None,
            retries: 0,
            retry_backoff: Duration::from_millis(10),
            output_tail_bytes: 4096,
        }
    }

    fn shell(script: &str) -> Command {
        Command::Shell(script.into())
    }

    async fn run_with(task: &dyn Task, attempts: Attempts) -> RunResult {
        let (_tx, rx) = watch::channel(None);
        execute(task, context(), attempts, rx).await
    }

    async fn run(command: Command) -> RunResult {
        run_with(&process(command), once()).await
    }

    #[tokio::test]
    async fn ok_failed_and_output() {
        let result = run(shell("echo $GREETING; echo err >&2")).await;
        assert_eq!(result.status, Status::Ok);
        assert_eq!(result.exit_code, Some(0));
        assert!(
            result.output.contains("hello\n") && result.output.contains("err\n"),
            "{result:?}"
        );

        let result = run(shell("exit 3")).await;
        assert_eq!((result.status, result.exit_code), (Status::Failed, Some(3)));

        let result = run(Command::Argv(vec!["/nonexistent/program".into()])).await;
        assert_eq!(result.status, Status::Failed);
        assert!(result.output.contains("cannot start"), "{result:?}");
    }

    #[tokio::test]
    async fn a_command_that_cannot_start_says_which_step_failed() {
        let result = run(Command::Argv(vec!["no-such-program-anywhere".into()])).await;
        assert_eq!(result.status, Status::Failed);
        assert!(
            result.output.contains(&format!(
                "[cronlease] cannot start [\"no-such-program-anywhere\"] in {}: cannot find \"no-such-program-anywhere\" in PATH ",
                std::env::temp_dir().display()
            )),
            "{result:?}"
        );
        let task = Process {
            workdir: "/nonexistent/dir".into(),
            ..process(shell("true"))
        };
        let result = run_with(&task, once()).await;
        assert_eq!(result.status, Status::Failed);
        assert!(
            result.output.contains(
                "[cronlease] cannot start [\"/bin/sh\", \"-c\", \"true\"] in /nonexistent/dir: \
                 cannot change to the work directory: No such file or directory (os error 2)"
            ),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn the_secrets_a_run_was_given_are_redacted_from_its_output() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("db.env");
        std::fs::write(&file, "DB_PASSWORD=correct-horse\n").expect("write the env file");
        let mut task = process(shell("echo \"pw=$DB_PASSWORD replica=$R\" >&2"));
        task.env.files.push(file.clone());
        task.env.job.push(("R".into(), "the-replicas-own".into()));
        task.env.secrets = vec![b"the-replicas-own".to_vec()].into();
        let result = run_with(&task, once()).await;
        assert_eq!(result.status, Status::Ok, "{result:?}");
        assert!(
            result.output.contains("pw=[redacted] replica=[redacted]"),
            "{result:?}"
        );
        // Writable by others: refused, and the run says why (not the value).
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .expect("chmod");
        let result = run_with(&task, once()).await;
        assert_eq!(result.status, Status::Failed);
        assert!(
            result.output.contains("writable by its group or others"),
            "{result:?}"
        );
        assert!(!result.output.contains("correct-horse"), "{result:?}");
    }

    #[tokio::test]
    async fn a_flood_of_output_keeps_its_tail_and_a_long_line_comes_in_pieces() {
        // 200,000 lines, then one line of 1 MB without a newline, then the
        // last words: the tail ends with them.
        let result = run(shell(
            "yes | head -n 200000; head -c 1048576 /dev/zero | tr '\\0' x; echo; echo THE-END",
        ))
        .await;
        assert_eq!(result.status, Status::Ok, "{result:?}");
        assert!(
            result.output.ends_with("THE-END\n"),
            "{:?}",
            &result.output[result.output.len().saturating_sub(100)..]
        );
    }

    #[tokio::test]
    async fn the_noop_task_succeeds_without_a_process() {
        let result = run_with(&Noop, once()).await;
        assert_eq!(
            (result.status, result.exit_code, result.attempts),
            (Status::Ok, Some(0), 1)
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let attempts = Attempts {
            timeout: Some(Duration::from_millis(200)),
            ..once()
        };
        let started = std::time::Instant::now();
        let result = run_with(&process(shell("sleep 30 & sleep 30; echo never")), attempts).await;
        assert_eq!(result.status, Status::Timeout);
        assert_eq!(result.signal, Some(Signal::SIGTERM as i32));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn retries_under_one_call() {
        let dir = tempfile::tempdir().unwrap();
        let counter = dir.path().join("n");
        let task = process(shell(&format!(
            "echo x >> {0}; [ $(wc -l < {0}) -ge 3 ]",
            counter.display()
        )));
        let result = run_with(
            &task,
            Attempts {
                retries: 5,
                ..once()
            },
        )
        .await;
        assert_eq!((result.status, result.attempts), (Status::Ok, 3));
        assert!(result.output.contains("[cronlease] attempt 3 of 6"));
    }

    #[tokio::test]
    async fn lost_lease_kills_at_once_and_shutdown_interrupts() {
        let task = std::sync::Arc::new(process(shell("trap '' TERM; sleep 30")));
        for (stop, status, signal) in [
            (Stop::LostLease, Status::LostLease, Signal::SIGKILL),
            // TERM is trapped, so the kill_grace ends in SIGKILL.
            (Stop::Shutdown, Status::Interrupted, Signal::SIGKILL),
        ] {
            let (tx, rx) = watch::channel(None);
            let handle = tokio::spawn({
                let task = task.clone();
                async move { execute(&*task, context(), once(), rx).await }
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            tx.send(Some(stop)).unwrap();
            let result = handle.await.unwrap();
            assert_eq!(result.status, status);
            assert_eq!(result.signal, Some(signal as i32));
        }
    }

    #[tokio::test]
    async fn each_attempt_has_its_own_cpu_time_and_peak_memory() {
        // One attempt burns CPU and holds about 50 MB while another sleeps
        // beside it, and ends after it: neither sees the other's usage.
        let busy = process(shell(
            "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; perl -e '$x = \"a\" x 50_000_000'",
        ));
        let idle = process(shell("sleep 1"));
        let (busy, idle) = tokio::join!(run_with(&busy, once()), run_with(&idle, once()));
        assert_eq!((busy.status, idle.status), (Status::Ok, Status::Ok));
        let (cpu, peak) = (
            busy.usage.cpu_us.unwrap_or(0),
            busy.usage.peak_memory_bytes.unwrap_or(0),
        );
        assert!(cpu >= 100_000 && peak >= 40_000 * 1024, "{:?}", busy.usage);
        let (cpu, peak) = (
            idle.usage.cpu_us.unwrap_or(u64::MAX),
            idle.usage.peak_memory_bytes.unwrap_or(u64::MAX),
        );
        assert!(cpu < 50_000 && peak < 20_000 * 1024, "{:?}", idle.usage);
    }

    /// A task that panics, for the engine's side of the boundary.
    struct Panics;

    impl Task for Panics {
        fn attempt<'a>(
            &'a self,
            _run: &'a RunContext,
            _stop: StopSignal,
            _output: &'a mut Tail,
        ) -> Attempt<'a> {
            Box::pin(async { panic!("the draw machine is jammed") })
        }
    }

    #[tokio::test]
    async fn a_panicking_task_fails_with_its_message_and_is_retried() {
        let result = run_with(
            &Panics,
            Attempts {
                retries: 1,
                ..once()
            },
        )
        .await;
        assert_eq!((result.status, result.attempts), (Status::Failed, 2));
        assert!(
            result
                .output
                .contains("the run panicked: the draw machine is jammed"),
            "{result:?}"
        );
    }
}
