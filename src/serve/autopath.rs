//! Autopath behind a node cache (`[cluster] autopath`): the first
//! search-list expansion `X.<ns>.svc.Z` from a pod of this node, in
//! namespace `<ns>`, is answered with the end of the walk its resolver
//! would make, `X.svc.Z`, `X.Z`, the node's search domains, then `X.`: the
//! first of them that is not NXDOMAIN, behind a CNAME from the asked name
//! (CoreDNS's autopath format). One round trip instead of one per search
//! domain.
//!
//! CoreDNS's `autopath` cannot do this behind a node cache: it sees the
//! cache's address, not the pod's (coredns/coredns#4308). nodens sees the
//! pod's own address, and knows its namespace from a watch of this node's
//! pods ([`crate::search::Clients`]).
//!
//! The answer is the walk's, or exactly the one without autopath:
//! - the name itself answers (not NXDOMAIN): its own answer;
//! - an unknown address, a pod whose search list is not the standard one,
//!   a name of another namespace, a list that may be out of date: the
//!   query takes the usual stages, as if autopath were off;
//! - a name of the walk failed (SERVFAIL, timeout, no zone routes it), or
//!   every one is NXDOMAIN: the usual stages too; the client walks on by
//!   itself (its resolver treats a failure as its own library does).
//!
//! Never cached as such: the same name asked by an unknown client gets
//! the plain answer. The walk's names are cached on their own and shared.
//!
//! An AAAA from an IPv4-only pod walks the A of each name whose zone has
//! `no_aaaa_for_ipv4_pods` on (no AAAA goes upstream for such a pod there,
//! `aaaa.rs`), and the CNAME leads to the walk's end answered as its
//! zone's filter answers: NODATA where the name exists. Which type a name
//! was asked with is in its entry, so the reply follows what the walk did.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hit::Request;
use super::local::may_answer_locally;
use super::miss::MissTicket;
use super::stats::ListenerStats;
use super::{Job, ListenerView, Settings, Shared, reply_limit};
use crate::answered::{Answered, Source};
use crate::cache::key::NameBuf;
use crate::cache::{Entry, Freshness, Key, KeyRef, Kind, Lookup};
use crate::listen::{Handled, Proto};
use crate::search::names::suffix_at;
use crate::upstream::Zone;
use crate::wire::chain::cname_reply;
use crate::wire::name::{MAX_NAME_LEN, fold_into};
use crate::wire::query::{OwnedQuery, Query};
use crate::wire::{HEADER_LEN, build, class, ede, rcode, rtype};

/// What one name of the walk came to.
enum Step {
    /// NXDOMAIN: the walk goes on.
    Denied,
    /// Any other answer: the walk ends here.
    Answered(Arc<Entry>),
    /// A failure: autopath gives up.
    Failed,
    /// Not known without asking upstream.
    Unknown,
}

/// What the cache alone says of a walk.
pub(super) enum FromCache {
    /// The autopath reply is written.
    Answered,
    /// Answer as without autopath.
    Plain,
    /// A name must be asked upstream: a job.
    Wait,
}

/// A verified pod's first expansion whose walk waits on upstream.
pub struct AutopathJob {
    query: OwnedQuery,
    key: Key,
    zone: Arc<Zone>,
    settings: Arc<Settings>,
    stats: Arc<ListenerStats>,
    started: Instant,
    proto: Proto,
    /// Where `<ns>.svc.Z` starts in the name: X is the name before it.
    namespace_at: usize,
    _ticket: MissTicket,
    client: SocketAddr,
}

/// The names of the walk after the asked one: the suffixes that follow
/// `<ns>.svc.Z` in a pod's search list, then the root.
fn later_suffixes<'a>(
    name: &'a [u8],
    namespace_at: usize,
    settings: &'a Settings,
) -> impl Iterator<Item = &'a [u8]> {
    let rules = &settings.cluster;
    let ns_len = usize::from(name[namespace_at]);
    let svc_zone = &name[namespace_at + 1 + ns_len..];
    [svc_zone, rules.domain()]
        .into_iter()
        .chain(rules.search().search_domains.iter().map(|d| &d[..]))
        .chain([&b"\x00"[..]])
}

/// `base` + `suffix` in `buf`, or None when longer than a name may be.
fn expansion<'b>(base: &[u8], suffix: &[u8], buf: &'b mut NameBuf) -> Option<&'b [u8]> {
    let len = base.len() + suffix.len();
    if len > MAX_NAME_LEN {
        return None;
    }
    buf[..base.len()].copy_from_slice(base);
    buf[base.len()..len].copy_from_slice(suffix);
    Some(&buf[..len])
}

