//! The request path: one query in, one reply out, as a sequence of stages.
//!
//! `handle` (the [`Service`] of the listeners, implemented by [`Shared`])
//! runs on the listener's thread and answers everything it can without
//! waiting:
//!
//! 1. `admit`: the allow list and the per-client rate limit; `budget`:
//!    the rate budget of the client's namespace (when `[budget]` is on);
//!    then `replay`: a UDP worker's kept reply to the same query bytes
//!    (the `hit` stage keeps them);
//! 2. parse: a malformed query gets FORMERR/NOTIMP (or nothing);
//! 3. `route`: the zone of the name, REFUSED if none;
//! 4. `identity`: the CHAOS identity names (`id.server`, `version.bind`);
//!    then `records`: the zone's local records, templates and `local`
//!    names (only when some zone has them);
//! 5. `autopath`: a verified pod's first search-list expansion is
//!    answered with the end of its walk from the cache, or becomes a
//!    [`Job::Autopath`] (or goes on as without it);
//! 6. `hit`: a fresh cache entry is the reply (and may start a
//!    `prefetch`); an expired one is kept for the miss to serve stale;
//! 7. `search`: work ahead of a pod's search list (the namespace check,
//!    speculation on the next expansions);
//! 8. `local`: a name the cluster DNS schema rules out, or one below a
//!    denied namespace or Service, is NXDOMAIN without asking upstream;
//! 9. `miss`: everything else becomes a [`MissJob`] ([`Job::Miss`]),
//!    after the miss budget of the client's namespace (`budget`),
//!    which the listener runs (a UDP worker polls it as a future of its
//!    own loop, TCP as a task): coalesce with identical misses, ask the
//!    zone's upstreams, store, reply; a stale answer when the upstreams
//!    fail or are slower than `stale_answer_timeout`.
//!
//! A new stage goes where its question can first be answered, in a file
//! of its own; one that needs the cache's verdict goes after `hit`.

mod aaaa;
mod admit;
mod autopath;
mod budget;
mod fetch;
mod follow;
mod hit;
pub(crate) mod identity;
mod last_good;
mod local;
pub(crate) mod metrics;
mod miss;
mod prefetch;
mod prime;
mod records;
mod replay;
mod route;
mod search;
mod settings;
pub(crate) mod stats;
mod unzoned;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures_util::future::Either;

use crate::cache::key::NameBuf;
use crate::cache::{Cache, KeyRef};
use crate::coalesce::Coalescer;
use crate::listen::TcpLimits;
use crate::listen::{Arrival, Handled, ListenerInfo, Proto, Service};
use crate::tasks::Tasks;
use crate::wire::{build, query, rtype};
pub(crate) use autopath::AutopathJob;
use metrics::ServeMetrics;
pub(crate) use miss::MissJob;
pub(crate) use settings::Settings;
use stats::StatsSlot;

/// The request path's state, shared by every listener and task.
pub struct Shared {
    /// Replaced whole on reload, with [`Shared::set_settings`].
    pub(crate) settings: ArcSwap<Settings>,
    /// The generation of `settings`, stored after them: a UDP worker
    /// keeps its batch's settings while this stands still.
    settings_generation: AtomicU64,
    pub(crate) cache: Cache,
    coalescer: Coalescer,
    /// What the search-list work (local answers, namespace checks,
    /// speculation, autopath) knows and keeps.
    pub(crate) search: search::SearchState,
    metrics: Arc<ServeMetrics>,
    pub(crate) tasks: Tasks,
    /// Cleared when shutdown starts.
    pub(crate) ready: Arc<AtomicBool>,
    /// Miss jobs alive now, against `max_misses_in_flight`.
    misses_in_flight: Arc<AtomicUsize>,
    /// The query log's running sink.
    query_log: crate::querylog::Hub,
    /// dnstap's running sink.
    dnstap: crate::dnstap::Hub,
}

