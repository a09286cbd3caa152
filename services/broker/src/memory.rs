//! Gives memory back to the system after a surge of connections. Each WebSocket holds read and
//! write buffers of a hundred KiB or so; when hundreds close at once, glibc's allocator keeps the
//! freed pages for reuse, so the broker's resident size stays near its peak long after the surge
//! (1.3× its size before a 5,000-socket flood, in `glovebox-load-bench`). Once enough connections
//! have closed since the last look, the broker asks the allocator to return its free pages
//! (`malloc_trim`), off the async threads.

use std::sync::Weak;
use std::time::Duration;

use crate::admission::Admission;

/// How often the broker looks at how many connections have closed.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// Closed connections since the last trim that make the next look trim.
const TRIM_AFTER_CLOSED: u64 = 32;

/// Whether to trim now, given the closed-connection count now and at the last trim.
fn should_trim(closed_now: u64, closed_at_last_trim: u64) -> bool {
    closed_now.saturating_sub(closed_at_last_trim) >= TRIM_AFTER_CLOSED
}

/// Trims after surges until the broker's admission is gone.
pub async fn trim_after_surges(admission: Weak<Admission>) {
    let mut trimmed_at = 0;
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let Some(admission) = admission.upgrade() else {
            return;
        };
        let closed = admission.closed();
        if should_trim(closed, trimmed_at) {
            trimmed_at = closed;
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
    fn trims_only_after_enough_connections_closed_since_the_last_trim() {
        for (now, last, trim) in [
            (0, 0, false),
            (TRIM_AFTER_CLOSED - 1, 0, false),
            (TRIM_AFTER_CLOSED, 0, true),
            (1_000, 990, false),
            (1_000, 1_000 - TRIM_AFTER_CLOSED, true),
            // A count that went backwards never trims (and never underflows).
            (5, 10, false),
        ] {
            assert_eq!(
                should_trim(now, last),
                trim,
                "now {now}, last trim at {last}"
            );
        }
    }
}