/// The type the walk asks of a name of `zone`: the A where the client is an
/// IPv4-only pod asking AAAA (`ipv4_pod`) and the zone answers such a pod's
/// AAAA from the A, else the asked type.
fn walk_type(qtype: u16, zone: Option<&Arc<Zone>>, ipv4_pod: bool) -> u16 {
    let filtered = ipv4_pod && zone.is_some_and(|zone| zone.no_aaaa_for_ipv4_pods.is_some());
    if filtered { rtype::A } else { qtype }
}

/// Where `<ns>.svc.Z` starts when `key` may be a first expansion of some
/// pod's search list: whether it is depends on the client.
pub(super) fn autopath_namespace_at(key: &KeyRef<'_>, settings: &Settings) -> Option<usize> {
    let rules = &settings.cluster;
    // Local records answer a name before the cache and upstream, and
    // the walk asks only those two: with records, no autopath.
    if !rules.search().autopath || key.qclass != class::IN || settings.records.is_some() {
        return None;
    }
    rules.svc_namespace_node(key.name)
}

impl Shared {
    /// Where `<ns>.svc.Z` starts when `key` is a first expansion from a
    /// verified pod of namespace `<ns>`.
    pub(super) fn autopath_candidate(
        &self,
        key: &KeyRef<'_>,
        client: IpAddr,
        settings: &Settings,
    ) -> Option<usize> {
        let at = autopath_namespace_at(key, settings)?;
        let label = &key.name[at + 1..at + 1 + usize::from(key.name[at])];
        self.search.clients.is_pod_of(client, label).then_some(at)
    }

    /// Walks the search list through the cache and the local rules only.
    pub(super) fn autopath_from_cache(
        &self,
        request: &Request<'_, '_>,
        namespace_at: usize,
        out: &mut Vec<u8>,
    ) -> FromCache {
        let settings = request.settings;
        let ipv4_pod = self.ipv4_pod_aaaa(request.key, request.client.ip());
        let key = request.key;
        let first = KeyRef {
            qtype: walk_type(key.qtype, Some(request.zone), ipv4_pod),
            ..*key
        };
        match self.step(&first, settings, request.started) {
            Step::Denied => {}
            Step::Unknown => return FromCache::Wait,
            Step::Answered(_) | Step::Failed => return FromCache::Plain,
        }
        let base = &key.name[..namespace_at];
        let mut buf: NameBuf = [0; MAX_NAME_LEN];
        for suffix in later_suffixes(key.name, namespace_at, settings) {
            let Some(name) = expansion(base, suffix, &mut buf) else {
                return FromCache::Plain;
            };
            // Routed only where the type may depend on the zone.
            let zone = ipv4_pod
                .then(|| settings.router.route_in(key.view(), name))
                .flatten();
            let next = KeyRef {
                name,
                qtype: walk_type(key.qtype, zone, ipv4_pod),
                ..*key
            };
            match self.step(&next, settings, request.started) {
                Step::Denied => continue,
                Step::Unknown => return FromCache::Wait,
                Step::Failed => return FromCache::Plain,
                Step::Answered(entry) => {
                    let limit = reply_limit(request.proto, request.query, settings);
                    let (query, now) = (request.query, request.started);
                    let at = (&**settings, key.view());
                    let code = self.write_autopath(query, &entry, now, limit, at, out);
                    let Some(code) = code else {
                        return FromCache::Plain;
                    };
                    request.stats.cache_hit(entry.kind == Kind::Success);
                    if entry.take_speculative() {
                        self.metrics.speculation_used.inc();
                    }
                    let seconds = request.started.elapsed().as_secs_f64();
                    let answered = request.answered(Source::Cache, out);
                    request
                        .stats
                        .reply(request.proto, code, true, out.len(), seconds, answered);
                    return FromCache::Answered;
                }
            }
        }
        FromCache::Plain
    }

    /// Makes the walk a job, if the bound on misses in flight allows;
    /// else the query takes the usual stages.
    pub(super) fn autopath_job(
        &self,
        request: &Request<'_, '_>,
        all_stats: &Arc<ListenerStats>,
        namespace_at: usize,
    ) -> Option<Handled<Job>> {
        let settings = request.settings;
        let ticket = MissTicket::take(&self.misses_in_flight, settings.max_misses_in_flight)?;
        Some(Handled::Upstream(Job::Autopath(AutopathJob {
            query: OwnedQuery::new(request.query),
            key: request.key.to_owned(),
            zone: request.zone.clone(),
            settings: Arc::clone(settings),
            stats: Arc::clone(all_stats),
            started: request.started,
            proto: request.proto,
            namespace_at,
            _ticket: ticket,
            client: request.client,
        })))
    }