/// A listener as the request path sees it: who it is, and its metric handles.
pub(crate) type ListenerView = ListenerInfo<StatsSlot>;

/// The cache of the request path, for the side services that read or
/// write only it (the cache file's writer).
impl AsRef<Cache> for Shared {
    fn as_ref(&self) -> &Cache {
        &self.cache
    }
}

impl Shared {
    /// The request path with `settings` and a cache of `capacity` bytes.
    /// Call on the main runtime (see `tasks`).
    /// `forwarder`: the slot its settings' zones offer upstream exchanges
    /// to (dnstap), filled by its dnstap hub.
    pub(crate) fn new(
        settings: Settings,
        capacity: u64,
        metrics: Arc<ServeMetrics>,
        forwarder: crate::dnstap::ForwarderSlot,
    ) -> Shared {
        let tasks = Tasks::on_current_runtime();
        let search = search::SearchState::default();
        let query_log =
            crate::querylog::Hub::new(search.clients.clone(), metrics.query_log_counters());
        let dnstap =
            crate::dnstap::Hub::new(search.clients.clone(), metrics.dnstap.clone(), forwarder);
        Shared {
            settings_generation: AtomicU64::new(settings.generation),
            settings: ArcSwap::from_pointee(settings),
            cache: Cache::new(capacity),
            coalescer: Coalescer::default(),
            search,
            metrics,
            tasks,
            ready: Arc::new(AtomicBool::new(false)),
            misses_in_flight: Arc::default(),
            query_log,
            dnstap,
        }
    }

    /// The slot dnstap's upstream exchanges go to, for settings built anew.
    pub(crate) fn dnstap_forwarder(&self) -> &crate::dnstap::ForwarderSlot {
        self.dnstap.forwarder()
    }

    /// The cache, for benchmarks and tests that fill it before they query.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// SIGHUP: a query log file is opened again before its next write.
    pub fn reopen_query_log(&self) {
        self.query_log.reopen();
    }

    /// At shutdown, once no query is in flight: writes what the query log
    /// and dnstap have queued and ends dnstap's stream, within `within`
    /// each (blocks).
    pub fn finish_observers(&self, within: Duration) {
        self.query_log.finish(within);
        self.dnstap.finish(within);
    }
}

impl Shared {
    /// The listener's stats for `settings`, built on the first query after
    /// a reload, with the zones' observers.
    #[inline]
    fn stats_for(&self, listener: &ListenerView, settings: &Settings) -> stats::StatsGuard {
        stats::for_listener(
            listener,
            settings,
            &self.metrics,
            &self.query_log,
            &self.dnstap,
        )
    }

    /// Puts `settings` in force: the next query of every listener runs on them.
    pub(crate) fn set_settings(&self, settings: Settings) {
        let generation = settings.generation;
        self.settings.store(Arc::new(settings));
        self.settings_generation
            .store(generation, Ordering::Release);
    }

    /// Brings a UDP worker's `batch` up to now at the start of a batch:
    /// the settings and stats it kept, unless a reload replaced them (one
    /// load of their generation, where loading them anew costs two
    /// `ArcSwap` loads and two reference counts), and the cache's
    /// retirement count.
    #[inline]
    fn refresh_batch(&self, batch: &mut Option<stats::Batch>, listener: &ListenerView) {
        let generation = self.settings_generation.load(Ordering::Acquire);
        match batch {
            Some(kept) if kept.settings.generation == generation => {
                kept.retirements = self.cache.retirements();
            }
            _ => *batch = Some(self.batch_for(listener)),
        }
    }

    /// What a UDP worker's batch runs on: the settings now and their stats.
    fn batch_for(&self, listener: &ListenerView) -> stats::Batch {
        let settings = self.settings.load_full();
        let stats = arc_swap::Guard::into_inner(self.stats_for(listener, &settings))
            .expect("stats for the current settings");
        let retirements = self.cache.retirements();
        stats::Batch {
            settings,
            stats,
            retirements,
        }
    }
}

