//! The miss stage: a query the cache cannot answer waits on upstream as a
//! task. Identical misses are coalesced; a failure is cached briefly so the
//! next askers fail fast (RFC 9520), unless there is a stale answer to serve
//! instead (RFC 8767).
//!
//! A miss job is decided, then written: [`Plan`] is what it does before it
//! can answer (ask, with or after a namespace check, or race the upstream
//! against its stale answer), [`Answer`] what that came to, and one
//! renderer writes it. Every stale reply, the one at the bound on misses in
//! flight included, is written and counted by [`serve_stale`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use futures_util::FutureExt;

use super::fetch::Start;
use super::hit::Request;
use super::stats::{ListenerStats, ZoneStats};
use super::{Job, Settings, Shared, reply_limit};
use crate::answered::{Answered, Source};
use crate::cache::{Entry, Freshness, Key, Kind};
use crate::listen::{Handled, Proto};
use crate::upstream::Zone;
use crate::wire::query::{OwnedQuery, Query};
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
    /// Taken by the fetch behind a stale answer, which outlives the job.
    ticket: Option<MissTicket>,
    /// The place among its zone's misses in flight (`upstream::bulkhead`),
    /// taken with `ticket`.
    place: Option<crate::upstream::bulkhead::ZoneTicket>,
    client: SocketAddr,
    /// `key` is the A of an AAAA question from an IPv4-only pod, answered
    /// from it (`serve::aaaa`).
    for_ipv4_pod: bool,
    /// A speculation works ahead of this name, or walks now and may fetch
    /// it too: the fetch looks at the cache again once it leads, so that
    /// one that finished between this miss's lookup and its start is not
    /// asked twice.
    look_again: bool,
    /// The place among its namespace's misses in flight (`[budget]`),
    /// taken with `ticket` by the fetch behind a stale answer.
    budget: Option<crate::admission::budget::BudgetTicket>,
}

/// What a miss does before it can answer, decided when its task starts.
enum Plan {
    /// Nothing stale to fall back on: ask upstream, as [`Ask`] says.
    Ask(Ask),
    /// An expired entry to fall back on: the upstream's answer if it comes
    /// by the instant given (`stale_answer_timeout`), else the stale one;
    /// the fetch goes on behind to refresh the cache (RFC 8767 section 5).
    StaleAfter(Arc<Entry>, Instant),
    /// The same, answered stale at once: every upstream of the zone is
    /// marked down, or `stale_answer_timeout` is 0. The fetch still goes
    /// out (coalesced with any other for the name), so the first answer
    /// after an outage refreshes the entry and marks the upstream up.
    StaleAtOnce(Arc<Entry>),
}

/// How a miss with nothing stale asks upstream.
#[derive(Clone, Copy)]
enum Ask {
    /// The name alone, or join the identical query in flight.
    Fetch,
    /// The namespace node first, and the name only if the namespace
    /// exists: a lookup's predicted second expansion (the check most
    /// likely saves the query), or any name below an unknown namespace
    /// without speculation.
    CheckFirst,
}

/// What a miss came to: what its reply is written from.
enum Answer {
    /// Upstream's answer, or the cache's when an identical fetch stored it
    /// meanwhile; a failure entry is written as it is (SERVFAIL).
    Fetched(Arc<Entry>),
    /// No usable answer in time: the expired entry, served stale.
    Stale(Arc<Entry>),
    /// A denial or failure fetched, replaced by the name's last positive
    /// answer (`serve::last_good`).
    LastGood(super::last_good::Kept),
    /// The namespace check denied the name's namespace: the cut answers.
    Cut,
    /// No upstream answered, and nothing stale to give: SERVFAIL.
    Unreachable,
}

impl Answer {
    fn fetched(entry: Option<Arc<Entry>>) -> Answer {
        entry.map_or(Answer::Unreachable, Answer::Fetched)
    }
}

