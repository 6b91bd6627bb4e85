//! The miss stage: a query the cache cannot answer waits on upstream as a
//! task. Identical misses are coalesced; a failure is cached briefly so the
//! next askers fail fast (RFC 9520), unless there is a stale answer to serve
//! instead (RFC 8767).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use super::hit::Request;
use super::metrics::CacheLabels;
use super::stats::ListenerStats;
use super::{Job, ListenerView, Settings, Shared, reply_limit};
use crate::cache::{Entry, Freshness, Key, Kind, Lookup};
use crate::inflight::Role;
use crate::listen::{Handled, Proto};
use crate::metrics::VIEW;
use crate::upstream::Zone;
use crate::upstream::forward::forward;
use crate::wire::query::OwnedQuery;
use crate::wire::{build, ede, rcode};

/// One place among the misses in flight, given back when the job ends.
pub(super) struct MissTicket(Arc<AtomicUsize>);

impl MissTicket {
    pub(super) fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<MissTicket> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| MissTicket(count.clone()))
    }
}

impl Drop for MissTicket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a fetch knows of the cache when it starts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// The caller's lookup may be old: an identical fetch may have finished
    /// since (a speculation and the client it works ahead of, a miss that
    /// waited for a namespace check). The cache is looked at again and a
    /// fresh answer there is used, not asked again.
    LookAgain,
    /// The caller found nothing fresh in this same turn of its event loop.
    /// Looking again would cost two cache lookups (3 % of a miss) for
    /// a race of microseconds whose loss is one redundant upstream query.
    JustLookedUp,
    /// A prefetch: asks whatever the cache holds.
    Refresh,
}

/// A cache miss, owned so it can move to a task.
pub struct MissJob {
    query: OwnedQuery,
    key: Key,
    zone: Arc<Zone>,
    settings: Arc<Settings>,
    stats: Arc<ListenerStats>,
    stale: Option<Arc<Entry>>,
    started: Instant,
    proto: Proto,
    _ticket: MissTicket,
}

impl Shared {
    /// Makes the miss a job, if the bound on misses in flight allows;
    /// beyond it (a silent upstream under load) the query gets a stale
    /// answer if there is one, and is dropped otherwise.
    pub(super) fn miss(
        &self,
        request: &Request<'_, '_>,
        all_stats: &Arc<ListenerStats>,
        stale: Option<Arc<Entry>>,
        out: &mut Vec<u8>,
    ) -> Handled<Job> {
        request.stats.cache_miss();
        let settings = request.settings;
        let Some(ticket) = MissTicket::take(&self.misses_in_flight, settings.max_misses_in_flight)
        else {
            self.metrics.rejected("too many misses in flight");
            let Some(stale) = stale else {
                return Handled::Drop;
            };
            let ttl = settings.cache.stale_ttl;
            request.reply_from(
                &stale,
                Freshness::Stale { ttl },
                Some(ede::STALE_ANSWER),
                out,
            );
            return Handled::Reply;
        };
        Handled::Upstream(Job::Miss(MissJob {
            query: OwnedQuery::new(request.query),
            key: request.key.to_owned(),
            zone: request.zone.clone(),
            settings: Arc::clone(settings),
            stats: Arc::clone(all_stats),
            stale,
            started: request.started,
            proto: request.proto,
            _ticket: ticket,
        }))
    }

