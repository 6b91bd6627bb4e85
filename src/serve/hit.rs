//! The cache stage: a fresh entry is the reply; a stale one is kept in case
//! upstream fails.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::replay::{Counted, Kept, Replies};
use super::stats::{ZoneStats, ZoneTally};
use super::{ListenerView, Settings, Shared, reply_limit};
use crate::answered::{Answered, Source};
use crate::cache::{Entry, Freshness, KeyRef, Kind, Lookup};
use crate::listen::Proto;
use crate::upstream::Zone;
use crate::wire::query::Query;
use crate::wire::rtype;

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
    /// The UDP worker's kept replies, with the cache's retirement count
    /// at the batch's start (none for TCP and a walk's stages).
    pub(super) replay: Option<(&'r RefCell<Replies>, u64)>,
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
                if let Some((replies, retirements)) = request.replay {
                    keep_for_replay(request, &entry, replies, retirements, out);
                }
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

/// Keeps a fresh entry's reply for the worker to replay, when the same
/// bytes would get the same reply from any client: no stage before the
/// cache that depends on the client (local records, which may answer
/// `whoami`; a pod's autopath; the AAAA filter of IPv4 pods) could have
/// answered it, nothing observes the zone's replies, and the hits a
/// prefetch waits for are counted. It is replayed until the entry's
/// prefetch window, where the cache stage decides again.
fn keep_for_replay(
    request: &Request<'_, '_>,
    entry: &Arc<Entry>,
    replies: &RefCell<Replies>,
    retirements: u64,
    out: &[u8],
) {
    let (settings, zone, query) = (request.settings, request.zone, request.query);
    if settings.records.is_some()
        || request.stats.is_observed()
        || (query.qtype == rtype::AAAA && zone.no_aaaa_for_ipv4_pods.is_some())
        || super::autopath::autopath_namespace_at(request.key, settings).is_some()
    {
        return;
    }
    let policy = &zone.cache;
    let prefetch_from = if policy.prefetch_min_hits == 0 || entry.kind == Kind::Failure {
        None
    } else if entry.hits.load(Ordering::Relaxed) < policy.prefetch_min_hits {
        return;
    } else {
        // Where `maybe_prefetch` starts to look: the last
        // `prefetch_percent` of the TTL.
        let threshold = Duration::from_millis(
            u64::from(entry.original_ttl) * 10 * u64::from(policy.prefetch_percent),
        );
        Some(
            entry
                .expires_at()
                .checked_sub(threshold)
                .unwrap_or(request.started),
        )
    };
    replies.borrow_mut().keep(Kept {
        packet: query.packet,
        reply: out,
        entry,
        generation: settings.generation,
        retirements,
        prefetch_from,
        now: request.started,
        counted: Counted {
            zone: zone.index as u32,
            qtype: query.qtype,
            dnssec_ok: query.dnssec_ok(),
            success: entry.kind == Kind::Success,
            rcode: entry.rcode,
        },
    });
}
