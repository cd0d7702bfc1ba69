//! Starting an attempt's process without `fork`: `clone(CLONE_VM |
//! CLONE_VFORK)` on a stack of its own, the way glibc's `posix_spawn`
//! does it, and a child that only makes system calls before `exec`.
//!
//! A `fork` copies the replica's page tables (and tears the copy down at
//! `exec`, and makes every page the replica writes afterwards copy-on-write
//! once): at a thousand processes a second, a quarter of the machine's CPU
//! (README, "Real processes"). std's `Command` only avoids the fork (with
//! `posix_spawn`) when it has no `pre_exec` closure, and an attempt's
//! process needs two things `posix_spawn` cannot do: `PR_SET_PDEATHSIG` and
//! joining the run's cgroup.
//!
//! Here the child shares the replica's memory and runs on a stack of its
//! own (one a thread, kept between starts), while the thread that started it waits (`CLONE_VFORK`) until it
//! has called `execve` or exited. Between the two it may only make
//! async-signal-safe system calls, allocate nothing, take no lock, and
//! touch only memory the parent prepared ([`Prepared`]): its argv, its
//! environment, the candidate paths of its program, and a [`Report`] where
//! it leaves the step that failed and its errno before `_exit(127)`. In
//! order, the child:
//!
//! 1. resets every signal handler to `SIG_DFL` (a handler of the
//!    replica's — tokio installs some — running in the child would run on
//!    the replica's memory), keeps what is ignored ignored, except SIGPIPE,
//!    which Rust ignores and std's `Command` resets for its children; all
//!    signals are blocked meanwhile (the parent blocked them around the
//!    `clone`), but glibc's two internal ones (32 and 33), which glibc
//!    neither lets a program block nor reset, and which nothing sends to
//!    the child;
//! 2. makes a process group of its own (`setpgid(0, 0)`);
//! 3. sets `PR_SET_PDEATHSIG` to SIGKILL, then checks that its parent is
//!    still the replica (a replica that died just before would never send
//!    it), and exits if not. The death signal follows the *thread* that
//!    started the child, as it did with the fork: the runner starts
//!    processes from the runtime's worker threads, which live as long as
//!    the replica;
//! 4. joins the run's cgroup (writes "0" to its `cgroup.procs`, opened by
//!    the parent) where there is one;
//! 5. puts its standard streams in place (`dup2`: the parent's ends are
//!    close-on-exec, the child's copies are not);
//! 6. changes to the work directory;
//! 7. unblocks every signal (an empty mask, as std gives its children);
//! 8. executes the program, looked up like `execvp` does (std's `Command`
//!    calls `execvp` with the child's environment in place): a name without
//!    '/' is tried in each directory of the child's `PATH` (the replica's
//!    unless the job sets it; `/bin:/usr/bin` without one), an `EACCES` is
//!    remembered while the search goes on, and a file the kernel cannot
//!    execute (`ENOEXEC`) is run by `/bin/sh`.
//!
//! The parent finds the [`Report`] empty if the child got as far as
//! `exec`; otherwise it reaps the child at once and returns an error that
//! names the step.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;

use nix::libc::{self, c_char, c_int, c_void};

use super::StdioMode;

/// The exit status of a child that failed before `exec`, as
/// `posix_spawn`'s.
const SPAWN_FAILED: c_int = 127;

/// The size of the child's stack: it holds the frame of [`child_main`]
/// and of the libc wrappers it calls (a few hundred bytes); the rest is
/// slack. Pages it does not touch are never allocated.
const STACK_SIZE: usize = 64 * 1024;

/// The highest signal number on Linux (`_NSIG - 1`).
const LAST_SIGNAL: c_int = 64;

/// `execvp`'s search path where the environment has no `PATH` (glibc's
/// `_CS_PATH`).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// The longest file name `execvp` looks up in `PATH` (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// The shell `execvp` runs a file the kernel cannot execute with.
const SHELL: &CStr = c"/bin/sh";

/// A process to start: an attempt's command, in a process group of its
/// own, killed with the thread that starts it (`PR_SET_PDEATHSIG`).
#[derive(Debug)]
pub(super) struct Command {
    argv: Vec<String>,
    workdir: PathBuf,
    /// Changes to the replica's environment, in order: a value to set, or
    /// None to remove the variable.
    env: Vec<(OsString, Option<OsString>)>,
    stdio: StdioMode,
    /// The run's cgroup's `cgroup.procs`, to join.
    cgroup_procs: Option<File>,
}

