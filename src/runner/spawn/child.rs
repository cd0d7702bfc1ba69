//! The child's side of a start (see the module above): its stack, what
//! it is given and reports, the `clone` that starts it, and its steps from
//! `clone` to `execve`, which only make system calls on memory the parent
//! prepared.

use std::io;
use std::os::fd::RawFd;
use std::ptr;

use nix::libc::{self, c_char, c_int, c_void};

use super::{Prepared, SHELL};

/// The exit status of a child that failed before `exec`, as
/// `posix_spawn`'s.
const SPAWN_FAILED: c_int = 127;

/// The size of the child's stack: it holds the frame of [`child_main`]
/// and of the libc wrappers it calls (a few hundred bytes); the rest is
/// slack. Pages it does not touch are never allocated.
const STACK_SIZE: usize = 64 * 1024;

/// The highest signal number on Linux (`_NSIG - 1`).
const LAST_SIGNAL: c_int = 64;

thread_local! {
    /// A stack for the next child this thread starts: a thread starts one
    /// child at a time, and that child is off the stack (exec'ed or exited)
    /// before the start returns, so one stack a thread serves them all
    /// without a `mmap`, `munmap` (and its TLB shootdown) and page fault
    /// per process. Unmapped when the thread exits.
    pub(super) static SPARE_STACK: std::cell::Cell<Option<Stack>> = const { std::cell::Cell::new(None) };
}

/// The child's stack: anonymous memory, unmapped when dropped.
pub(super) struct Stack {
    base: *mut c_void,
}

impl Stack {
    pub(super) fn map() -> io::Result<Stack> {
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
pub(super) enum Step {
    ProcessGroup = 1,
    DeathSignal,
    ParentGone,
    Cgroup,
    Stdio,
    Workdir,
    Exec,
}

impl Step {
    pub(super) fn from_code(code: u32) -> Step {
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
pub(super) struct Report {
    pub(super) step: u32,
    pub(super) errno: c_int,
}

/// Everything [`child_main`] reads and writes, all of it the parent's and
/// prepared before the `clone`.
pub(super) struct ChildArgs<'a> {
    pub(super) prepared: &'a Prepared,
    /// `prepared.shell_argv`'s buffer, the one thing of it the child writes.
    pub(super) shell_argv: *mut *const c_char,
    /// (descriptor, standard stream it becomes), -1 to leave the stream.
    pub(super) stdio: [(RawFd, RawFd); 3],
    /// `cgroup.procs` to write "0" to, -1 for none.
    pub(super) cgroup_procs: RawFd,
    /// The replica's pid: the child's parent, as long as it lives.
    pub(super) parent: libc::pid_t,
    pub(super) report: *mut Report,
}

/// Starts [`child_main`] with `args` on `stack`, all signals blocked around
/// it, and returns once the child has called `execve` or exited.
pub(super) fn clone_child(stack: &Stack, args: &ChildArgs<'_>) -> io::Result<libc::pid_t> {
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
pub(super) fn reap(pid: libc::pid_t) {
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

// Long by design: the child's steps after the clone, in the order they must run, each a system call
// on memory the parent prepared.
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

        // 7. No signal blocked; the replica's own limit on open files
        // lowered back to what it started with (lowering cannot fail).
        libc::pthread_sigmask(libc::SIG_SETMASK, &prepared.empty_mask, ptr::null_mut());
        if let Some(nofile) = &prepared.nofile {
            libc::setrlimit(libc::RLIMIT_NOFILE, nofile);
        }

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
