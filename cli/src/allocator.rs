//! The allocator of the `cronlease` binary and of the benchmark's
//! replicas (`examples/bench_replica.rs`, `examples/bench_embedded_replica.rs`
//! include this file), so that what the benchmark measures is what runs:
//! mimalloc, not glibc's malloc, whose `malloc`/`free` take a large share
//! of a busy replica's CPU (a replica allocates per claim, run and
//! outcome, from many threads). Built without transparent huge pages (the
//! mimalloc crate's `no_thp`): with them an idle replica keeps whole huge
//! pages for a few kilobytes of live data. Not part of the library: a
//! library never picks the allocator.

use std::ffi::{c_int, c_long};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_t` (its
/// `include/mimalloc.h`, as built by libmimalloc-sys 0.1.49, which
/// declares the function but not this option).
const MI_OPTION_PURGE_DELAY: c_int = 15;

unsafe extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
    #[cfg(test)]
    fn mi_option_get(option: c_int) -> c_long;
}

/// Memory freed in whole pages goes back to the system at once instead
/// of a second later, and only if the thread that freed it allocates
/// again: a replica's start-up frees much of what it allocated (the
/// config's parse, the jobs' catch-up) and then idles, so with the
/// delay an idle replica keeps memory it does not use (the guide,
/// "Performance", has the figures). Called first thing in `main`.
pub fn return_freed_memory_at_once() {
    // SAFETY: mimalloc's options are atomics that it reads when it
    // purges; setting one is allowed at any time, from any thread.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_whose_default_is_a_second() {
        // A mimalloc that numbered its options differently would make the
        // constant name another option: its default would differ
        // (`src/options.c`: 1,000 ms, whatever `mimalloc.h` says).
        // SAFETY: reading an option is allowed at any time.
        let default = unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(default, 1_000);
    }
}
