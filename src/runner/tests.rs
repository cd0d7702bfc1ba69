//! The runner's own tests: real processes, no Redis.

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
        upstream: None,
        trigger: crate::outcome::Trigger::Schedule,
        params: Default::default(),
        live: crate::live::LiveLines::off(),
        trace: None,
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
async fn lost_lease_kills_at_once_and_shutdown_or_a_kill_interrupts() {
    let task = std::sync::Arc::new(process(shell("trap '' TERM; sleep 30")));
    for (stop, status, signal) in [
        (Stop::LostLease, Status::LostLease, Signal::SIGKILL),
        // TERM is trapped, so the kill_grace ends in SIGKILL.
        (Stop::Shutdown, Status::Interrupted, Signal::SIGKILL),
        // An operator's kill: the same, recorded `killed`.
        (Stop::Killed, Status::Killed, Signal::SIGKILL),
    ] {
        let (tx, rx) = watch::channel(None);
        let handle = tokio::spawn({
            let task = task.clone();
            // Retries offered: none of these stops is retried.
            let retries = Attempts {
                retries: 2,
                ..once()
            };
            async move { execute(&*task, context(), retries, rx).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send(Some(stop)).unwrap();
        let result = handle.await.unwrap();
        assert_eq!((result.status, result.attempts), (status, 1));
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
    // Its `ru_maxrss` is the test process's own peak (the shell shared
    // its memory until `exec`), so it says nothing of the shell and sleep.
    let cpu = idle.usage.cpu_us.unwrap_or(u64::MAX);
    assert!(
        cpu < 50_000 && idle.usage.peak_memory_bytes.is_none(),
        "{:?}",
        idle.usage
    );
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
