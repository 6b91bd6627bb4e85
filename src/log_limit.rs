//! Rate-limited logging for errors that can repeat thousands of times a
//! second (an upstream that is down): the first one in each interval is
//! logged, the rest are counted and the count goes with the next line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct LogLimiter {
    interval: Duration,
    epoch: Instant,
    /// When the next line may be logged, in ms since `epoch`.
    next_allowed_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl LogLimiter {
    pub(crate) fn new(interval: Duration) -> LogLimiter {
        LogLimiter {
            interval,
            epoch: Instant::now(),
            next_allowed_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Returns `Some(suppressed_since_last)` if this event may be logged now.
    pub(crate) fn allow(&self) -> Option<u64> {
        let now = self.epoch.elapsed().as_millis() as u64;
        let next = self.next_allowed_ms.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_allowed_ms
                .compare_exchange(
                    next,
                    now + self.interval.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_per_interval() {
        let l = LogLimiter::new(Duration::from_secs(60));
        assert_eq!(l.allow(), Some(0));
        for _ in 0..1000 {
            assert_eq!(l.allow(), None);
        }
        let zero = LogLimiter::new(Duration::ZERO);
        assert_eq!(zero.allow(), Some(0));
        assert_eq!(zero.allow(), Some(0));
    }
}