/// A started process: its pid, and where its output is captured, the
/// parent's ends of its stdout and stderr pipes.
#[derive(Debug)]
pub(super) struct Started {
    pub pid: libc::pid_t,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

impl Command {
    /// `argv[0]` run with `argv[1..]` as its arguments in `workdir` (an
    /// empty `argv` fails to start, as an empty program name does), its
    /// standard streams inherited until [`Command::stdio`] says otherwise.
    pub(super) fn new(argv: &[String], workdir: &Path) -> Command {
        Command {
            argv: argv.to_vec(),
            workdir: workdir.to_path_buf(),
            env: Vec::new(),
            stdio: StdioMode::Inherit,
            cgroup_procs: None,
        }
    }

    /// Sets `key` to `value` in the child's environment.
    pub(super) fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Command {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes `key` from the child's environment (after what was set
    /// before; a later [`Command::env`] sets it again).
    pub(super) fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Command {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Where the child's standard streams go.
    pub(super) fn stdio(&mut self, stdio: StdioMode) -> &mut Command {
        self.stdio = stdio;
        self
    }

    /// Makes the child join a cgroup before `exec`: `procs` is that
    /// cgroup's `cgroup.procs`, open for writing.
    pub(super) fn join_cgroup(&mut self, procs: File) -> &mut Command {
        self.cgroup_procs = Some(procs);
        self
    }

    /// Starts the process. Its errors say which step failed: one of the
    /// parent's (an argument with a NUL byte, no pipe, no memory for the
    /// child's stack, no process) or one of the child's (see the module's
    /// documentation), with the system's error.
    pub(super) fn spawn(&self) -> io::Result<Started> {
        let mut prepared = Prepared::new(self, std::env::vars_os())?;
        let stdio = Stdio::open(self.stdio)?;
        let stack = match SPARE_STACK.take() {
            Some(stack) => stack,
            None => Stack::map()?,
        };
        let mut report = Report::default();
        let args = ChildArgs {
            shell_argv: prepared.shell_argv.as_mut_ptr(),
            prepared: &prepared,
            stdio: [
                (stdio.stdin_fd(), libc::STDIN_FILENO),
                (stdio.stdout_fd(), libc::STDOUT_FILENO),
                (stdio.stderr_fd(), libc::STDERR_FILENO),
            ],
            cgroup_procs: self.cgroup_procs.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            // SAFETY: getpid cannot fail and touches no memory.
            parent: unsafe { libc::getpid() },
            report: &raw mut report,
        };
        let pid = clone_child(&stack, &args)?;
        // The child has called `execve` or exited: the stack is no one's,
        // and this thread's next start can have it.
        SPARE_STACK.set(Some(stack));
        // SAFETY: the report is a local; the child that wrote it is gone.
        let report = unsafe { ptr::read_volatile(&raw const report) };
        if report.errno != 0 {
            reap(pid);
            return Err(prepared.error(report));
        }
        // The child's ends of the pipes, and /dev/null, close here.
        let Stdio { stdout, stderr, .. } = stdio;
        Ok(Started {
            pid,
            stdout: stdout.map(|pipe| pipe.parent),
            stderr: stderr.map(|pipe| pipe.parent),
        })
    }
}

/// What the child needs, made by the parent: C strings and the arrays of
/// their pointers, NULL-terminated.
struct Prepared {
    /// The program as the job gave it, for the errors.
    program: String,
    /// The search path where the program is looked up in it.
    searched: Option<OsString>,
    /// The paths to try, in order (one where the program is a path); the
    /// pointers in `candidate_ptrs` point into them.
    _candidates: Vec<CString>,
    candidate_ptrs: Vec<*const c_char>,
    /// The errno when there is no candidate at all (an empty program name,
    /// or one too long to look up).
    no_candidate: c_int,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    /// `/bin/sh`, a slot for the candidate, then `argv[1..]`: the argv of
    /// a file the kernel cannot execute. The child writes the slot (through
    /// [`ChildArgs::shell_argv`]).
    shell_argv: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const c_char>,
    workdir: CString,
    /// The signal mask the program starts with: empty.
    empty_mask: libc::sigset_t,
}

impl Prepared {
    fn new(
        command: &Command,
        parent_env: impl Iterator<Item = (OsString, OsString)>,
    ) -> io::Result<Prepared> {
        let argv: Vec<&str> = if command.argv.is_empty() {
            vec![""]
        } else {
            command.argv.iter().map(String::as_str).collect()
        };
        let argv = argv
            .iter()
            .enumerate()
            .map(|(i, arg)| c_string(arg.as_bytes(), || format!("argv[{i}]")))
            .collect::<io::Result<Vec<CString>>>()?;
        let environment = environment(parent_env, &command.env);
        let envp = environment
            .iter()
            .map(|(key, value)| {
                let mut pair = key.as_bytes().to_vec();
                pair.push(b'=');
                pair.extend_from_slice(value.as_bytes());
                c_string(&pair, || format!("the environment variable {key:?}"))
            })
            .collect::<io::Result<Vec<CString>>>()?;
        let program = argv[0].as_bytes();
        let (candidates, searched, no_candidate) = if program.is_empty() {
            (Vec::new(), None, libc::ENOENT)
        } else if program.contains(&b'/') {
            (vec![argv[0].clone()], None, 0)
        } else {
            let path = environment
                .get(OsStr::new("PATH"))
                .cloned()
                .unwrap_or_else(|| OsStr::from_bytes(DEFAULT_PATH).to_owned());
            if program.len() >= NAME_MAX {
                (Vec::new(), Some(path), libc::ENAMETOOLONG)
            } else {
                (
                    search_path(path.as_bytes(), program),
                    Some(path),
                    libc::ENOENT,
                )
            }
        };
        let workdir = c_string(command.workdir.as_os_str().as_bytes(), || {
            "the work directory".to_string()
        })?;
        let mut empty_mask = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initializes the set it is given.
        let empty_mask = unsafe {
            libc::sigemptyset(empty_mask.as_mut_ptr());
            empty_mask.assume_init()
        };
        let shell_argv = [SHELL.as_ptr(), ptr::null()]
            .into_iter()
            .chain(argv.iter().skip(1).map(|arg| arg.as_ptr()))
            .chain([ptr::null()])
            .collect();
        Ok(Prepared {
            program: command.argv.first().cloned().unwrap_or_default(),
            searched,
            candidate_ptrs: null_terminated(&candidates),
            _candidates: candidates,
            no_candidate,
            argv_ptrs: null_terminated(&argv),
            _argv: argv,
            shell_argv,
            envp_ptrs: null_terminated(&envp),
            _envp: envp,
            workdir,
            empty_mask,
        })
    }

    /// The error of a child that failed at `report`'s step.
    fn error(&self, report: Report) -> io::Error {
        let os = io::Error::from_raw_os_error(report.errno);
        let step = match Step::from_code(report.step) {
            Step::ProcessGroup => "cannot make its process group (setpgid)".to_string(),
            Step::DeathSignal => "cannot set its death signal (PR_SET_PDEATHSIG)".to_string(),
            Step::ParentGone => "the replica was gone before the command could start".to_string(),
            Step::Cgroup => "cannot join the run's cgroup (cgroup.procs)".to_string(),
            Step::Stdio => "cannot set up its standard streams (dup2)".to_string(),
            Step::Workdir => "cannot change to the work directory".to_string(),
            Step::Exec => match &self.searched {
                Some(path) if report.errno == libc::ENOENT => {
                    format!("cannot find {:?} in PATH {:?}", self.program, path)
                }
                Some(path) => format!(
                    "cannot execute {:?} (looked up in PATH {:?})",
                    self.program, path
                ),
                None => format!("cannot execute {:?}", self.program),
            },
        };
        io::Error::new(os.kind(), format!("{step}: {os}"))
    }
}

/// The child's environment, sorted by name as std's `Command` gives it:
/// the replica's (`parent`) with `changes` applied in order.
fn environment(
    parent: impl Iterator<Item = (OsString, OsString)>,
    changes: &[(OsString, Option<OsString>)],
) -> BTreeMap<OsString, OsString> {
    let mut environment: BTreeMap<OsString, OsString> = parent.collect();
    for (key, value) in changes {
        match value {
            Some(value) => environment.insert(key.clone(), value.clone()),
            None => environment.remove(key),
        };
    }
    environment
}

/// The paths `execvp` tries for `program` in `path`, in order: each entry
/// joined with it, an empty entry meaning the work directory.
fn search_path(path: &[u8], program: &[u8]) -> Vec<CString> {
    path.split(|&b| b == b':')
        .filter_map(|dir| {
            let mut candidate = dir.to_vec();
            if !dir.is_empty() {
                candidate.push(b'/');
            }
            candidate.extend_from_slice(program);
            // An entry with a NUL byte cannot be passed to execve; the
            // environment's own check refuses it before this is used.
            CString::new(candidate).ok()
        })
        .collect()
}

fn c_string(bytes: &[u8], what: impl FnOnce() -> String) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} holds a NUL byte", what()),
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain([ptr::null()])
        .collect()
}

/// The child's standard streams: stdin from /dev/null and two pipes
/// (capture), or the replica's own (inherit).
struct Stdio {
    stdin: Option<OwnedFd>,
    stdout: Option<Pipe>,
    stderr: Option<Pipe>,
}

/// A pipe for one output stream: the child's end, the parent's end. Both
/// close-on-exec: the child's `dup2` copy is not.
struct Pipe {
    child: OwnedFd,
    parent: OwnedFd,
}

impl Stdio {
    fn open(mode: StdioMode) -> io::Result<Stdio> {
        match mode {
            StdioMode::Inherit => Ok(Stdio {
                stdin: None,
                stdout: None,
                stderr: None,
            }),
            StdioMode::Capture => {
                let stdin = File::open("/dev/null").map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot open /dev/null for its stdin: {e}"),
                    )
                })?;
                Ok(Stdio {
                    stdin: Some(stdin.into()),
                    stdout: Some(Pipe::new()?),
                    stderr: Some(Pipe::new()?),
                })
            }
        }
    }

    fn stdin_fd(&self) -> RawFd {
        self.stdin.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    fn stdout_fd(&self) -> RawFd {
        self.stdout
            .as_ref()
            .map_or(-1, |pipe| pipe.child.as_raw_fd())
    }

    fn stderr_fd(&self) -> RawFd {
        self.stderr
            .as_ref()
            .map_or(-1, |pipe| pipe.child.as_raw_fd())
    }
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [-1 as c_int; 2];
        // SAFETY: pipe2 writes two file descriptors into the array, which
        // has room for them.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot make a pipe for its output: {e}"),
            ));
        }
        // SAFETY: both descriptors were just opened and are owned by no one
        // else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Pipe {
            child: write,
            parent: read,
        })
    }
}

