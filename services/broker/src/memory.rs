//! Gives memory back to the system after a surge. Each WebSocket holds read and write buffers
//! of a hundred KiB or so, and each call in flight its frames and futures; when hundreds close or
//! finish at once, glibc's allocator keeps the freed pages for reuse, so the broker's resident
//! size stays near its peak long after the surge (1.3× its size before a 5,000-socket flood, and
//! before a flood of 8 × 32 calls in flight, in `glovebox-load-bench`). Once enough connections
//! have closed since the last look, or — with no call running now — enough calls have finished
//! or had to queue for a place (a flood, however slowly the machine served it), the broker asks
//! the allocator to return its free pages (`malloc_trim`), off the async threads. (The `glovebox`
//! binary allocates with mimalloc, which returns free pages by itself (`cli/src/allocator.rs`);
//! the trim is then left the C libraries' allocations.)

use std::sync::Weak;
use std::time::Duration;

use crate::app::App;

/// How often the broker looks at how many connections have closed and calls finished.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// Closed connections since the last trim that make the next look trim.
const TRIM_AFTER_CLOSED: u64 = 32;

/// Calls finished since the last trim that make the next look with no call running trim.
const TRIM_AFTER_CALLS: u64 = 1024;

/// Calls that queued for a place since the last trim that make the next look with no call
/// running trim: a queue that long held its calls' frames and futures all at once, even on a
/// machine too slow to finish [`TRIM_AFTER_CALLS`] of them.
const TRIM_AFTER_QUEUED: u64 = 64;

/// What one look sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Activity {
    /// Connections closed since the broker started.
    closed: u64,
    /// Calls finished since the broker started.
    finished: u64,
    /// Calls that queued for a place since the broker started.
    queued: u64,
    /// No call runs or waits.
    idle: bool,
}

/// Whether to trim now, given what the broker sees now and saw at the last trim.
fn should_trim(now: Activity, at_last_trim: Activity) -> bool {
    let since = |now: u64, then: u64| now.saturating_sub(then);
    since(now.closed, at_last_trim.closed) >= TRIM_AFTER_CLOSED
        || (now.idle
            && (since(now.finished, at_last_trim.finished) >= TRIM_AFTER_CALLS
                || since(now.queued, at_last_trim.queued) >= TRIM_AFTER_QUEUED))
}

/// Trims after surges until the broker is gone.
pub async fn trim_after_surges(app: Weak<App>) {
    let mut trimmed_at = Activity::default();
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let Some(app) = app.upgrade() else {
            return;
        };
        let now = Activity {
            closed: app.admission.closed(),
            finished: app.calls.finished(),
            queued: app.calls.queued(),
            idle: app.calls.idle(),
        };
        drop(app);
        if should_trim(now, trimmed_at) {
            trimmed_at = now;
            let _ = tokio::task::spawn_blocking(release_free_pages).await;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn release_free_pages() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_pages() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_after_a_surge_of_connections_or_of_calls_that_has_passed() {
        let at = |closed, finished, idle| Activity {
            closed,
            finished,
            queued: 0,
            idle,
        };
        let queued = |queued, idle| Activity {
            queued,
            idle,
            ..Activity::default()
        };
        for (now, last, trim) in [
            (at(0, 0, true), at(0, 0, true), false),
            (at(TRIM_AFTER_CLOSED - 1, 0, true), at(0, 0, true), false),
            (at(TRIM_AFTER_CLOSED, 0, false), at(0, 0, true), true),
            (at(1_000, 0, true), at(990, 0, true), false),
            (
                at(1_000, 0, true),
                at(1_000 - TRIM_AFTER_CLOSED, 0, true),
                true,
            ),
            // Calls: only once none runs.
            (at(0, TRIM_AFTER_CALLS, false), at(0, 0, true), false),
            (at(0, TRIM_AFTER_CALLS, true), at(0, 0, true), true),
            (at(0, TRIM_AFTER_CALLS - 1, true), at(0, 0, true), false),
            (
                at(0, 5_000, true),
                at(0, 5_000 - TRIM_AFTER_CALLS + 1, false),
                false,
            ),
            // A queue of calls (a flood the machine served slowly): only once none runs.
            (queued(TRIM_AFTER_QUEUED, true), queued(0, true), true),
            (queued(TRIM_AFTER_QUEUED, false), queued(0, true), false),
            (queued(TRIM_AFTER_QUEUED - 1, true), queued(0, true), false),
            (
                queued(500, true),
                queued(500 - TRIM_AFTER_QUEUED + 1, true),
                false,
            ),
            // A count that went backwards never trims (and never underflows).
            (at(5, 5, true), at(10, 10_000, true), false),
            (queued(5, true), queued(10_000, true), false),
        ] {
            assert_eq!(
                should_trim(now, last),
                trim,
                "now {now:?}, last trim at {last:?}"
            );
        }
    }
}