    /// Resolves a miss and writes the reply into `out`.
    pub(super) async fn answer_miss(
        self: &Arc<Self>,
        job: MissJob,
        listener: &ListenerView,
        out: &mut Vec<u8>,
    ) {
        if job.stale.is_some() {
            // Boxed: the rare path's state stays out of every miss's future.
            return Box::pin(self.answer_stale_miss(job, listener, out)).await;
        }
        self.metrics.inflight.inc();
        // Every wait below ends by the deadline on its own: each upstream
        // try and the TCP pool (forward.rs), the namespace check's fetch, and
        // a coalesced query's wait for the one it joined (inflight.rs). So
        // the miss needs no timer of its own beside its upstream try's.
        let deadline = job.started + job.settings.query_timeout;
        // Each branch makes the futures it awaits: made before the branch,
        // both would take room in every miss's future twice.
        let check = || self.namespace_denied(&job.key, &job.settings, deadline);
        let fetch = |start| {
            self.fetch_or_refresh(&job.key, &job.zone, &job.settings, deadline, start)
                .map(|(entry, _)| entry)
        };
        // A lookup's predicted second expansion waits for the check (it most
        // likely saves the query); any other name is asked with it, so the
        // check adds no round trip (see search.rs). Without speculation
        // nothing is predicted: all wait. A name with no check to make (most
        // misses) goes straight to its fetch, without the prediction
        // table's lock.
        let cluster = &job.settings.cluster;
        let checks = cluster.namespace_to_check(job.key.name()).is_some();
        let fetched = if !checks {
            Ok(fetch(Start::JustLookedUp).await)
        } else if !cluster.search().speculate || self.predicted_expansion(job.key.name()) {
            if check().await {
                Err(())
            } else {
                // The check took a round trip: the cache may hold the answer by now.
                Ok(fetch(Start::LookAgain).await)
            }
        } else {
            // The name's own answer, when it came, is the one to give; the
            // cut only stands in for it. Boxed: both futures at once would
            // double what every miss's future holds.
            let (denied, fetched) =
                Box::pin(async { tokio::join!(check(), fetch(Start::JustLookedUp)) }).await;
            if denied && fetched.is_none() {
                Err(())
            } else {
                Ok(fetched)
            }
        };
        self.metrics.inflight.dec();
        let now = Instant::now();
        let query = job.query.get();
        let limit = reply_limit(job.proto, &query, &job.settings);
        let fetched = match fetched {
            Ok(fetched) => fetched,
            Err(()) => {
                // The namespace check denied the namespace: the cut answers.
                let code =
                    self.answer_from_cut(&query, job.key.name(), &job.settings, now, limit, out);
                let seconds = job.started.elapsed().as_secs_f64();
                job.stats
                    .zone(job.zone.index)
                    .reply(job.proto, code, false, out.len(), seconds);
                return;
            }
        };
        if fetched.as_ref().is_some_and(|e| e.take_speculative()) {
            self.metrics.speculation_used.inc();
        }
        let failed = fetched.as_ref().is_none_or(|e| e.kind == Kind::Failure);
        let stale = job.stale.as_ref().filter(|_| failed);
        let (code, from_cache) = if let Some(stale) = stale {
            let ttl = Freshness::Stale {
                ttl: job.settings.cache.stale_ttl,
            };
            let rendered = stale.render(&query, now, ttl, Some(ede::STALE_ANSWER), limit, out);
            self.metrics
                .cache_served_stale
                .get(&CacheLabels {
                    server: &listener.server,
                    zones: &job.zone.name,
                    view: VIEW,
                })
                .inc();
            (rendered.rcode, true)
        } else if let Some(entry) = &fetched {
            (
                entry
                    .render(&query, now, Freshness::Fresh, None, limit, out)
                    .rcode,
                true,
            )
        } else {
            build::servfail(
                query.packet,
                query.name_end + 4,
                query.edns,
                Some(ede::NO_REACHABLE_AUTHORITY),
                out,
            );
            (rcode::SERVFAIL, false)
        };
        // Read at the answer's arrival: what rendering it costs is left out.
        let seconds = now.saturating_duration_since(job.started).as_secs_f64();
        job.stats
            .zone(job.zone.index)
            .reply(job.proto, code, from_cache, out.len(), seconds);
    }

    /// A miss for an expired name the cache can still serve stale: the
    /// upstream's answer if it comes within `stale_answer_timeout`, else
    /// the stale answer, the fetch going on behind to refresh the cache
    /// (RFC 8767 section 5). When every upstream of the zone is marked
    /// down, the stale answer at once; the fetch still goes out (coalesced
    /// with any other for the name), so the first answer after the outage
    /// refreshes the entry and marks the upstream up.
    async fn answer_stale_miss(
        self: &Arc<Self>,
        job: MissJob,
        listener: &ListenerView,
        out: &mut Vec<u8>,
    ) {
        let MissJob {
            query,
            key,
            zone,
            settings,
            stats,
            stale,
            started,
            proto,
            _ticket: ticket,
        } = job;
        let stale = stale.expect("a stale entry");
        let query = query.get();
        let limit = reply_limit(proto, &query, &settings);
        let fetched = {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let deadline = started + settings.query_timeout;
            let wait_until = if zone.all_down() {
                started
            } else {
                started + settings.cache.stale_answer_timeout
            };
            let (this, key, zone, settings) =
                (self.clone(), key.clone(), zone.clone(), settings.clone());
            self.metrics.inflight.inc();
            self.tasks.spawn_query_on_main(async move {
                // The ticket goes with the fetch: refreshes behind stale
                // answers count among the misses in flight.
                let _ticket = ticket;
                let fetched = tokio::time::timeout_at(
                    deadline.into(),
                    this.fetch(&key, &zone, &settings, deadline),
                )
                .await
                .ok()
                .flatten();
                this.metrics.inflight.dec();
                let _ = tx.send(fetched);
            });
            if wait_until == started {
                None // at once: the stale answer, whatever the fetch does
            } else {
                tokio::time::timeout_at(wait_until.into(), rx)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .flatten()
                    .filter(|e| e.kind != Kind::Failure)
            }
        };
        let now = Instant::now();
        let code = match fetched {
            Some(entry) => {
                entry
                    .render(&query, now, Freshness::Fresh, None, limit, out)
                    .rcode
            }
            None => {
                let ttl = Freshness::Stale {
                    ttl: settings.cache.stale_ttl,
                };
                self.metrics
                    .cache_served_stale
                    .get(&CacheLabels {
                        server: &listener.server,
                        zones: &zone.name,
                        view: VIEW,
                    })
                    .inc();
                stale
                    .render(&query, now, ttl, Some(ede::STALE_ANSWER), limit, out)
                    .rcode
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        stats
            .zone(zone.index)
            .reply(proto, code, true, out.len(), seconds);
    }

    /// Asks upstream for `key` (or joins the identical query in flight) and
    /// stores the result. `None` when no upstream gave a usable answer; a
    /// failure entry is then cached so the next queries fail fast (RFC 9520),
    /// unless a stale entry is there to be served instead.
    ///
    /// This and the other wrappers below are not `async fn`s: each layer
    /// would keep its own copy of the arguments in every miss's future.
    pub(super) fn fetch<'a>(
        self: &'a Arc<Self>,
        key: &'a Key,
        zone: &'a Arc<Zone>,
        settings: &'a Settings,
        deadline: Instant,
    ) -> impl Future<Output = Option<Arc<Entry>>> + Send + 'a {
        self.fetch_or_refresh(key, zone, settings, deadline, Start::LookAgain)
            .map(|(entry, _)| entry)
    }