/// The largest reply a client may get: its UDP size, or a TCP message's
/// 16-bit length limit (an upstream's largest answer plus our OPT is over it).
fn reply_limit(proto: Proto, query: &query::Query<'_>, settings: &Settings) -> usize {
    match proto {
        Proto::Udp => query.udp_limit(settings.max_udp_payload),
        Proto::Tcp => u16::MAX as usize,
    }
}

/// What waits on upstream: a miss, or an autopath walk.
pub enum Job {
    Miss(MissJob),
    Autopath(AutopathJob),
}

impl Shared {
    /// The stages for a query autopath does not answer (here, or at the
    /// end of a walk that ended at the asked name): the AAAA filter for a
    /// pod without IPv6, then the usual ones. After autopath, whose answer
    /// (a CNAME to the walk's end) the A and the AAAA of a first expansion
    /// then share.
    #[inline]
    fn after_autopath(
        self: &Arc<Self>,
        request: &hit::Request<'_, '_>,
        listener: &ListenerView,
        all_stats: &Arc<stats::ListenerStats>,
        out: &mut Vec<u8>,
    ) -> Handled<Job> {
        if request.query.qtype == rtype::AAAA
            && request.zone.no_aaaa_for_ipv4_pods.is_some()
            && let Some(done) = self.aaaa_for_ipv4_pod(request, all_stats, out)
        {
            return done;
        }
        self.plain_stages(request, listener, all_stats, out)
    }

    /// The stages after routing, for a query autopath leaves alone: the
    /// cache, the local answers, the miss.
    #[inline]
    fn plain_stages(
        self: &Arc<Self>,
        request: &hit::Request<'_, '_>,
        listener: &ListenerView,
        all_stats: &Arc<stats::ListenerStats>,
        out: &mut Vec<u8>,
    ) -> Handled<Job> {
        let stale = match self.answer_from_cache(request, listener, out) {
            hit::Cached::Answered => return Handled::Reply,
            hit::Cached::Stale(entry) => Some(entry),
            hit::Cached::Miss => None,
        };
        let speculating = self.maybe_speculate(request.key, request.settings);
        if self.answer_locally(request, out) {
            return Handled::Reply;
        }
        self.miss(request, all_stats, stale, speculating, out)
    }
}

impl Service for Shared {
    type PerListener = StatsSlot;
    type Job = Job;
    type Tally = stats::Tally;

