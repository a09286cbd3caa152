//! A thread that does deferred work at most once per interval, off the audit writer's path:
//! writing the head file, and folding SQLite's WAL into the database. The writer only offers the
//! newest item and goes on; an item offered while the thread waits out its interval replaces the
//! one before (only the newest matters), and the thread is woken only when it waits for work —
//! waking it on every commit would cost the writer a thread switch per batch.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The handle to the thread. Dropping it runs the item still pending, then ends the thread.
pub struct Paced<T> {
    shared: Arc<Shared<T>>,
    thread: Option<JoinHandle<()>>,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    ready: Condvar,
}

struct Slot<T> {
    pending: Option<T>,
    closed: bool,
    /// The thread waits for an item with no time set: only then does an offer wake it.
    idle: bool,
    /// The pending item waits out only an eighth of the interval ([`Paced::offer_soon`]).
    soon: bool,
}

impl<T> Shared<T> {
    fn slot(&self) -> MutexGuard<'_, Slot<T>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Send + 'static> Paced<T> {
    /// Starts the thread `name`, which runs `work` on the newest item offered, at most once per
    /// `interval` (the first at once).
    pub fn start(
        name: &str,
        interval: Duration,
        mut work: impl FnMut(T) + Send + 'static,
    ) -> std::io::Result<Paced<T>> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot {
                pending: None,
                closed: false,
                idle: false,
                soon: false,
            }),
            ready: Condvar::new(),
        });
        let own = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let mut last: Option<Instant> = None;
                while let Some(item) = next(&own, interval, last) {
                    work(item);
                    last = Some(Instant::now());
                }
            })?;
        Ok(Paced {
            shared,
            thread: Some(thread),
        })
    }
}

impl<T> Paced<T> {
    /// Hands `item` over, replacing one not yet taken. Never waits for the work.
    pub fn offer(&self, item: T) {
        let mut slot = self.shared.slot();
        slot.pending = Some(item);
        if slot.idle {
            self.shared.ready.notify_one();
        }
    }

    /// Hands `item` over to be worked on once an eighth of the interval has passed since the
    /// last work: for work that has become more pressing, still paced (if it keeps being
    /// pressing, say because it cannot succeed for now, it still runs at most eight times an
    /// interval). Wakes the thread once, not on every such offer.
    pub fn offer_soon(&self, item: T) {
        let mut slot = self.shared.slot();
        slot.pending = Some(item);
        if !slot.soon {
            slot.soon = true;
            self.shared.ready.notify_one();
        }
    }

    /// Takes back the item not yet taken, if any.
    pub fn take(&self) -> Option<T> {
        self.shared.slot().pending.take()
    }
}

/// The next item to work on, once `interval` has passed since `last`; `None` once closed with
/// nothing pending. A closing handle's pending item is taken at once.
fn next<T>(shared: &Shared<T>, interval: Duration, last: Option<Instant>) -> Option<T> {
    let mut slot = shared.slot();
    loop {
        while slot.pending.is_none() && !slot.closed {
            slot.idle = true;
            slot = shared.ready.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        slot.idle = false;
        let since = last.map_or(interval, |t| t.elapsed());
        let pace = if slot.soon { interval / 8 } else { interval };
        if slot.closed || since >= pace {
            slot.soon = false;
            return slot.pending.take();
        }
        slot = shared
            .ready
            .wait_timeout(slot, pace - since)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

impl<T> Drop for Paced<T> {
    fn drop(&mut self) {
        self.shared.slot().closed = true;
        self.shared.ready.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn recorder(interval: Duration) -> (Paced<u32>, mpsc::Receiver<(u32, Instant)>) {
        let (tx, rx) = mpsc::channel();
        let paced = Paced::start("paced-test", interval, move |n| {
            let _ = tx.send((n, Instant::now()));
        })
        .unwrap();
        (paced, rx)
    }

    #[test]
    fn the_first_item_runs_at_once_and_later_ones_coalesce_into_the_newest() {
        let interval = Duration::from_millis(300);
        let (paced, done) = recorder(interval);
        paced.offer(1);
        let (first, at) = done.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(first, 1);
        // Within the interval: three offers, one run, of the newest.
        for n in 2..=4 {
            paced.offer(n);
        }
        let (second, then) = done.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(second, 4);
        assert!(then - at >= interval, "{:?}", then - at);
        assert!(
            done.recv_timeout(interval * 2).is_err(),
            "one run per newest item"
        );
    }

    #[test]
    fn an_item_offered_soon_waits_out_an_eighth_of_the_interval() {
        let interval = Duration::from_millis(1600);
        let (paced, done) = recorder(interval);
        paced.offer(1);
        let (_, first) = done.recv_timeout(Duration::from_secs(5)).unwrap();
        // Within the interval: waits for it, until an offer that need not.
        paced.offer(2);
        assert!(done.recv_timeout(interval / 4).is_err());
        // Replaced while it waits (an eighth of the interval has passed by now, so a pressing
        // offer runs at once: only the last offer is pressing, or the thread could take the
        // one before it first).
        paced.offer(3);
        paced.offer_soon(4);
        let (n, second) = done.recv_timeout(interval / 2).unwrap();
        assert_eq!(n, 4);
        assert!(second - first >= interval / 8);
        // Offered soon again at once: not before an eighth of the interval has passed.
        paced.offer_soon(5);
        let (n, third) = done.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(n, 5);
        assert!(third - second >= interval / 8, "{:?}", third - second);
        // And an ordinary offer waits out the whole interval again.
        paced.offer(6);
        assert!(done.recv_timeout(interval / 2).is_err());
        assert_eq!(paced.take(), Some(6));
    }

    #[test]
    fn a_taken_item_is_not_worked_on_and_dropping_runs_the_pending_one_at_once() {
        let interval = Duration::from_secs(30);
        let (paced, done) = recorder(interval);
        paced.offer(1);
        assert_eq!(done.recv_timeout(Duration::from_secs(5)).unwrap().0, 1);
        paced.offer(2);
        assert_eq!(paced.take(), Some(2));
        assert_eq!(paced.take(), None);
        paced.offer(3);
        let dropped = Instant::now();
        drop(paced);
        assert!(
            dropped.elapsed() < interval,
            "closing waits out no interval"
        );
        let ran: Vec<u32> = done.try_iter().map(|(n, _)| n).collect();
        assert_eq!(ran, vec![3]);
    }
}
