//! The spawn's tests: real processes.

use super::*;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;

/// Waits for `pid` and returns its raw wait status.
fn wait(pid: libc::pid_t) -> c_int {
    let mut status = 0;
    // SAFETY: waitpid writes the status into a local.
    let reaped = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(reaped, pid, "waitpid: {}", io::Error::last_os_error());
    status
}

/// Runs `argv` capturing its output: (wait status, stdout, stderr).
fn output(command: &mut Command) -> (c_int, String, String) {
    let started = command
        .stdio(StdioMode::Capture)
        .spawn()
        .expect("the command starts");
    let read = |fd: Option<OwnedFd>| {
        let mut text = String::new();
        File::from(fd.expect("captured"))
            .read_to_string(&mut text)
            .expect("the output reads");
        text
    };
    let (stdout, stderr) = (read(started.stdout), read(started.stderr));
    (wait(started.pid), stdout, stderr)
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_string()).collect()
}

fn sh(script: &str) -> Command {
    Command::new(&argv(&["/bin/sh", "-c", script]), &std::env::temp_dir())
}

fn exited(status: c_int) -> Option<c_int> {
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

fn signalled(status: c_int) -> Option<c_int> {
    libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status))
}

#[test]
fn output_is_captured_and_the_exit_status_kept() {
    let (status, stdout, stderr) = output(&mut sh("echo out; echo err >&2; exit 3"));
    assert_eq!(
        (exited(status), stdout.as_str(), stderr.as_str()),
        (Some(3), "out\n", "err\n")
    );
}

#[test]
fn stdin_is_dev_null_and_no_pipe_end_leaks_into_the_child() {
    let started = sh("exec sleep 2")
        .stdio(StdioMode::Capture)
        .spawn()
        .expect("sleep starts");
    let link = |n: &str| std::fs::read_link(format!("/proc/{}/fd/{n}", started.pid)).ok();
    // Until sh has exec'ed sleep the descriptors are the same ones.
    assert_eq!(link("0"), Some(PathBuf::from("/dev/null")));
    let ours = |fd: &Option<OwnedFd>| {
        fd.as_ref()
            .map(|fd| fd.as_raw_fd().to_string())
            .expect("captured")
    };
    let (out, err) = (ours(&started.stdout), ours(&started.stderr));
    let theirs: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", started.pid))
        .expect("the child's fds list")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !theirs.contains(&out) && !theirs.contains(&err),
        "{theirs:?} holds {out} or {err}"
    );
    // Its stdout and stderr are our pipes.
    let pipe_of = |fd: &str| std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
    assert_eq!(link("1"), Some(pipe_of(&out)));
    assert_eq!(link("2"), Some(pipe_of(&err)));
    // SAFETY: kill sends a signal to our own child.
    unsafe { libc::kill(started.pid, libc::SIGKILL) };
    wait(started.pid);
}

#[test]
fn inherited_streams_are_the_replicas() {
    let started = sh("exec sleep 2").spawn().expect("sleep starts");
    for fd in ["0", "1", "2"] {
        assert_eq!(
            std::fs::read_link(format!("/proc/{}/fd/{fd}", started.pid)).ok(),
            std::fs::read_link(format!("/proc/self/fd/{fd}")).ok(),
            "fd {fd}"
        );
    }
    assert!(started.stdout.is_none() && started.stderr.is_none());
    // SAFETY: kill sends a signal to our own child.
    unsafe { libc::kill(started.pid, libc::SIGKILL) };
    wait(started.pid);
}