thread_local! {
    /// A stack for the next child this thread starts: a thread starts one
    /// child at a time, and that child is off the stack (exec'ed or exited)
    /// before the start returns, so one stack a thread serves them all
    /// without a `mmap`, `munmap` (and its TLB shootdown) and page fault
    /// per process. Unmapped when the thread exits.
    static SPARE_STACK: std::cell::Cell<Option<Stack>> = const { std::cell::Cell::new(None) };
}

/// The child's stack: anonymous memory, unmapped when dropped.
struct Stack {
    base: *mut c_void,
}

impl Stack {
    fn map() -> io::Result<Stack> {
        // SAFETY: an anonymous private mapping chosen by the kernel touches
        // no existing memory.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                STACK_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot map a stack for the child: {e}"),
            ));
        }
        Ok(Stack { base })
    }

    /// The stack's top, where the child's frames start (the stack grows
    /// down on x86_64 and aarch64).
    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping, which is STACK_SIZE long.
        unsafe { self.base.cast::<u8>().add(STACK_SIZE).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping is this Stack's, and no one uses it any more:
        // the child ran on it only until `execve` or `_exit`, both of which
        // happened before `clone` returned.
        unsafe {
            libc::munmap(self.base, STACK_SIZE);
        }
    }
}

/// The step at which the child failed, as it leaves it in its [`Report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
enum Step {
    ProcessGroup = 1,
    DeathSignal,
    ParentGone,
    Cgroup,
    Stdio,
    Workdir,
    Exec,
}

