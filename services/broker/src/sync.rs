//! Locking the broker's shared state. A panic while a lock was held poisons it; the broker goes
//! on with the data as the panicking thread left it (every critical section leaves it
//! consistent between statements), rather than failing every later call.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
