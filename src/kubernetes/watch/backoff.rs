//! How long a watch waits before it asks the API again after a failure:
//! "full jitter" (a random time between zero and a cap that doubles with
//! each failure in a row, up to 30 s). After an API server restart, a
//! fleet of nodes whose watches broke at the same second spreads its
//! retries over the whole window instead of coming back in waves.

use std::time::Duration;

use rand::Rng;

const FIRST: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub(in crate::kubernetes) struct Backoff {
    failures: u32,
}

impl Backoff {
    /// The window of the next wait: 1 s after the first failure, doubling.
    fn window(&self) -> Duration {
        FIRST.saturating_mul(1 << self.failures.min(5)).min(MAX)
    }

    /// A failure: the time to wait before asking again.
    pub(in crate::kubernetes) fn next(&mut self) -> Duration {
        let window = self.window();
        self.failures = self.failures.saturating_add(1);
        let ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::rng().random_range(0..=ms))
    }

    /// A success: the next failure waits within the first window again.
    pub(super) fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_doubles_to_its_cap_and_waits_spread_over_it() {
        let mut b = Backoff::default();
        let windows: Vec<u64> = (0..8)
            .map(|_| {
                let w = b.window().as_secs();
                b.next();
                w
            })
            .collect();
        assert_eq!(windows, [1, 2, 4, 8, 16, 30, 30, 30]);
        b.reset();
        // Full jitter: over many draws from the 30 s window, both halves.
        let mut b = Backoff { failures: 10 };
        let draws: Vec<Duration> = (0..200).map(|_| b.next()).collect();
        assert!(draws.iter().all(|d| *d <= MAX));
        assert!(draws.iter().any(|d| *d < Duration::from_secs(10)));
        assert!(draws.iter().any(|d| *d > Duration::from_secs(20)));
    }
}