impl Step {
    fn from_code(code: u32) -> Step {
        [
            Step::ProcessGroup,
            Step::DeathSignal,
            Step::ParentGone,
            Step::Cgroup,
            Step::Stdio,
            Step::Workdir,
        ]
        .into_iter()
        .find(|&step| step as u32 == code)
        .unwrap_or(Step::Exec)
    }
}

/// Where the child says why it did not get to `exec`: written by it
/// (volatile, through a pointer), read by the parent once the child has
/// exited. All zeros: the child reached `execve` and it succeeded (or the
/// child was killed before it could say anything; then its exit says so).
#[derive(Debug, Default, Clone, Copy)]
struct Report {
    step: u32,
    errno: c_int,
}

/// Everything [`child_main`] reads and writes, all of it the parent's and
/// prepared before the `clone`.
struct ChildArgs<'a> {
    prepared: &'a Prepared,
    /// `prepared.shell_argv`'s buffer, the one thing of it the child writes.
    shell_argv: *mut *const c_char,
    /// (descriptor, standard stream it becomes), -1 to leave the stream.
    stdio: [(RawFd, RawFd); 3],
    /// `cgroup.procs` to write "0" to, -1 for none.
    cgroup_procs: RawFd,
    /// The replica's pid: the child's parent, as long as it lives.
    parent: libc::pid_t,
    report: *mut Report,
}