    /// Walks the search list, asking upstream for what is not known, and
    /// writes the reply: the autopath one, or the usual one.
    pub(super) async fn answer_autopath(
        self: &Arc<Self>,
        job: AutopathJob,
        listener: &ListenerView,
        out: &mut Vec<u8>,
    ) {
        let deadline = job.started + job.settings.query_timeout;
        let found = tokio::time::timeout_at(deadline.into(), self.walk(&job, deadline))
            .await
            .ok()
            .flatten();
        let query = job.query.get();
        if let Some(entry) = found {
            let limit = reply_limit(job.proto, &query, &job.settings);
            let (now, at) = (Instant::now(), (&*job.settings, job.key.as_ref().view()));
            if let Some(code) = self.write_autopath(&query, &entry, now, limit, at, out) {
                // Counted here, not when the job began: the usual stages
                // below count their own.
                let stats = job.stats.zone(job.zone.index);
                stats.cache_miss();
                let seconds = job.started.elapsed().as_secs_f64();
                let answered = Answered {
                    query: &query,
                    client: job.client,
                    started: job.started,
                    source: Source::Upstream,
                    reply: out,
                };
                stats.reply(job.proto, code, false, out.len(), seconds, answered);
                return;
            }
        }
        // As without autopath: the usual stages, from the cache on (what
        // the walk fetched for the name itself is there now).
        // The request ends before the wait (its tally is a worker's own,
        // none here, but a future that crosses threads cannot hold one).
        drop(job._ticket);
        let handled = {
            let request = Request {
                query: &query,
                key: &job.key.as_ref(),
                zone: &job.zone,
                settings: &job.settings,
                stats: job.stats.zone(job.zone.index),
                tally: None,
                proto: job.proto,
                started: job.started,
                client: job.client,
                replay: None,
            };
            self.after_autopath(&request, listener, &job.stats, out)
        };
        match handled {
            Handled::Reply => {}
            Handled::Upstream(Job::Miss(miss)) => self.answer_miss(miss, out).await,
            Handled::Upstream(Job::Autopath(_)) | Handled::Drop => {
                build::servfail(
                    query.packet,
                    query.name_end + 4,
                    query.edns,
                    Some(ede::NO_REACHABLE_AUTHORITY),
                    out,
                );
            }
        }
    }

    /// The entry the walk ends at, when it ends at a later name than the
    /// asked one; None for anything else (answer as without autopath).
    async fn walk(self: &Arc<Self>, job: &AutopathJob, deadline: Instant) -> Option<Arc<Entry>> {
        let settings = &job.settings;
        let key = job.key.as_ref();
        let ipv4_pod = self.ipv4_pod_aaaa(&key, job.client.ip());
        let qtype = walk_type(key.qtype, Some(&job.zone), ipv4_pod);
        let asked = Key::from_parts(key.name, qtype, key.qclass, key.flags);
        match self.step(&asked.as_ref(), settings, Instant::now()) {
            Step::Denied => {}
            Step::Answered(_) | Step::Failed => return None,
            Step::Unknown => {
                let entry = self.fetch(&asked, &job.zone, settings, deadline).await?;
                if !matches!(classify(&entry), Step::Denied) {
                    return None;
                }
            }
        }
        let name = job.key.name();
        // The pod's namespace exists (the pod is in it): a later name in it
        // (`db-0.db.<ns>.svc.Z`) needs no namespace check.
        self.search
            .learned
            .namespace_seen(&name[job.namespace_at..], Instant::now());
        let base = &name[..job.namespace_at];
        let mut buf: NameBuf = [0; MAX_NAME_LEN];
        for suffix in later_suffixes(name, job.namespace_at, settings) {
            let next = expansion(base, suffix, &mut buf)?;
            let zone = settings.router.route_in(job.key.as_ref().view(), next);
            let qtype = walk_type(job.key.qtype(), zone, ipv4_pod);
            let key = Key::from_parts(next, qtype, job.key.qclass(), job.key.flags());
            match self.step(&key.as_ref(), settings, Instant::now()) {
                Step::Denied => continue,
                Step::Answered(entry) => return Some(entry),
                Step::Failed => return None,
                Step::Unknown => {}
            }
            // `api.example.com.svc.Z`: whether namespace `com` exists first
            // (most often it does not, and that settles it).
            if self.namespace_denied(&key, settings, deadline).await {
                continue;
            }
            let entry = self.fetch(&key, zone?, settings, deadline).await?;
            match classify(&entry) {
                Step::Denied => continue,
                Step::Answered(entry) => return Some(entry),
                _ => return None,
            }
        }
        None
    }

    /// The question to start the walk's speculation with: for an IPv4-only
    /// pod's AAAA where any zone has the AAAA filter, the A (the filter
    /// needs it, and no AAAA goes upstream for the pod).
    pub(super) fn walk_key<'k>(&self, request: &Request<'k, '_>) -> KeyRef<'k> {
        let filtering = self.ipv4_pod_aaaa(request.key, request.client.ip())
            && (request.settings.router.zones().iter())
                .any(|zone| zone.no_aaaa_for_ipv4_pods.is_some());
        KeyRef {
            qtype: if filtering {
                rtype::A
            } else {
                request.key.qtype
            },
            ..*request.key
        }
    }

