//! The local-answer stage, between the cache and upstream: a name the
//! cluster DNS schema rules out, or one below a namespace or Service the
//! cluster DNS has just denied (RFC 8020), is answered NXDOMAIN here with
//! the zone's SOA, without an upstream query. This is where most of the
//! `ndots:5` search-list expansions of an external name end.
//!
//! Only on a miss: the hit path pays nothing for it. A rule fires only
//! once the cluster DNS has sent the zone's SOA (learned in [`learn`]), so
//! the answer is the one it would have given, SOA and negative TTL alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hit::Request;
use super::metrics::RuleLabels;
use super::{Settings, Shared, reply_limit};
use crate::cache::{Entry, Key, Kind};
use crate::search::names::suffix_at;
use crate::search::{ClusterRules, Rule};
use crate::upstream::Zone;
use crate::wire::query::Query;
use crate::wire::response::Layout;
use crate::wire::soa::Soa;
use crate::wire::{build, class, rcode, rtype};

/// Which questions the local stage (and the namespace check that feeds
/// it) may answer: class IN, and not SOA, which goes to the cluster DNS:
/// its `kubernetes` plugin answers NOERROR (NODATA) for an SOA question
/// about any name in its zone, even one it denies for every other type.
pub(super) fn may_answer_locally(qtype: u16, qclass: u16) -> bool {
    qclass == class::IN && qtype != rtype::SOA
}

impl Shared {
    /// Writes a local NXDOMAIN into `out` when the name cannot exist.
    pub(super) fn answer_locally(&self, request: &Request<'_, '_>, out: &mut Vec<u8>) -> bool {
        if !may_answer_locally(request.query.qtype, request.query.qclass) {
            return false;
        }
        let rules = &request.settings.cluster;
        let name = request.key.name;
        if !rules.in_scope(name) {
            return false;
        }
        // A zone that rewrites questions: whether the name asked exists is
        // the rewritten name's upstream answer, not the schema's to say.
        if request.zone.rewrites() {
            return false;
        }
        let limit = reply_limit(request.proto, request.query, request.settings);
        if let Some(rule) = rules.cannot_exist(name) {
            let soa = if suffix_at(name, rules.domain()).is_some() {
                self.search.learned.soa(rules.domain())
            } else {
                self.search.learned.closest_soa(name)
            };
            return self.deny(request, rule, soa, limit, out);
        }
        if let Some(namespace) = rules.svc_namespace(name)
            && self.search.namespaces.exists(namespace) == Some(false)
        {
            let soa = self.search.learned.soa(rules.domain());
            return self.deny(request, Rule::UnknownNamespace, soa, limit, out);
        }
        if self.cut(
            request.query,
            name,
            request.settings,
            request.started,
            limit,
            out,
        ) {
            self.count_local_reply(request, out);
            return true;
        }
        false
    }

    /// Answers NXDOMAIN under `rule` with `soa`, the zone's as the cluster
    /// DNS sent it; without one, counts it and lets the query go upstream.
    fn deny(
        &self,
        request: &Request<'_, '_>,
        rule: Rule,
        soa: Option<Arc<Soa>>,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(soa) = soa else {
            self.metrics.rule_without_soa.inc();
            return false;
        };
        let ttl = soa.negative_ttl().min(request.zone.ttl.negative_max_ttl);
        build::nxdomain(request.query, &soa, ttl, limit, out);
        self.metrics
            .local_nxdomain
            .get(&RuleLabels { rule: rule.name() })
            .inc();
        self.count_local_reply(request, out);
        true
    }

    /// Writes an NXDOMAIN from a denied node above `name`, if there is one.
    fn cut(
        &self,
        query: &Query<'_>,
        name: &[u8],
        settings: &Settings,
        now: Instant,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> bool {
        for at in settings.cluster.cut_points(name) {
            if let Some(denied) = self.search.learned.denied(&name[at..], now) {
                build::nxdomain(query, &denied.soa, denied.ttl_left(now), limit, out);
                self.metrics.nxdomain_cuts.inc();
                return true;
            }
        }
        false
    }

    /// After a namespace check denied the namespace of `name`: the cut's
    /// NXDOMAIN (or SERVFAIL if the denial has already expired). Returns
    /// the response code written.
    pub(super) fn answer_from_cut(
        &self,
        query: &Query<'_>,
        name: &[u8],
        settings: &Settings,
        now: Instant,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> u16 {
        if self.cut(query, name, settings, now, limit, out) {
            return rcode::NXDOMAIN;
        }
        build::servfail(query.packet, query.name_end + 4, query.edns, None, out);
        rcode::SERVFAIL
    }

    fn count_local_reply(&self, request: &Request<'_, '_>, out: &[u8]) {
        let seconds = request.started.elapsed().as_secs_f64();
        request.stats.reply(
            request.proto,
            rcode::NXDOMAIN,
            false,
            out.len(),
            seconds,
            request.answered(crate::answered::Source::Local, out),
        );
    }

    /// What an upstream answer teaches the local-answer stage: the zone's
    /// SOA from a negative answer, and the NXDOMAIN of a namespace or
    /// Service node (or that such a node exists after all).
    pub(super) fn learn(
        &self,
        rules: &ClusterRules,
        key: &Key,
        zone: &Zone,
        entry: &Entry,
        response: (&[u8], &Layout),
    ) {
        let name = key.name();
        if key.qclass() != class::IN
            || entry.kind == Kind::Failure
            || !rules.in_scope(name)
            || zone.rewrites()
        {
            return;
        }
        let (msg, layout) = response;
        let denied = entry.rcode == rcode::NXDOMAIN && layout.answer_count == 0;
        if !denied && rules.is_cut_node(name) {
            self.search.learned.undeny(name);
        }
        // Any answer but NXDOMAIN at or below a namespace node: it exists
        // (CoreDNS denies everything below a namespace it does not have).
        if entry.rcode == rcode::NOERROR
            && let Some(at) = rules.namespace_node(name)
        {
            self.search
                .learned
                .namespace_seen(&name[at..], Instant::now());
        }
        if entry.kind != Kind::Denial || layout.answer_count > 0 {
            return;
        }
        let Some(soa) = layout.authority_soa.and_then(|at| Soa::read(msg, at)) else {
            return;
        };
        if rules.may_learn_soa(name, soa.owner()) {
            self.search.learned.learn_soa(soa.clone());
        }
        if denied && rules.is_cut_node(name) && soa.owner() == rules.domain() {
            let ttl = soa.negative_ttl().min(zone.ttl.negative_max_ttl);
            let ttl = Duration::from_secs(ttl.into());
            self.search
                .learned
                .deny(name, Arc::new(soa), ttl, Instant::now());
        }
    }
}
