//! Starting an attempt's process without `fork`: `clone(CLONE_VM |
//! CLONE_VFORK)` on a stack of its own, the way glibc's `posix_spawn`
//! does it, and a child that only makes system calls before `exec`.
//!
//! A `fork` copies the replica's page tables (and tears the copy down at
//! `exec`, and makes every page the replica writes afterwards copy-on-write
//! once): at a thousand processes a second, a quarter of the machine's CPU
//! (the guide, "Performance"). std's `Command` only avoids the fork (with
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

use nix::libc::{self, c_char, c_int};

use super::StdioMode;
use child::{ChildArgs, Report, SPARE_STACK, Stack, Step, clone_child, reap};

mod child;
#[cfg(test)]
mod tests;

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
    /// The child's environment, in order: a value to set, or None to
    /// remove the variable. It starts empty: nothing of the replica's
    /// reaches the child unless set here.
    env: Vec<(OsString, OsString)>,
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
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
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
        let mut prepared = Prepared::new(self)?;
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
    /// The limit on open files the program starts with: the replica's
    /// before it raised its own ([`raise_open_files_limit`]).
    nofile: Option<libc::rlimit>,
}

/// The soft and hard limits on open files the replica started with,
/// before it raised its own for its servers and connections.
static RUNS_NOFILE: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();

/// Raises this process's soft limit on open files to its hard limit, so
/// that the limit systemd (or a shell) gives by default, often 1024, does
/// not cap the replica's Redis connections, spool and HTTP servers (which
/// take at most a quarter of it: `http::connection_limit`). Runs still
/// start with the limit the replica had: a program that expects the usual
/// 1,024 (`select`) keeps it. Called once, at start.
pub fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                let _ = RUNS_NOFILE.set((soft, hard));
                tracing::info!(
                    from = soft,
                    to = hard,
                    "raised the soft limit on open files (runs keep the one they had)"
                );
            }
            Err(e) => {
                tracing::warn!(soft, hard, error = %e, "cannot raise the soft limit on open files")
            }
        },
        Ok((soft, _)) => tracing::debug!(soft, "the soft limit on open files is the hard limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read the limit on open files"),
    }
}

impl Prepared {
    fn new(command: &Command) -> io::Result<Prepared> {
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
        let environment = environment(&command.env);
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
            nofile: RUNS_NOFILE.get().map(|&(soft, hard)| libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            }),
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
/// what was set, a later value of a name replacing an earlier one. Nothing
/// of the replica's own environment is in it.
fn environment(set: &[(OsString, OsString)]) -> BTreeMap<OsString, OsString> {
    set.iter().cloned().collect()
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