    /// The stages in order.
    #[inline]
    fn handle(
        self: &Arc<Self>,
        packet: &[u8],
        client: SocketAddr,
        listener: &ListenerView,
        proto: Proto,
        arrival: Arrival<'_, stats::Tally>,
        out: &mut Vec<u8>,
    ) -> Handled<Job> {
        let started = arrival.at;
        // A UDP worker's batch loads the settings and stats once; a query
        // counted alone (TCP, a walk's stages) loads its own.
        let alone: (arc_swap::Guard<Arc<Settings>>, stats::StatsGuard);
        let (settings, all_stats, tally) = match arrival.tally {
            Some(tally) => {
                let tally = tally.open(started, |batch| self.refresh_batch(batch, listener));
                let batch = tally.batch();
                (&batch.settings, &batch.stats, Some(tally))
            }
            None => {
                let settings = self.settings.load();
                let stats = self.stats_for(listener, &settings);
                alone = (settings, stats);
                let stats = alone.1.as_ref().expect("stats for the current settings");
                (&*alone.0, stats, None)
            }
        };
        let unzoned = unzoned::Unzoned {
            packet,
            client,
            proto,
            started,
            settings,
        };
        if let Some(done) = admit::admit(settings, &self.metrics, packet, client.ip(), started, out)
        {
            return self.log_unzoned(&unzoned, done, out);
        }
        if let Some(budgets) = &settings.budgets
            && let Some(done) = budget::spend_query(
                budgets,
                &self.search.clients,
                &self.metrics,
                packet,
                client.ip(),
                started,
                out,
            )
        {
            return self.log_unzoned(&unzoned, done, out);
        }
        if let Some(tally) = tally
            && let Some(counted) = tally.replies().borrow_mut().replay(
                packet,
                settings.generation,
                tally.batch().retirements,
                started,
                out,
            )
        {
            let zone = counted.zone as usize;
            let stats = all_stats.zone(zone);
            tally
                .zone(zone)
                .replayed(stats, counted, packet.len(), out.len());
            return Handled::Reply;
        }
        let query = match query::parse(packet) {
            Ok(q) => q,
            Err(reject) => {
                self.metrics.rejected(reject.reason());
                let done = if build::error_reply(packet, &reject, out) {
                    Handled::Reply
                } else {
                    Handled::Drop
                };
                return self.log_unzoned(&unzoned, done, out);
            }
        };
        let mut name_buf: NameBuf = [0; 255];
        let view = settings.router.view_of(listener.addr);
        let key = KeyRef::from_query(&query, &mut name_buf).in_view(view);
        let Some(zone) = settings.router.route_in(view, key.name) else {
            let done = route::refuse_unrouted(&self.metrics, &query, listener, proto, out);
            return self.log_unzoned(&unzoned, done, out);
        };
        let stats = all_stats.zone(zone.index);
        let replay = tally.map(|t| (t.replies(), t.batch().retirements));
        let tally = match tally {
            Some(tally) => {
                let counts = tally.zone(zone.index);
                counts.request(stats, proto, query.qtype, packet.len(), query.dnssec_ok());
                Some(counts)
            }
            None => {
                stats.request(proto, query.qtype, packet.len(), query.dnssec_ok());
                None
            }
        };
        let request = hit::Request {
            query: &query,
            key: &key,
            zone,
            settings,
            stats,
            tally,
            proto,
            started,
            client,
            replay,
        };
        if identity::answer(&request, settings.identity.as_ref(), out) {
            return Handled::Reply;
        }
        if let Some(stage) = &settings.records
            && records::answer(&request, stage, client, out)
        {
            return Handled::Reply;
        }
        if let Some(at) = self.autopath_candidate(&key, client.ip(), settings) {
            match self.autopath_from_cache(&request, at, out) {
                autopath::FromCache::Answered => return Handled::Reply,
                autopath::FromCache::Plain => {}
                autopath::FromCache::Wait => {
                    // Ahead of the walk, the names it will ask (their A
                    // where the AAAA filter answers the pod's AAAA).
                    self.maybe_speculate(&self.walk_key(&request), settings);
                    if let Some(job) = self.autopath_job(&request, all_stats, at) {
                        return job;
                    }
                }
            }
        }
        self.after_autopath(&request, listener, all_stats, out)
    }

    /// Not an `async fn`: its future would keep the job a second time
    /// beside the miss's own copy; this returns the miss's future itself.
    fn resolve(
        self: &Arc<Self>,
        job: Job,
        listener: &ListenerView,
        out: &mut Vec<u8>,
    ) -> impl Future<Output = ()> + Send {
        match job {
            Job::Miss(miss) => Either::Left(self.answer_miss(miss, out)),
            Job::Autopath(walk) => {
                Either::Right(Box::pin(self.answer_autopath(walk, listener, out)))
            }
        }
    }

    #[inline]
    fn prepare(&self, packet: &[u8], tally: &stats::Tally) {
        tally.replies().borrow_mut().prefetch(packet);
    }

    fn end_batch(&self, tally: &mut stats::Tally, now: Instant) {
        tally.end(now);
    }

    fn idle(&self, tally: &mut stats::Tally) {
        tally.let_go();
    }

    fn tcp_limits(&self) -> TcpLimits {
        self.settings.load().tcp
    }

    fn tasks(&self) -> &Tasks {
        &self.tasks
    }
}