#[test]
fn a_missing_program_is_named() {
    let e = Command::new(&argv(&["/nonexistent/program"]), Path::new("/"))
        .spawn()
        .expect_err("nothing to execute");
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert_eq!(
        e.to_string(),
        "cannot execute \"/nonexistent/program\": No such file or directory (os error 2)"
    );

    let mut command = Command::new(&argv(&["no-such-program-anywhere"]), Path::new("/"));
    command.env("PATH", "/nonexistent:/usr/bin");
    let e = command.spawn().expect_err("nothing to execute");
    assert_eq!(
        e.to_string(),
        "cannot find \"no-such-program-anywhere\" in PATH \"/nonexistent:/usr/bin\": \
         No such file or directory (os error 2)"
    );

    let e = Command::new(&[], Path::new("/"))
        .spawn()
        .expect_err("no program");
    assert_eq!(
        e.to_string(),
        "cannot execute \"\": No such file or directory (os error 2)"
    );
}

#[test]
fn a_missing_work_directory_is_the_error() {
    let e = Command::new(&argv(&["true"]), Path::new("/nonexistent/dir"))
        .spawn()
        .expect_err("no such directory");
    assert_eq!(
        e.to_string(),
        "cannot change to the work directory: No such file or directory (os error 2)"
    );
}

#[test]
fn the_program_is_found_in_the_childs_path_and_scripts_without_a_shebang_run_in_sh() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str, mode: u32| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    write(
        "cronlease-found",
        "#!/bin/sh\necho found \"$@\" in \"$(pwd -P)\"\n",
        0o755,
    );
    write("cronlease-no-shebang", "echo plain \"$1\"\n", 0o755);
    // Not executable: skipped, as execvp skips it, for the next entry.
    let other = tempfile::tempdir().unwrap();
    let denied = other.path().join("cronlease-found");
    std::fs::write(&denied, "#!/bin/sh\necho wrong\n").unwrap();
    std::fs::set_permissions(&denied, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = format!(
        "{}:{}:/bin:/usr/bin",
        other.path().display(),
        dir.path().display()
    );

    for (args, printed) in [
        (["cronlease-found", "x"], "found x in /\n"),
        (["cronlease-no-shebang", "y"], "plain y\n"),
    ] {
        let mut command = Command::new(&argv(&args), Path::new("/"));
        command.env("PATH", &path);
        let (status, stdout, stderr) = output(&mut command);
        assert_eq!(
            (exited(status), stdout.as_str()),
            (Some(0), printed),
            "{args:?}: {stderr}"
        );
    }

    // Only the denied one: EACCES, as execvp says.
    let mut command = Command::new(&argv(&["cronlease-found"]), Path::new("/"));
    command.env("PATH", other.path());
    let e = command.spawn().expect_err("not executable");
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
}

#[test]
fn the_environment_is_what_was_set_sorted_and_the_last_value_wins() {
    let set = [
        ("PATH", "/bin"),
        ("KEEP", "1"),
        ("GREETING", "hello"),
        ("KEEP", "2"),
    ]
    .map(|(k, v)| (OsString::from(k), OsString::from(v)));
    let environment = environment(&set);
    let pairs: Vec<(&str, &str)> = environment
        .iter()
        .map(|(k, v)| (k.to_str().unwrap(), v.to_str().unwrap()))
        .collect();
    assert_eq!(
        pairs,
        [("GREETING", "hello"), ("KEEP", "2"), ("PATH", "/bin")]
    );
}

#[test]
fn nothing_of_the_replicas_environment_reaches_the_child_unless_set() {
    // This test process has a PATH and a HOME, at least; the child gets
    // neither.
    let mut command = Command::new(&argv(&["/usr/bin/env"]), &std::env::temp_dir());
    command.env("GREETING", "hello");
    let (_, stdout, _) = output(&mut command);
    assert_eq!(stdout, "GREETING=hello\n");
}

#[test]
fn a_nul_byte_is_refused_before_starting() {
    let e = Command::new(&argv(&["echo", "a\0b"]), Path::new("/"))
        .spawn()
        .expect_err("NUL");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(e.to_string(), "argv[1] holds a NUL byte");
}

