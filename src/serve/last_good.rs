//! Last-known-good answers on the miss path (`cache::last_good` decides
//! what vouches for a name): a denial or a SERVFAIL upstream gave for a
//! name with a positive answer is answered with that answer instead. Past
//! its TTL it goes out with the Extended DNS Error "Stale Answer" and a
//! short TTL: a second when the API watch vouched (the client asks again
//! soon, as for a held answer), the zone's `stale_ttl` for
//! `stale_over_denial`. Costs a miss that brought a denial one look at the
//! watch's coverage; a hit, nothing.

use std::sync::Arc;
use std::time::Instant;

use super::Shared;
use super::metrics::RuleLabels;
use crate::cache::follow::HELD_TTL;
use crate::cache::last_good::Vouched;
use crate::cache::{Entry, Freshness, Key, Kind};
use crate::upstream::Zone;
use crate::wire::ede;

/// The answer written in place of a denial, and how.
pub(super) struct Kept {
    pub(super) entry: Arc<Entry>,
    pub(super) freshness: Freshness,
    pub(super) ede: Option<u16>,
}

impl Shared {
    /// Denials answered with a last-known-good answer since start, of one
    /// rule (`cluster`, `stale_over_denial`), for the control channel.
    pub(crate) fn last_good_answers(&self, rule: &'static str) -> u64 {
        self.metrics
            .last_good_answers
            .get(&RuleLabels { rule })
            .get()
    }

    /// What to write instead of `fetched` for `key`, if anything vouches
    /// for a positive answer. Counted.
    pub(super) fn last_good_over(
        &self,
        key: &Key,
        zone: &Zone,
        fetched: &Entry,
        now: Instant,
    ) -> Option<Kept> {
        if fetched.kind == Kind::Success {
            return None;
        }
        let (entry, why) = self.cache.last_good(key, &zone.cache, now)?;
        self.metrics
            .last_good_answers
            .get(&RuleLabels { rule: why.label() })
            .inc();
        if entry.is_fresh(now) {
            return Some(Kept {
                entry,
                freshness: Freshness::Fresh,
                ede: None,
            });
        }
        let ttl = match why {
            Vouched::Cluster => HELD_TTL,
            Vouched::Stale => zone.cache.stale_ttl,
        };
        Some(Kept {
            entry,
            freshness: Freshness::Stale { ttl },
            ede: Some(ede::STALE_ANSWER),
        })
    }
}