    /// Whether `key` is an AAAA from an IPv4-only pod of this node.
    fn ipv4_pod_aaaa(&self, key: &KeyRef<'_>, client: IpAddr) -> bool {
        key.qtype == rtype::AAAA
            && key.qclass == class::IN
            && self.search.clients.is_ipv4_only_pod(client)
    }

    /// What the cache and the local rules know of `key` now.
    fn step(&self, key: &KeyRef<'_>, settings: &Settings, now: Instant) -> Step {
        match self.cache.lookup(key, now, Duration::ZERO) {
            Lookup::Fresh(entry) | Lookup::Held(entry) => classify(&entry),
            _ if self.denied_locally(key, settings, now) => Step::Denied,
            _ => Step::Unknown,
        }
    }

    /// Whether the local stage would answer `key` NXDOMAIN (a schema rule
    /// with the zone's SOA known, a namespace the API does not list, a
    /// denied node above it).
    fn denied_locally(&self, key: &KeyRef<'_>, settings: &Settings, now: Instant) -> bool {
        if !may_answer_locally(key.qtype, key.qclass) {
            return false;
        }
        let rules = &settings.cluster;
        let name = key.name;
        if settings
            .router
            .route_in(key.view(), name)
            .is_some_and(|zone| zone.rewrites())
        {
            return false;
        }
        let in_cluster = suffix_at(name, rules.domain()).is_some();
        if rules.cannot_exist(name).is_some() {
            let soa_known = if in_cluster {
                self.search.learned.soa(rules.domain()).is_some()
            } else {
                self.search.learned.closest_soa(name).is_some()
            };
            if soa_known {
                return true;
            }
        }
        if let Some(namespace) = rules.svc_namespace(name)
            && self.search.namespaces.exists(namespace) == Some(false)
            && self.search.learned.soa(rules.domain()).is_some()
        {
            return true;
        }
        rules
            .cut_points(name)
            .any(|at| self.search.learned.denied(&name[at..], now).is_some())
    }

    /// Writes the autopath reply from the entry the walk ended at; None
    /// when it cannot be written (the caller answers as without autopath).
    /// An end the walk asked as an A for an AAAA (`walk_type`) is answered
    /// as its zone's AAAA filter answers; None when it cannot be written.
    fn write_autopath(
        &self,
        query: &Query<'_>,
        entry: &Entry,
        now: Instant,
        limit: usize,
        (settings, view): (&Settings, u8),
        out: &mut Vec<u8>,
    ) -> Option<u16> {
        // The entry as a reply of its own (TTLs counted down, the client's
        // flags), without OPT: the chained reply adds its own.
        let mut packet = query.packet[..HEADER_LEN].to_vec();
        packet.extend_from_slice(entry.question());
        let qtype_at = packet.len() - 4;
        let walked = u16::from_be_bytes([packet[qtype_at], packet[qtype_at + 1]]);
        let filtered = walked == rtype::A && query.qtype == rtype::AAAA;
        if filtered {
            packet[qtype_at..qtype_at + 2].copy_from_slice(&rtype::AAAA.to_be_bytes());
        }
        let plain = Query {
            packet: &packet,
            name_end: qtype_at,
            edns: None,
            qtype: query.qtype,
            ..*query
        };
        let mut target = Vec::with_capacity(512);
        let unlimited = u16::MAX.into();
        if filtered {
            let mut folded: NameBuf = [0; MAX_NAME_LEN];
            let len = fold_into(plain.name(), &mut folded);
            let zone = settings.router.route_in(view, &folded[..len])?;
            zone.no_aaaa_for_ipv4_pods.as_ref()?;
            let when = (now, Freshness::Fresh);
            self.render_for_ipv4_pod(entry, &plain, zone, when, unlimited, &mut target);
        } else {
            entry.render(&plain, now, Freshness::Fresh, None, unlimited, &mut target);
        }
        match cname_reply(query, &target, limit, out) {
            Ok(code) => {
                self.metrics.autopath_answers.inc();
                if filtered {
                    self.metrics.aaaa_for_ipv4_pods.inc();
                }
                Some(code)
            }
            Err(e) => {
                tracing::debug!("autopath: {e}; answering as without it");
                None
            }
        }
    }
}

/// A fetched or cached entry as a step of the walk.
fn classify(entry: &Arc<Entry>) -> Step {
    match (entry.kind, entry.rcode) {
        (Kind::Failure, _) => Step::Failed,
        (_, rcode::NXDOMAIN) => Step::Denied,
        (_, rcode::NOERROR) => Step::Answered(entry.clone()),
        _ => Step::Failed,
    }
}
