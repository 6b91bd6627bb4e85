//! The one lock-poison policy (decision 57): a lock a thread panicked
//! while holding is taken as it is. Every value nodens guards with a
//! `Mutex` (tables, counters, free lists) is valid after each statement
//! that changes it, so a panic leaves at worst an entry or a count one step
//! behind; refusing it would turn one panicked task into a panic in every
//! task that takes the lock after it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, whether or not a thread panicked holding it.
#[inline]
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
