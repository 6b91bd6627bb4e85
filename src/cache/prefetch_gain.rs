//! Whether a zone's prefetches gain anything: prefetch is given up where
//! the upstream is itself a cache whose TTLs count down.
//!
//! A prefetch refreshes a popular entry in the last tenth of its TTL. From
//! an authoritative upstream (or one that refetched the name), the refresh
//! brings a whole new TTL. From a cache (kubeadm's cluster DNS with `cache
//! 30`, a recursive resolver), it brings the seconds that cache has left,
//! which are the seconds nodens's entry has left: the query gained nothing,
//! and the entry it stored, as short-lived, is soon asked for again. Behind
//! kubeadm's CoreDNS that doubled nodens's queries to the cluster DNS
//! (lab/kube/follow-api: 228 against node-local-dns's 101 in 150 s). An
//! authoritative answer moves the expiry on by about the time the entry
//! lived; a cache's, by nothing (a second, from rounding).
//!
//! So each zone learns: after [`GIVE_UP_AFTER`] futile prefetches in a
//! row it stops prefetching (the entry expires and is fetched again, once,
//! as node-local-dns does), except one prefetch in [`PROBE_EVERY`], which
//! finds out when the upstream starts bringing new TTLs again.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// Futile prefetches in a row that stop a zone's prefetching.
pub(crate) const GIVE_UP_AFTER: u32 = 2;
/// Once given up, one prefetch in this many is still sent, to learn.
pub(crate) const PROBE_EVERY: u32 = 32;

/// One zone's record of what its prefetches brought.
#[derive(Debug, Default)]
pub(crate) struct PrefetchGain {
    futile_in_a_row: AtomicU32,
    /// Prefetches passed over since giving up (picks the probes).
    passed_over: AtomicU32,
}

impl PrefetchGain {
    /// Whether a prefetch due now should be sent. Two relaxed atomics, only
    /// on the hit that finds an entry due for a prefetch.
    pub(crate) fn worth_trying(&self) -> bool {
        if self.futile_in_a_row.load(Ordering::Relaxed) < GIVE_UP_AFTER {
            return true;
        }
        self.passed_over.fetch_add(1, Ordering::Relaxed) % PROBE_EVERY == PROBE_EVERY - 1
    }

    /// Records what a prefetch brought: the entry it refreshed was stored
    /// at `old.0` to expire at `old.1`, the new one expires at `new_expiry`,
    /// and it is `now`. Returns whether the prefetch was futile: an
    /// authoritative answer moves the expiry on by the time the old entry
    /// lived; less than half of that is a cache's answer.
    pub(crate) fn learn(&self, old: (Instant, Instant), new_expiry: Instant, now: Instant) -> bool {
        let (stored, old_expiry) = old;
        let gained = new_expiry.saturating_duration_since(old_expiry);
        let futile = gained < now.saturating_duration_since(stored) / 2;
        if futile {
            self.futile_in_a_row.fetch_add(1, Ordering::Relaxed);
        } else {
            self.futile_in_a_row.store(0, Ordering::Relaxed);
        }
        futile
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn gives_up_after_futile_prefetches_and_probes_to_come_back() {
        let gain = PrefetchGain::default();
        let stored = Instant::now();
        let secs = |s| stored + Duration::from_secs(s);
        // Refreshed at 27 s of a 30 s TTL.
        let (old, now) = ((stored, secs(30)), secs(27));
        // An authoritative upstream: a whole new TTL of 30 s.
        assert!(!gain.learn(old, secs(57), now));
        assert!(gain.worth_trying());
        // Refreshed at half its TTL (prefetch_percent = 50), from an
        // authoritative upstream: gained 15 s in 15 s.
        assert!(!gain.learn(old, secs(45), secs(15)));
        // A cache: the same expiry, twice.
        assert!(gain.learn(old, secs(30), now));
        assert!(gain.worth_trying(), "one futile prefetch is not enough");
        assert!(gain.learn(old, secs(31), now));
        let sent = (0..PROBE_EVERY * 4).filter(|_| gain.worth_trying()).count();
        assert_eq!(sent, 4, "one probe in {PROBE_EVERY}");
        // A probe that gains brings prefetching back.
        assert!(!gain.learn(old, secs(57), now));
        assert!((0..10).all(|_| gain.worth_trying()));
    }
}