/// Starts [`child_main`] with `args` on `stack`, all signals blocked around
/// it, and returns once the child has called `execve` or exited.
fn clone_child(stack: &Stack, args: &ChildArgs<'_>) -> io::Result<libc::pid_t> {
    let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initializes `all`; pthread_sigmask reads it and
    // writes the thread's mask into `old`, both locals.
    let blocked = unsafe {
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr())
    };
    if blocked != 0 {
        let e = io::Error::from_raw_os_error(blocked);
        return Err(io::Error::new(
            e.kind(),
            format!("cannot block signals to start it: {e}"),
        ));
    }
    // SAFETY: the child runs `child_main` on its own stack (`stack`, which
    // outlives the call) and shares this process's memory; CLONE_VFORK
    // suspends this thread until the child has called `execve` or exited,
    // so `args` and everything it points to (on this thread's stack and
    // heap) stays in place and is touched by no one else meanwhile. The
    // child makes only async-signal-safe system calls through libc's
    // wrappers, allocates nothing and takes no lock (see `child_main`). No
    // signal handler can run in it: all signals are blocked until it has
    // reset every handler.
    let pid = unsafe {
        libc::clone(
            child_main,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            ptr::from_ref(args).cast_mut().cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: `old` was initialized by the pthread_sigmask above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), ptr::null_mut());
    }
    if pid < 0 {
        return Err(io::Error::new(
            clone_error.kind(),
            format!("cannot create its process (clone): {clone_error}"),
        ));
    }
    Ok(pid)
}

/// Reaps a child that failed before `exec` (it has exited, or is about to:
/// the wait is short).
fn reap(pid: libc::pid_t) {
    loop {
        // SAFETY: waitpid with a null status pointer writes nothing; the
        // pid is this replica's child, which no one else reaps.
        let reaped = unsafe { libc::waitpid(pid, ptr::null_mut(), 0) };
        if reaped >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// The child, from `clone` to `execve`. It shares the replica's memory while
/// the thread that started it waits: it only reads `ChildArgs` and
/// `Prepared`, writes the `Report` and one slot of the shell's argv, and
/// calls async-signal-safe libc wrappers (no allocation, no lock, nothing
/// that can panic). Never returns.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `ChildArgs` that `clone_child` passed, alive and
    // untouched by the suspended parent until this child execs or exits.
    let args = unsafe { &*arg.cast::<ChildArgs<'_>>() };
    // SAFETY: see each step: libc's wrappers of system calls, on memory the
    // parent prepared.
    let (step, errno) = unsafe { child_steps(args) };
    // SAFETY: the report is the parent's, which waits; volatile, so that the
    // write is not assumed dead before `_exit`.
    unsafe {
        ptr::write_volatile(
            args.report,
            Report {
                step: step as u32,
                errno: if errno == 0 { libc::ECHILD } else { errno },
            },
        );
        libc::_exit(SPAWN_FAILED)
    }
}

/// The errno of the last failed call, read without allocating.
fn errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno, always
    // valid (here the parent thread's, which is suspended: glibc's own
    // posix_spawn shares it the same way).
    unsafe { *libc::__errno_location() }
}

/// The child's steps (module documentation); returns the one that failed
/// and its errno (`execve` returns only when it fails).
///
/// # Safety
/// Only in the child of [`clone_child`], with its `args`.
unsafe fn child_steps(args: &ChildArgs<'_>) -> (Step, c_int) {
    let prepared = args.prepared;
    // SAFETY (the whole block): every call is a libc wrapper of one system
    // call, async-signal-safe, given pointers to locals or to the parent's
    // prepared, NULL-terminated arrays of C strings.
    unsafe {
        // 1. Signal handlers to SIG_DFL; what is ignored stays ignored but
        // SIGPIPE. glibc refuses its own two (32 and 33) with EINVAL; they
        // stay blocked here too, and `exec` resets them.
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=LAST_SIGNAL {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, ptr::null(), &mut current) != 0 {
                continue;
            }
            let keep = current.sa_sigaction == libc::SIG_DFL
                || (current.sa_sigaction == libc::SIG_IGN && signal != libc::SIGPIPE);
            if !keep {
                libc::sigaction(signal, &default, ptr::null_mut());
            }
        }

        // 2. A process group of its own.
        if libc::setpgid(0, 0) != 0 {
            return (Step::ProcessGroup, errno());
        }

        // 3. Killed with the thread that started it; gone already if the
        // replica died before the death signal was set.
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return (Step::DeathSignal, errno());
        }
        if libc::getppid() != args.parent {
            return (Step::ParentGone, libc::ESRCH);
        }

        // 4. Into the run's cgroup.
        if args.cgroup_procs >= 0 {
            loop {
                let written = libc::write(args.cgroup_procs, b"0".as_ptr().cast(), 1);
                if written == 1 {
                    break;
                }
                if written < 0 && errno() == libc::EINTR {
                    continue;
                }
                return (Step::Cgroup, if written < 0 { errno() } else { libc::EIO });
            }
        }

        // 5. Standard streams: the copies are not close-on-exec, and a
        // descriptor already in place loses its close-on-exec flag.
        for (fd, stream) in args.stdio {
            if fd < 0 {
                continue;
            }
            let done = if fd == stream {
                libc::fcntl(stream, libc::F_SETFD, 0) != -1
            } else {
                loop {
                    if libc::dup2(fd, stream) != -1 {
                        break true;
                    }
                    if errno() != libc::EINTR {
                        break false;
                    }
                }
            };
            if !done {
                return (Step::Stdio, errno());
            }
        }

        // 6. The work directory.
        if libc::chdir(prepared.workdir.as_ptr()) != 0 {
            return (Step::Workdir, errno());
        }

        // 7. No signal blocked.
        libc::pthread_sigmask(libc::SIG_SETMASK, &prepared.empty_mask, ptr::null_mut());

        // 8. execvp's search.
        let argv = prepared.argv_ptrs.as_ptr();
        let envp = prepared.envp_ptrs.as_ptr();
        let shell_argv = args.shell_argv;
        let mut error = prepared.no_candidate;
        let mut denied = false;
        for &candidate in &prepared.candidate_ptrs {
            if candidate.is_null() {
                break;
            }
            libc::execve(candidate, argv, envp);
            error = errno();
            if error == libc::ENOEXEC {
                // The slot after the shell's name is the parent's, for this.
                ptr::write_volatile(shell_argv.add(1), candidate);
                libc::execve(SHELL.as_ptr(), shell_argv, envp);
                error = errno();
            }
            match error {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => return (Step::Exec, error),
            }
        }
        (Step::Exec, if denied { libc::EACCES } else { error })
    }
}

