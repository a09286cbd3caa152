//! Ids the services and the bridge make: random ones (`ask-…`, `conn-…`) and ones whose text
//! sorts in the order they were made (`call-…`, `stdio-…`), which the audit indexes. Unique, not
//! secret.

/// A random id with a prefix, e.g. `ask-3f2a...`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", hex::encode(unique_bytes::<12>()))
}

/// A unique id with a prefix whose text sorts in the order the ids were made (by the
/// millisecond, then in the order this process made them), e.g. `call-019adf3c2b1e5f...`. A
/// call's id is an index key of the audit: made in order, each commit adds to the index's last
/// page, where a random id put every call on a page of its own somewhere in the index (a page
/// read and written per call).
pub fn new_ordered_id(prefix: &str) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    // 48 bits of milliseconds: in order until the year 10889.
    let ms = ms & 0xffff_ffff_ffff;
    format!("{prefix}-{ms:012x}{:016x}", next_in_sequence())
}

/// The next number of this process's sequence of ordered ids: a count from a random start, so a
/// process never repeats one, and two processes (a broker and a bridge, or one restarted) share
/// one only if their counts, started at random in 2^64, meet. Counting, where each id once took
/// its own random bytes, saves a `getrandom` system call on every call the broker or a bridge
/// makes.
fn next_in_sequence() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = *START.get_or_init(|| u64::from_le_bytes(unique_bytes::<8>()));
    start.wrapping_add(COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// `N` random bytes (ids must be unique, not secret: the clock if the kernel gives none).
fn unique_bytes<const N: usize>() -> [u8; N] {
    random_bytes::<N>().unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            .to_le_bytes();
        let mut bytes = [0u8; N];
        for (b, n) in bytes.iter_mut().zip(nanos) {
            *b = n;
        }
        bytes
    })
}

/// `N` bytes from the kernel's random source, if it gives them.
fn random_bytes<const N: usize>() -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ordered_ids_sort_as_they_were_made_and_are_unique() {
        let mut made = Vec::new();
        let until = std::time::Instant::now() + Duration::from_millis(5);
        while std::time::Instant::now() < until || made.len() < 1000 {
            made.push(new_ordered_id("call"));
        }
        for id in &made {
            let hex = id.strip_prefix("call-").unwrap();
            assert_eq!(hex.len(), 28, "{id}");
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
        // Ids sort in the order they were made, within a millisecond too (the count would have
        // to wrap around 2^64 in this test's thousand ids to break it).
        let ms = |id: &String| id[5..17].to_owned();
        for pair in made.windows(2) {
            assert!(ms(&pair[0]) <= ms(&pair[1]), "{pair:?}");
            assert!(pair[0] < pair[1], "{pair:?}");
        }
        assert!(
            ms(&made[0]) < ms(made.last().unwrap()),
            "the test spans milliseconds"
        );
        let distinct: std::collections::HashSet<_> = made.iter().collect();
        assert_eq!(distinct.len(), made.len());
    }
}
