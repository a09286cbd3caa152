//! [`lock`]: a mutex's guard, going on after a panic elsewhere held it (the state a panicking
//! holder left is still the executor's to serve or clean up).

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
