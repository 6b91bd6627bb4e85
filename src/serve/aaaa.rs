//! AAAA only where a pod can use it (`[[zone]] no_aaaa_for_ipv4_pods`): a
//! pod of this node that holds no IPv6 address cannot connect to an IPv6
//! address, yet its resolver asks AAAA beside every A (up to half of an
//! IPv4-only cluster's queries). Such a question is answered from the
//! name's A, which the pod asks anyway:
//!
//! - the name exists (an A answer): NODATA, NOERROR with the zone's SOA,
//!   never NXDOMAIN, which would tell the pod the name does not exist
//!   (hand-written templates that answer NXDOMAIN have broken
//!   applications);
//! - the name does not exist, or has no A: the A's own denial, SOA and
//!   all, so a search-list walk goes on exactly as it would.
//!
//! From the cache when the A is there, else from the local rules (a name
//! the schema or a denied node rules out is NXDOMAIN for every type), else
//! as a miss of the A (joining the pod's own A query in flight). No AAAA query goes upstream for the
//! pod. A dual-stack pod, an address the pod watch does not map (a
//! hostNetwork pod, a pod whose search list is not the standard one, a
//! client that is no pod) and a list that may be out of date: answered as
//! without it.
//!
//! Cost on the hit path: off, the one branch in `handle` on the zone's
//! setting, taken only for AAAA; on, a lookup in the pod map.

use std::sync::Arc;
use std::time::Instant;

use super::hit::Request;
use super::stats::ListenerStats;
use super::{Job, Shared, reply_limit};
use crate::answered::Source;
use crate::cache::key::NameBuf;
use crate::cache::{Entry, Freshness, KeyRef, Kind, Lookup};
use crate::listen::Handled;
use crate::wire::name::{MAX_NAME_LEN, fold_into};
use crate::wire::query::Query;
use crate::wire::soa::Soa;
use crate::wire::{build, class, rcode, rtype};

impl Shared {
    /// The stage, for an AAAA question in a zone with the setting on:
    /// `None` when the usual stages are to answer it.
    pub(super) fn aaaa_for_ipv4_pod(
        &self,
        request: &Request<'_, '_>,
        all_stats: &Arc<ListenerStats>,
        out: &mut Vec<u8>,
    ) -> Option<Handled<Job>> {
        let key = request.key;
        if key.qclass != class::IN || !self.search.clients.is_ipv4_only_pod(request.client.ip()) {
            return None;
        }
        self.metrics.aaaa_for_ipv4_pods.inc();
        let a = KeyRef {
            qtype: rtype::A,
            ..*key
        };
        let policy = &request.zone.cache;
        let found = if policy.enabled {
            self.cache.lookup(&a, request.started, policy.stale_max_age)
        } else {
            Lookup::Miss
        };
        let (entry, freshness) = match found {
            Lookup::Fresh(entry) if entry.kind != Kind::Failure => (entry, Freshness::Fresh),
            Lookup::Held(entry) => {
                let ttl = crate::cache::follow::HELD_TTL;
                (entry, Freshness::Held { ttl })
            }
            Lookup::Stale(entry) => {
                return Some(self.miss_of_a(request, &a, Some(entry), all_stats, out));
            }
            _ => return Some(self.miss_of_a(request, &a, None, all_stats, out)),
        };
        let limit = reply_limit(request.proto, request.query, request.settings);
        let (query, zone) = (request.query, request.zone);
        let when = (request.started, freshness);
        let code = self.render_for_ipv4_pod(&entry, query, zone, when, limit, out);
        let seconds = request.started.elapsed().as_secs_f64();
        let answered = request.answered(Source::Cache, out);
        let stats = request.stats;
        stats.reply(request.proto, code, true, out.len(), seconds, answered);
        Some(Handled::Reply)
    }

    /// The local rules, else a miss of the A `a`, answered as the AAAA
    /// question of `request` (`MissJob::for_ipv4_pod`).
    fn miss_of_a(
        &self,
        request: &Request<'_, '_>,
        a: &KeyRef<'_>,
        stale: Option<Arc<Entry>>,
        all_stats: &Arc<ListenerStats>,
        out: &mut Vec<u8>,
    ) -> Handled<Job> {
        // What the local rules and cuts deny, for any type, before asking.
        if self.answer_locally(request, out) {
            return Handled::Reply;
        }
        let request = Request { key: a, ..*request };
        self.miss_for_ipv4_pod(&request, all_stats, stale, out)
    }

    /// Writes the AAAA reply an IPv4-only pod gets from the name's A
    /// `entry`: the A's denial as it is, or NODATA where the name has an
    /// A. Returns the response code written.
    pub(super) fn render_for_ipv4_pod(
        &self,
        entry: &Entry,
        query: &Query<'_>,
        zone: &crate::upstream::Zone,
        (now, freshness): (Instant, Freshness),
        limit: usize,
        out: &mut Vec<u8>,
    ) -> u16 {
        if entry.kind != Kind::Success {
            return entry.render(query, now, freshness, None, limit, out).rcode;
        }
        let learned = self.learned_soa(query);
        let Some(soa) = learned.as_deref().or(zone.no_aaaa_for_ipv4_pods.as_ref()) else {
            return entry.render(query, now, freshness, None, limit, out).rcode;
        };
        let left = match freshness {
            Freshness::Fresh => entry.remaining(now).as_secs() as u32,
            Freshness::Stale { ttl } | Freshness::Held { ttl } => ttl,
        };
        build::nodata(query, soa, left.min(soa.negative_ttl()), limit, out);
        rcode::NOERROR
    }

    /// The SOA the upstream sent for the zone the asked name is in, when
    /// nodens learned one (the cluster domain's, the cloud zones').
    fn learned_soa(&self, query: &Query<'_>) -> Option<Arc<Soa>> {
        let mut folded: NameBuf = [0; MAX_NAME_LEN];
        let len = fold_into(query.name(), &mut folded);
        self.search.learned.closest_soa(&folded[..len])
    }
}
