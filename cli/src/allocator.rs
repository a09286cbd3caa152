//! The memory allocator of every glovebox process: mimalloc instead of glibc's.
//!
//! Each call moves a file's contents and its messages through three processes, and glibc's
//! allocator took 5–8% of each service's CPU on a read (`perf`, most of it in `_int_malloc`
//! and `malloc_consolidate` for the 4 KiB buffers). With mimalloc a read's p50 is about 1.5%
//! lower (`tests/bench/ab_builds.py`, both orders).
//!
//! Two settings keep the resident size where glibc's left it:
//! - built without transparent huge pages (the crate's `no_thp` feature): with them, every
//!   thread's first allocation made the kernel back 2 MiB, and each process started 8–14 MiB
//!   larger;
//! - free pages go back to the system at once ([`configure`]): with the default delay (a
//!   second, counted only while the thread that freed them works) the broker kept 2.3 times its
//!   size after a flood of 5,000 WebSockets (`glovebox-load-bench`), where glibc's allocator
//!   with a `malloc_trim` after each surge kept 1.09 times; at once, 1.15 times, with no cost
//!   measurable on reads, and nothing to trim by hand.

use std::os::raw::c_int;

/// mimalloc's `mi_option_purge_delay`: milliseconds before freed memory is returned to the
/// system, 0 for at once. The Rust bindings name only some options, so this is its place in
/// `mi_option_e` of the vendored `mimalloc.h`; a test checks it is that option.
const PURGE_DELAY: c_int = 15;

/// Sets the allocator's options; the first thing `main` does.
#[allow(unsafe_code)]
pub fn configure() {
    // SAFETY: mi_option_set stores a value in mimalloc's option table; any thread may call it.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option at [`PURGE_DELAY`] is the purge delay: it has the purge delay's default in
    /// the vendored mimalloc (1,000 ms) and its neighbours do not, so a renumbered
    /// `mi_option_e` in a newer mimalloc fails here rather than setting some other option. Then
    /// `configure` sets it.
    #[test]
    #[allow(unsafe_code)]
    fn the_option_set_is_the_purge_delay() {
        // SAFETY: reading and writing mimalloc's option table.
        unsafe {
            assert_eq!(libmimalloc_sys::mi_option_get(PURGE_DELAY), 1000);
            assert_ne!(libmimalloc_sys::mi_option_get(PURGE_DELAY - 1), 1000);
            assert_ne!(libmimalloc_sys::mi_option_get(PURGE_DELAY + 1), 1000);
        }
        configure();
        // SAFETY: as above.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }, 0);
    }
}
