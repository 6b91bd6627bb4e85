//! The request path: one query in, one reply out.
//!
//! [`Shared::handle`] runs on the listener's thread and answers everything
//! it can without waiting: malformed queries, cache hits. A miss comes back
//! as a [`MissJob`] that the listener runs as a task ([`Shared::resolve`]):
//! coalesce with identical misses, forward to the zone's upstreams, store,
//! reply; serve stale if every upstream failed.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio_util::task::TaskTracker;

use crate::cache::key::NameBuf;
use crate::cache::{Cache, Entry, Freshness, Key, KeyRef, Kind, Lookup};
use crate::config::Config;
use crate::guard::{Acl, RateLimiter};
use crate::inflight::{InFlight, Role};
use crate::metrics::{Metrics, PLUGIN_NONE, VIEW, ZONE_DROPPED, qtype_label};
use crate::stats::{ListenerStats, StatsGuard, StatsSlot, ZoneStats};
use crate::upstream::forward::forward;
use crate::upstream::{Router, RouterError, Zone};
use crate::wire::query;
use crate::wire::{build, ede, rcode, rcode_name};

/// The parts of the configuration the request path reads; replaced whole
/// on reload, so a query sees one consistent version from start to end.
pub struct Settings {
    /// Changes on every reload; per-listener metric handles follow it.
    pub generation: u64,
    pub router: Router,
    pub max_udp_payload: u16,
    pub query_timeout: Duration,
    pub stale_max_age: Duration,
    pub stale_ttl: u32,
    pub failure_ttl: u32,
    pub prefetch_min_hits: u32,
    pub prefetch_percent: u8,
    pub tcp: TcpLimits,
    pub acl: Acl,
    pub rate_limit: Option<RateLimiter>,
    pub max_misses_in_flight: usize,
}

#[derive(Debug, Clone, Copy)]
pub struct TcpLimits {
    pub idle_timeout: Duration,
    pub read_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub max_inflight: usize,
}

impl Settings {
    /// Builds the settings for `config`; `previous` lets unchanged upstreams
    /// keep their connections and health across a reload.
    pub fn from_config(
        config: &Config,
        metrics: &Arc<Metrics>,
        previous: Option<&Settings>,
    ) -> Result<Settings, RouterError> {
        let secs = |d: Duration| d.as_secs().min(u32::MAX.into()) as u32;
        static GENERATION: AtomicU64 = AtomicU64::new(0);
        Ok(Settings {
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
            router: Router::from_config(config, metrics, previous.map(|p| &p.router))?,
            max_udp_payload: config.server.max_udp_payload,
            query_timeout: config.server.query_timeout,
            stale_max_age: config.cache.stale_max_age,
            stale_ttl: secs(config.cache.stale_ttl),
            failure_ttl: secs(config.cache.servfail_ttl),
            prefetch_min_hits: config.cache.prefetch_min_hits,
            prefetch_percent: config.cache.prefetch_percent,
            tcp: TcpLimits {
                idle_timeout: config.server.tcp_idle_timeout,
                read_timeout: config.server.tcp_read_timeout,
                max_connections: config.server.tcp_max_connections,
                max_connections_per_client: config.server.tcp_max_connections_per_client,
                max_inflight: config.server.tcp_max_inflight,
            },
            acl: Acl::new(config.allowed_sources()),
            rate_limit: (config.server.client_rate_limit > 0).then(|| {
                let burst = match config.server.client_rate_burst {
                    0 => config.server.client_rate_limit,
                    b => b,
                };
                RateLimiter::new(config.server.client_rate_limit, burst)
            }),
            max_misses_in_flight: config.server.max_misses_in_flight,
        })
    }
}

/// State shared by every listener and task.
pub struct Shared {
    pub settings: ArcSwap<Settings>,
    pub cache: Cache,
    pub inflight: InFlight,
    pub metrics: Arc<Metrics>,
    /// Every miss task, so that shutdown can wait for them.
    pub tasks: TaskTracker,
    pub runtime: tokio::runtime::Handle,
    /// Cleared when shutdown starts.
    pub ready: Arc<AtomicBool>,
    /// Miss jobs alive now, against `max_misses_in_flight`.
    misses_in_flight: Arc<AtomicUsize>,
}