extern "C" fn count(_: c_int) {
    HANDLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

static HANDLED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn signals_start_at_their_defaults_but_the_ignored_and_none_blocked() {
    // This process: a handler for SIGUSR1, SIGUSR2 ignored, SIGPIPE
    // ignored (Rust's), SIGHUP blocked in this thread.
    // SAFETY: sigaction and pthread_sigmask with locals; the handler
    // only touches an atomic.
    unsafe {
        let mut handler: libc::sigaction = std::mem::zeroed();
        handler.sa_sigaction = count as *const () as libc::sighandler_t;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &handler, ptr::null_mut()), 0);
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        assert_eq!(libc::sigaction(libc::SIGUSR2, &ignore, ptr::null_mut()), 0);
        let mut set = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGHUP);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, ptr::null_mut()),
            0
        );
    }
    // cat reads its own dispositions: nothing caught, only SIGUSR2
    // ignored, nothing blocked.
    let (status, stdout, _) = output(&mut Command::new(
        &argv(&["cat", "/proc/self/status"]),
        Path::new("/"),
    ));
    assert_eq!(exited(status), Some(0));
    let field = |name: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|value| u64::from_str_radix(value.trim(), 16).unwrap())
    };
    // What this process was started with ignored stays ignored, as
    // std's children have it: all but SIGPIPE.
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let ignored_here = own
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .map(|value| u64::from_str_radix(value.trim(), 16).unwrap())
        .unwrap();
    let bit = |signal: c_int| 1u64 << (signal - 1);
    assert_eq!(field("SigCgt:"), Some(0), "{stdout}");
    assert_eq!(
        field("SigIgn:"),
        Some(ignored_here & !bit(libc::SIGPIPE) | bit(libc::SIGUSR2)),
        "{stdout}"
    );
    assert_eq!(field("SigBlk:"), Some(0), "{stdout}");

    // SIGPIPE kills, SIGUSR1 kills: neither is ignored nor handled.
    for (script, signal) in [
        ("kill -PIPE $$; exit 0", libc::SIGPIPE),
        ("kill -USR1 $$; exit 0", libc::SIGUSR1),
    ] {
        let (status, _, _) = output(&mut sh(script));
        assert_eq!(signalled(status), Some(signal), "{script}");
    }
    assert_eq!(HANDLED.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn the_child_leads_a_process_group_of_its_own() {
    let (status, stdout, _) = output(&mut Command::new(
        &argv(&["cat", "/proc/self/stat"]),
        Path::new("/"),
    ));
    assert_eq!(exited(status), Some(0));
    // pid (comm) state ppid pgrp …; comm is "cat", without spaces.
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(fields[4], fields[0], "{stdout}");
    // SAFETY: getpid cannot fail.
    assert_eq!(fields[3], unsafe { libc::getpid() }.to_string(), "{stdout}");
}

#[test]
fn the_child_dies_with_the_thread_that_started_it() {
    // PR_SET_PDEATHSIG follows the thread: a thread that starts a
    // sleep and ends takes it with it.
    let pid = std::thread::spawn(|| sh("exec sleep 30").spawn().expect("sleep starts").pid)
        .join()
        .unwrap();
    let started = std::time::Instant::now();
    let status = wait(pid);
    assert_eq!(signalled(status), Some(libc::SIGKILL));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn the_child_joins_the_cgroup_file_it_is_given() {
    // Any writable file stands in for cgroup.procs: the child writes
    // "0" to it before exec, and a file it cannot write fails the start.
    let dir = tempfile::tempdir().unwrap();
    let procs = dir.path().join("cgroup.procs");
    let mut command = Command::new(&argv(&["true"]), Path::new("/"));
    command.join_cgroup(File::create(&procs).unwrap());
    let started = command.spawn().expect("true starts");
    assert_eq!(exited(wait(started.pid)), Some(0));
    assert_eq!(std::fs::read_to_string(&procs).unwrap(), "0");

    let mut command = Command::new(&argv(&["true"]), Path::new("/"));
    command.join_cgroup(File::open(&procs).unwrap());
    let e = command.spawn().expect_err("read-only");
    assert!(
        e.to_string()
            .starts_with("cannot join the run's cgroup (cgroup.procs): "),
        "{e}"
    );
}