#[cfg(test)]
mod tests {
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

        let mut command = Command::new(&argv(&["cronlease-found", "x"]), Path::new("/"));
        command.env("PATH", &path);
        let (status, stdout, stderr) = output(&mut command);
        assert_eq!(
            (exited(status), stdout.as_str()),
            (Some(0), "found x in /\n"),
            "{stderr}"
        );

        let mut command = Command::new(&argv(&["cronlease-no-shebang", "y"]), Path::new("/"));
        command.env("PATH", &path);
        let (status, stdout, stderr) = output(&mut command);
        assert_eq!(
            (exited(status), stdout.as_str()),
            (Some(0), "plain y\n"),
            "{stderr}"
        );

        // Only the denied one: EACCES, as execvp says.
        let mut command = Command::new(&argv(&["cronlease-found"]), Path::new("/"));
        command.env("PATH", other.path());
        let e = command.spawn().expect_err("not executable");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    }

    #[test]
    fn the_environment_is_the_replicas_with_the_changes_in_order() {
        let parent = [
            ("PATH", "/bin"),
            ("NOTIFY_SOCKET", "/run/systemd/notify"),
            ("KEEP", "1"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let changes = [
            ("GREETING", Some("hello")),
            ("NOTIFY_SOCKET", None),
            ("KEEP", Some("2")),
            ("GONE", Some("x")),
            ("GONE", None),
        ]
        .map(|(k, v)| (OsString::from(k), v.map(OsString::from)));
        let environment = environment(parent.into_iter(), &changes);
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
    fn removed_variables_do_not_reach_the_child() {
        let mut command = sh("echo ${NOTIFY_SOCKET-unset} ${GREETING-unset}");
        command
            .env("NOTIFY_SOCKET", "/run/systemd/notify")
            .env("GREETING", "hello")
            .env_remove("NOTIFY_SOCKET");
        let (_, stdout, _) = output(&mut command);
        assert_eq!(stdout, "unset hello\n");
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
}
