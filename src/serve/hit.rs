//! The cache stage: a fresh entry is the reply; a stale one is kept in case
//! upstream fails.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::stats::{ZoneStats, ZoneTally};
use super::{ListenerView, Settings, Shared, reply_limit};
use crate::answered::{Answered, Source};
use crate::cache::{Entry, Freshness, KeyRef, Kind, Lookup};
use crate::listen::Proto;
use crate::upstream::Zone;
use crate::wire::query::Query;

/// A query past parsing and routing, as the later stages see it.
pub(super) struct Request<'r, 'q> {
    pub(super) query: &'r Query<'q>,
    pub(super) key: &'r KeyRef<'r>,
    pub(super) zone: &'r Arc<Zone>,
    pub(super) settings: &'r Arc<Settings>,
    pub(super) stats: &'r ZoneStats,
    /// The UDP worker's tally of this batch, where a hit is counted (none
    /// for TCP and for the stages after a walk: `stats` then).
    pub(super) tally: Option<&'r ZoneTally>,
    pub(super) proto: Proto,
    pub(super) started: Instant,
    /// The client's address and port (the query log).
    pub(super) client: SocketAddr,
}

impl Request<'_, '_> {
    /// Writes the reply from a cached entry and counts it.
    #[inline]
    pub(super) fn reply_from(
        &self,
        entry: &Entry,
        freshness: Freshness,
        ede: Option<u16>,
        out: &mut Vec<u8>,
    ) {
        let limit = reply_limit(self.proto, self.query, self.settings);
        let rendered = entry.render(self.query, self.started, freshness, ede, limit, out);
        let source = match freshness {
            Freshness::Fresh => Source::Cache,
            Freshness::Stale { .. } => Source::Stale,
            Freshness::Held { .. } => Source::Cache,
        };
        match self.tally {
            Some(tally) => tally.reply(
                self.stats,
                self.proto,
                rendered.rcode,
                true,
                out.len(),
                self.answered(source, out),
            ),
            None => self.stats.reply(
                self.proto,
                rendered.rcode,
                true,
                out.len(),
                self.started.elapsed().as_secs_f64(),
                self.answered(source, out),
            ),
        }
    }

    /// A cache hit (a success or a denial), in the tally if there is one.
    #[inline]
    fn cache_hit(&self, success: bool) {
        match self.tally {
            Some(tally) => tally.cache_hit(success),
            None => self.stats.cache_hit(success),
        }
    }

    /// This query's reply in `out`, for the query log.
    #[inline]
    pub(super) fn answered<'a>(&'a self, source: Source, out: &'a [u8]) -> Answered<'a> {
        Answered {
            query: self.query,
            client: self.client,
            started: self.started,
            source,
            reply: out,
        }
    }
}

/// What the cache had.
pub(super) enum Cached {
    /// A fresh entry; the reply is written.
    Answered,
    /// Only an expired entry, still within the zone's `stale_max_age`.
    Stale(Arc<Entry>),
    Miss,
}

impl Shared {
    #[inline]
    pub(super) fn answer_from_cache(
        self: &Arc<Self>,
        request: &Request<'_, '_>,
        listener: &ListenerView,
        out: &mut Vec<u8>,
    ) -> Cached {
        // The zone's policy, through the zone routing found: one pointer,
        // as the global settings were.
        let policy = &request.zone.cache;
        if !policy.enabled {
            return Cached::Miss;
        }
        match self
            .cache
            .lookup(request.key, request.started, policy.stale_max_age)
        {
            Lookup::Fresh(entry) => {
                request.cache_hit(entry.kind == Kind::Success);
                if entry.take_speculative() {
                    self.metrics.speculation_used.inc();
                }
                if policy.prefetch_min_hits > 0 {
                    self.maybe_prefetch(&entry, request, listener);
                }
                request.reply_from(&entry, Freshness::Fresh, None, out);
                Cached::Answered
            }
            Lookup::Stale(entry) => Cached::Stale(entry),
            // No prefetch: the watch, not a refresh, keeps it right.
            Lookup::Held(entry) => {
                request.cache_hit(entry.kind == Kind::Success);
                self.metrics.held_answers.inc();
                let held = Freshness::Held {
                    ttl: crate::cache::follow::HELD_TTL,
                };
                request.reply_from(&entry, held, None, out);
                Cached::Answered
            }
            Lookup::Miss => Cached::Miss,
        }
    }
}
