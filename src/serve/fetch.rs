//! The fetch under every miss and prefetch: ask upstream for a key (or
//! join the identical fetch in flight, `coalesce`), store what came back,
//! and learn what it teaches (SOA, denials); a failure is cached briefly so
//! the next askers fail fast (RFC 9520).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use super::{Settings, Shared};
use crate::cache::follow::{self, Settled};
use crate::cache::{Entry, Key, Kind, Lookup};
use crate::coalesce::Role;
use crate::upstream::Zone;
use crate::upstream::forward::forward;
use crate::upstream::rules::forward_with_rules;

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

impl Shared {
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
    /// whatever the cache holds, and returns what it stored.
    pub(super) fn refresh<'a>(
        self: &'a Arc<Self>,
        key: &'a Key,
        zone: &'a Arc<Zone>,
        settings: &'a Settings,
        deadline: Instant,
    ) -> impl Future<Output = Option<Arc<Entry>>> + Send + 'a {
        self.fetch_or_refresh(key, zone, settings, deadline, Start::Refresh)
            .map(|(entry, _)| entry)
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

    pub(super) async fn fetch_or_refresh(
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
        let ask = self.ask_upstream(key, zone, settings, deadline, start);
        let (outcome, role) = self.coalescer.run(key, deadline, Box::pin(ask)).await;
        if role == Role::Follower {
            self.metrics.coalesced.inc();
        }
        (outcome, role)
    }

    /// The upstream exchange of a fetch that leads (no identical one in
    /// flight): ask, store, and learn what the answer teaches. The future
    /// [`Shared::fetch_or_refresh`] boxes, so it stays within 1,024 bytes.
    // Not an `async fn`: that one keeps its arguments twice (as given and
    // as its body's locals), 32 bytes more in a box that is 960 and must
    // stay within 1,024.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn ask_upstream<'a>(
        self: &'a Arc<Self>,
        key: &'a Key,
        zone: &'a Arc<Zone>,
        settings: &'a Settings,
        deadline: Instant,
        start: Start,
    ) -> impl Future<Output = Option<Arc<Entry>>> + Send + 'a {
        async move {
            let policy = &zone.cache;
            if start == Start::LookAgain
                && policy.enabled
                && let Lookup::Fresh(e) | Lookup::Held(e) =
                    self.cache
                        .lookup(&key.as_ref(), Instant::now(), Duration::ZERO)
                && e.kind != Kind::Failure
            {
                return Some(e);
            }
            // Since when the answer may be older (`cache::follow`).
            let asked = Instant::now();
            // A zone with rules (rewrite, dns64, except) asks through them;
            // boxed, that rare path takes no room in every miss's future.
            let mut forwarded = match &zone.rules {
                None => forward(zone, key, deadline.into()).await,
                Some(rules) => {
                    Box::pin(forward_with_rules(zone, rules, key, deadline.into())).await
                }
            };
            if zone.minimal
                && let Some(answer) = forwarded.as_mut()
            {
                crate::minimal::apply(answer);
            }
            let now = forwarded.as_ref().map_or_else(Instant::now, |f| f.received);
            // A failure never replaces an answer that can still be served,
            // fresh (a prefetch that failed) or stale.
            let has_usable = || match self.cache.lookup(&key.as_ref(), now, policy.stale_window()) {
                Lookup::Fresh(e) => e.kind != Kind::Failure,
                Lookup::Stale(_) | Lookup::Held(_) => true,
                Lookup::Miss => false,
            };
            // An answer an entry cannot hold (`Entry::from_response`: none
            // reaches here, `response::layout` refuses them) is no answer.
            let prepared = forwarded
                .as_ref()
                .and_then(|f| Entry::from_response(&f.msg, &f.layout, &zone.ttl, now));
            match forwarded.zip(prepared) {
                Some((f, entry)) => {
                    let entry = Arc::new(entry);
                    // An answer for a name the API just changed may predate
                    // the change: neither stored nor learned from.
                    let settled = self
                        .cache
                        .settled(key, asked, || follow::received_ttl(&f.msg, &f.layout));
                    // A denial of a name something vouches for is neither
                    // stored over its positive answer nor learned from
                    // (`cache::last_good`; the miss writes that answer).
                    let vouched = entry.kind != Kind::Success
                        && self.cache.last_good(key, policy, now).is_some();
                    if settled != Settled::No && !vouched {
                        self.learn(&settings.cluster, key, zone, &entry, (&f.msg, &f.layout));
                    }
                    if settled != Settled::No
                        && !vouched
                        && policy.stores(entry.kind)
                        && (entry.kind != Kind::Failure || !has_usable())
                    {
                        // Names a `rewrite` or multicluster block answers
                        // (`[cluster] exceptions`) are not the watch's.
                        // An answer that may come from the cluster DNS's
                        // cache of before a change is not held.
                        if settled == Settled::Yes
                            && self.cache.holds(key.name())
                            && !settings.cluster.excepted(key.name())
                        {
                            entry.mark_holdable();
                        }
                        self.cache.insert(key.clone(), entry.clone());
                    }
                    Some(entry)
                }
                None => {
                    if policy.stores(Kind::Failure) && !has_usable() {
                        let failure = Entry::failure(&key.question(), policy.failure_ttl, now);
                        self.cache.insert(key.clone(), Arc::new(failure));
                    }
                    None
                }
            }
        }
    }
}
