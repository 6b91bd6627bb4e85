//! Per-client rate limit: a token bucket per source address, in a table
//! of fixed size so that memory does not grow with the number of clients
//! (a flood from spoofed sources only evicts buckets). Two clients that
//! hash to the same slot take turns owning it; each takeover starts a
//! full bucket, so a collision never limits a client that is within its
//! rate. Off by default: a node's pods are its own workloads, and a busy
//! pod may legitimately send thousands of queries a second.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Slots in the table; a power of two.
const SLOTS: usize = 4096;

pub(crate) struct RateLimiter {
    per_second: f64,
    burst: f64,
    slots: Box<[Mutex<Bucket>]>,
    hasher: ahash::RandomState,
}

#[derive(Clone, Copy)]
struct Bucket {
    client: Option<IpAddr>,
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// `per_second` queries per second per client, bursts of `burst`.
    pub(crate) fn new(per_second: u32, burst: u32) -> RateLimiter {
        let now = Instant::now();
        RateLimiter {
            per_second: f64::from(per_second),
            burst: f64::from(burst.max(1)),
            slots: (0..SLOTS)
                .map(|_| {
                    Mutex::new(Bucket {
                        client: None,
                        tokens: 0.0,
                        at: now,
                    })
                })
                .collect(),
            hasher: ahash::RandomState::new(),
        }
    }

    /// Takes a token for `client`; false when it has none left.
    pub(crate) fn allow(&self, client: IpAddr, now: Instant) -> bool {
        let slot = self.hasher.hash_one(client) as usize & (SLOTS - 1);
        let mut bucket = crate::lock::lock(&self.slots[slot]);
        if bucket.client != Some(client) {
            *bucket = Bucket {
                client: Some(client),
                tokens: self.burst,
                at: now,
            };
        } else {
            let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
            bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
            bucket.at = now;
        }
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn limits_one_client_not_another() {
        let r = RateLimiter::new(10, 20);
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let granted = (0..100).filter(|_| r.allow(a, t0)).count();
        assert_eq!(granted, 20, "a burst, then nothing");
        assert!(r.allow(b, t0), "another client is not limited");
        let later = t0 + Duration::from_millis(500);
        let granted = (0..100).filter(|_| r.allow(a, later)).count();
        assert_eq!(granted, 5, "refilled at 10/s for half a second");
    }
}