    /// [`Shared::fetch`] of an entry still fresh (a prefetch): asks upstream
    /// whatever the cache holds.
    pub(super) fn refresh<'a>(
        self: &'a Arc<Self>,
        key: &'a Key,
        zone: &'a Arc<Zone>,
        settings: &'a Settings,
        deadline: Instant,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.fetch_or_refresh(key, zone, settings, deadline, Start::Refresh)
            .map(drop)
    }

    /// [`Shared::fetch`], and whether this call asked upstream (leader)
    /// or joined a fetch already in flight (follower).
    pub(super) fn fetch_as<'a>(
        self: &'a Arc<Self>,
        key: &'a Key,
        zone: &'a Arc<Zone>,
        settings: &'a Settings,
        deadline: Instant,
    ) -> impl Future<Output = (Option<Arc<Entry>>, Role)> + Send + 'a {
        self.fetch_or_refresh(key, zone, settings, deadline, Start::LookAgain)
    }

    async fn fetch_or_refresh(
        self: &Arc<Self>,
        key: &Key,
        zone: &Arc<Zone>,
        settings: &Settings,
        deadline: Instant,
        start: Start,
    ) -> (Option<Arc<Entry>>, Role) {
        // Boxed: an async fn keeps the future it is given and the one it
        // awaits apart, and this one is the bulk of a miss (the upstream
        // exchange); inline, every miss in flight would carry it twice.
        let (outcome, role) = self
            .inflight
            .run(
                key,
                deadline,
                Box::pin(async {
                    if start == Start::LookAgain
                        && let Lookup::Fresh(e) =
                            self.cache
                                .lookup(&key.as_ref(), Instant::now(), Duration::ZERO)
                        && e.kind != Kind::Failure
                    {
                        return Some(e);
                    }
                    let forwarded = forward(zone, key, deadline.into()).await;
                    let now = forwarded.as_ref().map_or_else(Instant::now, |f| f.received);
                    // A failure never replaces an answer that can still be served,
                    // fresh (a prefetch that failed) or stale.
                    let has_usable =
                        || match self
                            .cache
                            .lookup(&key.as_ref(), now, settings.cache.stale_max_age)
                        {
                            Lookup::Fresh(e) => e.kind != Kind::Failure,
                            Lookup::Stale(_) => true,
                            Lookup::Miss => false,
                        };
                    match forwarded {
                        Some(f) => {
                            let entry =
                                Arc::new(Entry::from_response(&f.msg, &f.layout, &zone.ttl, now));
                            self.learn(&settings.cluster, key, zone, &entry, (&f.msg, &f.layout));
                            if entry.kind != Kind::Failure || !has_usable() {
                                self.cache.insert(key.clone(), entry.clone());
                            }
                            Some(entry)
                        }
                        None => {
                            let failure_ttl = settings.cache.failure_ttl;
                            if failure_ttl > 0 && !has_usable() {
                                let failure = Entry::failure(&key.question(), failure_ttl, now);
                                self.cache.insert(key.clone(), Arc::new(failure));
                            }
                            None
                        }
                    }
                }),
            )
            .await;
        if role == Role::Follower {
            self.metrics.coalesced.inc();
        }
        (outcome, role)
    }
}