/// Writes `stale` as the reply (RFC 8767): TTL the zone's `stale_ttl`, the Extended
/// DNS Error "Stale Answer", counted in `coredns_cache_served_stale_total`.
/// Every stale reply goes through here, the one at the bound on misses in
/// flight included. Returns the response code written.
fn serve_stale(
    stale: &Entry,
    query: &Query<'_>,
    now: Instant,
    zone: &Zone,
    limit: usize,
    stats: &ZoneStats,
    out: &mut Vec<u8>,
) -> u16 {
    let ttl = Freshness::Stale {
        ttl: zone.cache.stale_ttl,
    };
    let rendered = stale.render(query, now, ttl, Some(ede::STALE_ANSWER), limit, out);
    stats.served_stale();
    rendered.rcode
}

impl Shared {
    /// Makes the miss a job, if the bound on misses in flight allows;
    /// beyond it (a silent upstream under load) the query gets a stale
    /// answer if there is one, and is dropped otherwise. So beyond its
    /// namespace's miss budget (`[budget]`), but then REFUSED if that is
    /// the budget's action.
    pub(super) fn miss(
        &self,
        request: &Request<'_, '_>,
        all_stats: &Arc<ListenerStats>,
        stale: Option<Arc<Entry>>,
        speculating: bool,
        out: &mut Vec<u8>,
    ) -> Handled<Job> {
        // While speculation walks, the pod's next expansion may be the one
        // a walk is fetching right now: look again once leading.
        let look_again = speculating || self.search.speculation.busy();
        self.miss_as(request, all_stats, stale, out, (false, look_again))
    }

    /// [`Shared::miss`] of the A that `request` holds for an IPv4-only
    /// pod's AAAA question, answered from it (`serve::aaaa`).
    pub(super) fn miss_for_ipv4_pod(
        &self,
        request: &Request<'_, '_>,
        all_stats: &Arc<ListenerStats>,
        stale: Option<Arc<Entry>>,
        out: &mut Vec<u8>,
    ) -> Handled<Job> {
        self.miss_as(request, all_stats, stale, out, (true, false))
    }