/// One place among the misses in flight, given back when the job ends.
struct MissTicket(Arc<AtomicUsize>);

impl MissTicket {
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<MissTicket> {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Udp = 0,
    Tcp = 1,
}

impl Proto {
    pub fn label(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

/// Who a listener is, for metrics labels, and its resolved metric handles.
pub struct ListenerInfo {
    /// CoreDNS's `server` label: "dns://127.0.0.1:1053".
    pub server: String,
    /// CoreDNS's `family` label: "1" for IPv4, "2" for IPv6.
    pub family: &'static str,
    stats: StatsSlot,
}

impl ListenerInfo {
    pub fn new(addr: std::net::SocketAddr) -> ListenerInfo {
        ListenerInfo {
            server: format!("dns://{addr}"),
            family: if addr.is_ipv4() { "1" } else { "2" },
            stats: StatsSlot::default(),
        }
    }

    fn stats(&self, settings: &Settings, metrics: &Arc<Metrics>) -> StatsGuard {
        self.stats.current(settings.generation, || {
            let zones = settings.router.zones();
            zones
                .iter()
                .map(|z| ZoneStats::new(metrics, &self.server, &z.name, self.family))
                .collect()
        })
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

/// What [`Shared::handle`] decided.
pub enum Handled {
    /// The reply is in the output buffer.
    Reply,
    /// Say nothing.
    Drop,
    /// Needs upstream: run [`Shared::resolve`].
    Miss(MissJob),
}

/// A cache miss, owned so it can move to a task.
pub struct MissJob {
    packet: Vec<u8>,
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
    pub fn new(
        config: &Config,
        metrics: Arc<Metrics>,
        runtime: tokio::runtime::Handle,
    ) -> Result<Shared, RouterError> {
        Ok(Shared {
            settings: ArcSwap::from_pointee(Settings::from_config(config, &metrics, None)?),
            cache: Cache::new(config.cache.capacity.as_u64()),
            inflight: InFlight::default(),
            metrics,
            tasks: TaskTracker::new(),
            runtime,
            ready: Arc::new(AtomicBool::new(false)),
            misses_in_flight: Arc::default(),
        })
    }

    /// Answers `packet` from `client` from what is at hand, or says it
    /// needs upstream.
    pub fn handle(
        self: &Arc<Self>,
        packet: &[u8],
        client: IpAddr,
        listener: &ListenerInfo,
        proto: Proto,
        out: &mut Vec<u8>,
    ) -> Handled {
        let started = Instant::now();
        let settings = self.settings.load();
        if !settings.acl.allows(client) {
            return self.refuse(packet, "source not allowed", out);
        }
        if let Some(limit) = &settings.rate_limit
            && !limit.allow(client, started)
        {
            self.metrics
                .rejected
                .with_label_values(&["client rate limit"])
                .inc();
            return Handled::Drop;
        }
        let query = match query::parse(packet) {
            Ok(q) => q,
            Err(reject) => {
                self.metrics
                    .rejected
                    .with_label_values(&[reject.reason()])
                    .inc();
                return if build::error_reply(packet, &reject, out) {
                    Handled::Reply
                } else {
                    Handled::Drop
                };
            }
        };
        let mut name_buf: NameBuf = [0; 255];
        let key = KeyRef::from_query(&query, &mut name_buf);
        let Some(zone) = settings.router.route(key.name) else {
            self.metrics
                .rejected
                .with_label_values(&["no zone for the name"])
                .inc();
            let labels = [
                listener.server.as_str(),
                ZONE_DROPPED,
                VIEW,
                proto.label(),
                listener.family,
                qtype_label(query.qtype),
            ];
            self.metrics.requests.with_label_values(&labels).inc();
            build::reply_with_rcode(
                packet,
                rcode::REFUSED,
                Some(query.name_end + 4),
                query.edns,
                None,
                out,
            );
            let labels = [
                listener.server.as_str(),
                ZONE_DROPPED,
                VIEW,
                rcode_name(rcode::REFUSED),
                PLUGIN_NONE,
            ];
            self.metrics.responses.with_label_values(&labels).inc();
            return Handled::Reply;
        };
        let stats_guard = listener.stats(&settings, &self.metrics);
        let all_stats = stats_guard
            .as_ref()
            .expect("stats for the current settings");
        let stats = all_stats.zone(zone.index);
        stats.request(proto, query.qtype, packet.len(), query.dnssec_ok());

        // Writes the reply from a cached entry and counts it.
        let mut reply_from = |entry: &Entry, freshness: Freshness, ede: Option<u16>| {
            let limit = reply_limit(proto, &query, &settings);
            let rendered = entry.render(&query, started, freshness, ede, limit, out);
            stats.reply(
                proto,
                rendered.rcode,
                true,
                out.len(),
                started.elapsed().as_secs_f64(),
            );
        };
        let stale = match self.cache.lookup(&key, started, settings.stale_max_age) {
            Lookup::Fresh(entry) => {
                stats.cache_hit(entry.kind == Kind::Success);
                if settings.prefetch_min_hits > 0 {
                    self.maybe_prefetch(&entry, &key, zone, &settings, listener, started);
                }
                reply_from(&entry, Freshness::Fresh, None);
                return Handled::Reply;
            }
            Lookup::Stale(entry) => Some(entry),
            Lookup::Miss => None,
        };
        stats.cache_miss();
        let Some(ticket) = MissTicket::take(&self.misses_in_flight, settings.max_misses_in_flight)
        else {
            // Too many misses wait on upstreams already (a silent upstream
            // under load): answer stale if possible, else drop the query.
            self.metrics
                .rejected
                .with_label_values(&["too many misses in flight"])
                .inc();
            let Some(stale) = stale else {
                return Handled::Drop;
            };
            let ttl = settings.stale_ttl;
            reply_from(&stale, Freshness::Stale { ttl }, Some(ede::STALE_ANSWER));
            return Handled::Reply;
        };
        Handled::Miss(MissJob {
            packet: packet.to_vec(),
            key: key.to_owned(),
            zone: zone.clone(),
            settings: Arc::clone(&settings),
            stats: Arc::clone(all_stats),
            stale,
            started,
            proto,
            _ticket: ticket,
        })
    }

    /// REFUSED for a client that may not ask (the question echoed if it
    /// can be read); nothing for what is not a query at all.
    fn refuse(&self, packet: &[u8], reason: &'static str, out: &mut Vec<u8>) -> Handled {
        self.metrics.rejected.with_label_values(&[reason]).inc();
        let (question_end, edns) = match query::parse(packet) {
            Ok(q) => (Some(q.name_end + 4), q.edns),
            Err(query::Reject::Answer {
                question_end, edns, ..
            }) => (question_end, edns),
            Err(query::Reject::Drop(_)) => return Handled::Drop,
        };
        build::reply_with_rcode(packet, rcode::REFUSED, question_end, edns, None, out);
        Handled::Reply
    }

    /// Resolves a miss and writes the reply into `out`.
    pub async fn resolve(
        self: &Arc<Self>,
        job: MissJob,
        listener: &ListenerInfo,
        out: &mut Vec<u8>,
    ) {
        let query = query::parse(&job.packet).expect("a miss job holds a validated query");
        self.metrics.inflight.inc();
        let deadline = job.started + job.settings.query_timeout;
        let fetched = tokio::time::timeout_at(
            deadline.into(),
            self.fetch(&job.key, &job.zone, &job.settings, deadline),
        )
        .await
        .ok()
        .flatten();
        self.metrics.inflight.dec();
        let now = Instant::now();
        let limit = reply_limit(job.proto, &query, &job.settings);
        let failed = fetched.as_ref().is_none_or(|e| e.kind == Kind::Failure);
        let stale = job.stale.as_ref().filter(|_| failed);
        let (code, from_cache) = if let Some(stale) = stale {
            let ttl = Freshness::Stale {
                ttl: job.settings.stale_ttl,
            };
            let rendered = stale.render(&query, now, ttl, Some(ede::STALE_ANSWER), limit, out);
            self.metrics
                .cache_served_stale
                .with_label_values(&[&listener.server, &job.zone.name, VIEW])
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
                &job.packet,
                query.name_end + 4,
                query.edns,
                Some(ede::NO_REACHABLE_AUTHORITY),
                out,
            );
            (rcode::SERVFAIL, false)
        };
        let seconds = job.started.elapsed().as_secs_f64();
        job.stats
            .zone(job.zone.index)
            .reply(job.proto, code, from_cache, out.len(), seconds);
    }

    /// Asks upstream for `key` (or joins the identical query in flight) and
    /// stores the result. `None` when no upstream gave a usable answer; a
    /// failure entry is then cached so the next queries fail fast (RFC 9520),
    /// unless a stale entry is there to be served instead.
    async fn fetch(
        self: &Arc<Self>,
        key: &Key,
        zone: &Arc<Zone>,
        settings: &Settings,
        deadline: Instant,
    ) -> Option<Arc<Entry>> {
        let (outcome, role) = self
            .inflight
            .run(key, async {
                let forwarded = forward(zone, key, deadline.into(), &self.metrics).await;
                let now = Instant::now();
                // A failure never replaces an answer that can still be served,
                // fresh (a prefetch that failed) or stale.
                let has_usable =
                    || match self
                        .cache
                        .lookup(&key.as_ref(), now, settings.stale_max_age)
                    {
                        Lookup::Fresh(e) => e.kind != Kind::Failure,
                        Lookup::Stale(_) => true,
                        Lookup::Miss => false,
                    };
                match forwarded {
                    Some(f) => {
                        let entry =
                            Arc::new(Entry::from_response(&f.msg, &f.layout, &zone.ttl, now));
                        if entry.kind != Kind::Failure || !has_usable() {
                            self.cache.insert(key.clone(), entry.clone());
                        }
                        Some(entry)
                    }
                    None => {
                        if settings.failure_ttl > 0 && !has_usable() {
                            let failure =
                                Entry::failure(&key.question(), settings.failure_ttl, now);
                            self.cache.insert(key.clone(), Arc::new(failure));
                        }
                        None
                    }
                }
            })
            .await;
        if role == Role::Follower {
            self.metrics.coalesced.inc();
        }
        outcome
    }

    /// Refreshes a popular entry shortly before it expires, so that its
    /// askers never see a miss (CoreDNS's `prefetch`).
    fn maybe_prefetch(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        key: &KeyRef<'_>,
        zone: &Arc<Zone>,
        settings: &Arc<Settings>,
        listener: &ListenerInfo,
        now: Instant,
    ) {
        if entry.kind == Kind::Failure {
            return;
        }
        let hits = entry.hits.fetch_add(1, Ordering::Relaxed) + 1;
        if hits < settings.prefetch_min_hits {
            return;
        }
        let threshold = Duration::from_millis(
            u64::from(entry.original_ttl) * 10 * u64::from(settings.prefetch_percent),
        );
        if entry.remaining(now) > threshold || entry.prefetch_started.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let (this, key, zone, settings) =
            (self.clone(), key.to_owned(), zone.clone(), settings.clone());
        self.metrics
            .cache_prefetch
            .with_label_values(&[&listener.server, &zone.name, VIEW])
            .inc();
        let refresh = async move {
            let deadline = Instant::now() + settings.query_timeout;
            this.fetch(&key, &zone, &settings, deadline).await;
        };
        // On the main runtime: a UDP worker runs its event loop only while
        // it has misses of its own in flight.
        self.tasks.spawn_on(refresh, &self.runtime);
    }
}