    fn miss_as(
        &self,
        request: &Request<'_, '_>,
        all_stats: &Arc<ListenerStats>,
        stale: Option<Arc<Entry>>,
        out: &mut Vec<u8>,
        (for_ipv4_pod, look_again): (bool, bool),
    ) -> Handled<Job> {
        request.stats.cache_miss();
        let settings = request.settings;
        let budget = self.take_miss_budget(request);
        // The namespace's budget, then the zone's bulkhead, then the
        // server's bound: a zone over its share is turned away at once
        // (stale, else SERVFAIL), before it can take the others' room.
        let place = budget
            .as_ref()
            .ok()
            .and_then(|_| request.zone.bulkhead.enter());
        let ticket = match &place {
            Some(_) => MissTicket::take(&self.misses_in_flight, settings.max_misses_in_flight),
            None => None,
        };
        let Some(ticket) = ticket else {
            let zone_full = place.is_none();
            let reason = if zone_full {
                "zone over its misses in flight"
            } else {
                "too many misses in flight"
            };
            let Some(stale) = stale else {
                return match budget {
                    Err(action) => self.over_miss_budget(request, action, out),
                    Ok(_) if zone_full => {
                        self.metrics.rejected(reason);
                        self.zone_full(request, out)
                    }
                    Ok(_) => {
                        self.metrics.rejected(reason);
                        Handled::Drop
                    }
                };
            };
            if budget.is_ok() {
                self.metrics.rejected(reason);
            }
            // Written as a hit is: against the query's arrival.
            let limit = reply_limit(request.proto, request.query, settings);
            let (query, started, stats) = (request.query, request.started, request.stats);
            let code = if for_ipv4_pod {
                stats.served_stale();
                let ttl = Freshness::Stale {
                    ttl: request.zone.cache.stale_ttl,
                };
                self.render_for_ipv4_pod(&stale, query, request.zone, (started, ttl), limit, out)
            } else {
                serve_stale(&stale, query, started, request.zone, limit, stats, out)
            };
            let seconds = started.elapsed().as_secs_f64();
            let answered = request.answered(Source::Stale, out);
            stats.reply(request.proto, code, true, out.len(), seconds, answered);
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
            ticket: Some(ticket),
            place,
            client: request.client,
            for_ipv4_pod,
            look_again,
            budget: budget.ok().flatten(),
        }))
    }

    /// Resolves a miss and writes the reply into `out`: decides what to do
    /// ([`Shared::plan`]), waits for what it came to, and writes that
    /// ([`Shared::render_miss`]).
    pub(super) async fn answer_miss(self: &Arc<Self>, mut job: MissJob, out: &mut Vec<u8>) {
        let answer = match self.plan(&mut job) {
            Plan::StaleAtOnce(stale) => {
                drop(self.fetch_behind(&mut job));
                Answer::Stale(stale)
            }
            Plan::StaleAfter(stale, until) => {
                let behind = self.fetch_behind(&mut job);
                // Boxed: the rare path's timer stays out of every miss's future.
                Box::pin(async move {
                    tokio::time::timeout_at(until.into(), behind)
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten()
                        .filter(|e| e.kind != Kind::Failure)
                        .map_or(Answer::Stale(stale), Answer::Fetched)
                })
                .await
            }
            Plan::Ask(ask) => self.fetched(&job, ask).await,
        };
        // Read at the answer's arrival: what rendering it costs is left out
        // of the duration.
        self.render_miss(&job, answer, Instant::now(), out);
    }

    /// What the miss is to do, from what is known now. Takes the stale
    /// entry out of the job, if there is one.
    fn plan(&self, job: &mut MissJob) -> Plan {
        if let Some(stale) = job.stale.take() {
            let timeout = job.zone.cache.stale_answer_timeout;
            return if job.zone.all_down() || timeout.is_zero() {
                Plan::StaleAtOnce(stale)
            } else {
                Plan::StaleAfter(stale, job.started + timeout)
            };
        }
        // A name with no check to make (most misses) goes straight to its
        // fetch, without the prediction table's lock. Without speculation
        // nothing is predicted: all wait for the check. With it, a name
        // not predicted is most often a pod's first expansion in its own
        // namespace, which exists: asked alone, as its walk asks it
        // (speculation checks the namespace of the expansion after it).
        let cluster = &job.settings.cluster;
        Plan::Ask(
            if job.zone.rewrites() || cluster.namespace_to_check(job.key.name()).is_none() {
                Ask::Fetch
            } else if !cluster.search().speculate || self.predicted_expansion(job.key.name()) {
                Ask::CheckFirst
            } else {
                Ask::Fetch
            },
        )
    }

    /// Asks upstream for a miss with nothing stale to fall back on.
    async fn fetched(self: &Arc<Self>, job: &MissJob, ask: Ask) -> Answer {
        self.metrics.inflight.inc();
        // Every wait below ends by the deadline on its own: each upstream
        // try and the TCP pool (forward.rs), the namespace check's fetch, and
        // a coalesced query's wait for the one it joined (coalesce.rs). So
        // the miss needs no timer of its own beside its upstream try's.
        let deadline = job.started + job.settings.query_timeout;
        // Each branch makes the futures it awaits: made before the branch,
        // both would take room in every miss's future twice.
        let check = || self.namespace_denied(&job.key, &job.settings, deadline);
        let fetch = |start| {
            self.fetch_or_refresh(&job.key, &job.zone, &job.settings, deadline, start)
                .map(|(entry, _)| entry)
        };
        let answer = match ask {
            Ask::Fetch if job.look_again => Answer::fetched(fetch(Start::LookAgain).await),
            Ask::Fetch => Answer::fetched(fetch(Start::JustLookedUp).await),
            Ask::CheckFirst => {
                if check().await {
                    Answer::Cut
                } else {
                    // The check took a round trip: the cache may hold the answer by now.
                    Answer::fetched(fetch(Start::LookAgain).await)
                }
            }
        };
        self.metrics.inflight.dec();
        if let Answer::Fetched(entry) = &answer
            && entry.take_speculative()
        {
            self.metrics.speculation_used.inc();
        }
        answer
    }

    /// Starts the fetch behind a stale answer as a task of its own, which
    /// takes the job's place among the misses in flight: refreshes behind
    /// stale answers count among them. What it fetched comes on the channel.
    fn fetch_behind(
        self: &Arc<Self>,
        job: &mut MissJob,
    ) -> tokio::sync::oneshot::Receiver<Option<Arc<Entry>>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let deadline = job.started + job.settings.query_timeout;
        let ticket = (job.ticket.take(), job.place.take());
        let budget = job.budget.take();
        let (this, key, zone, settings) = (
            self.clone(),
            job.key.clone(),
            job.zone.clone(),
            job.settings.clone(),
        );
        self.metrics.inflight.inc();
        self.tasks.spawn_query_on_main(async move {
            let _tickets = (ticket, budget);
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
        rx
    }

    /// A miss its zone has no room for (`upstream::bulkhead`) and nothing
    /// stale to give: SERVFAIL at once, with the Extended DNS Error "No
    /// Reachable Authority", so the client moves on instead of waiting
    /// out its timeout as it would for a drop.
    fn zone_full(&self, request: &Request<'_, '_>, out: &mut Vec<u8>) -> Handled<Job> {
        let query = request.query;
        let ede = Some(ede::NO_REACHABLE_AUTHORITY);
        build::servfail(query.packet, query.name_end + 4, query.edns, ede, out);
        let seconds = request.started.elapsed().as_secs_f64();
        let answered = request.answered(Source::Local, out);
        let stats = request.stats;
        stats.reply(
            request.proto,
            rcode::SERVFAIL,
            false,
            out.len(),
            seconds,
            answered,
        );
        Handled::Reply
    }

    /// Writes what the miss came to, at `now`, and counts the reply.
    fn render_miss(&self, job: &MissJob, answer: Answer, now: Instant, out: &mut Vec<u8>) {
        let query = job.query.get();
        let limit = reply_limit(job.proto, &query, &job.settings);
        let stats = job.stats.zone(job.zone.index);
        let answer = match answer {
            Answer::Fetched(entry) => self
                .last_good_over(&job.key, &job.zone, &entry, now)
                .map_or(Answer::Fetched(entry), Answer::LastGood),
            other => other,
        };
        let (code, from_cache, source) = match answer {
            Answer::Fetched(entry) if job.for_ipv4_pod => {
                let when = (now, Freshness::Fresh);
                let code = self.render_for_ipv4_pod(&entry, &query, &job.zone, when, limit, out);
                (code, true, Source::Upstream)
            }
            Answer::Fetched(entry) => (
                entry
                    .render(&query, now, Freshness::Fresh, None, limit, out)
                    .rcode,
                true,
                Source::Upstream,
            ),
            Answer::Stale(stale) if job.for_ipv4_pod => {
                stats.served_stale();
                let ttl = Freshness::Stale {
                    ttl: job.zone.cache.stale_ttl,
                };
                let when = (now, ttl);
                let code = self.render_for_ipv4_pod(&stale, &query, &job.zone, when, limit, out);
                (code, true, Source::Stale)
            }
            Answer::Stale(stale) => (
                serve_stale(&stale, &query, now, &job.zone, limit, stats, out),
                true,
                Source::Stale,
            ),
            Answer::LastGood(kept) if job.for_ipv4_pod => {
                let when = (now, kept.freshness);
                let code =
                    self.render_for_ipv4_pod(&kept.entry, &query, &job.zone, when, limit, out);
                (code, true, Source::Stale)
            }
            Answer::LastGood(kept) => {
                let rendered = kept
                    .entry
                    .render(&query, now, kept.freshness, kept.ede, limit, out);
                (rendered.rcode, true, Source::Stale)
            }
            Answer::Cut => {
                let name = job.key.name();
                let code = self.answer_from_cut(&query, name, &job.settings, now, limit, out);
                (code, false, Source::Local)
            }
            Answer::Unreachable => {
                build::servfail(
                    query.packet,
                    query.name_end + 4,
                    query.edns,
                    Some(ede::NO_REACHABLE_AUTHORITY),
                    out,
                );
                (rcode::SERVFAIL, false, Source::Local)
            }
        };
        let seconds = now.saturating_duration_since(job.started).as_secs_f64();
        let answered = Answered {
            query: &query,
            client: job.client,
            started: job.started,
            source,
            reply: out,
        };
        stats.reply(job.proto, code, from_cache, out.len(), seconds, answered);
    }
}

#[cfg(test)]
#[path = "miss_tests.rs"]
mod tests;
