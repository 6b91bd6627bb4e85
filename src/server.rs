//! The running server: wires the areas together (metrics, request path,
//! listeners, HTTP), reloads on SIGHUP, drains on SIGTERM.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use prometheus::IntGauge;
use tokio::signal::unix::{SignalKind, signal};

use crate::cache::metrics::CacheGauges;
use crate::cache::snapshot;
use crate::config::Config;
use crate::http::{HttpMetrics, HttpServers, HttpState};
use crate::kubernetes::Watches;
use crate::kubernetes::endpoints::Discovery;
use crate::kubernetes::metrics::KubeMetrics;
use crate::listen::handover::{self, Inherited};
use crate::listen::{ListenMetrics, Listener};
use crate::logging::LogHandle;
use crate::metrics::{Counters, Registry, ResultLabels};
use crate::node::Node;
use crate::node::metrics::NodeMetrics;
use crate::node::presence::{self, Presence};
use crate::serve::metrics::ServeMetrics;
use crate::serve::{Settings, Shared};
use crate::upstream::metrics::UpstreamMetrics;

/// Every metric set, registered in one registry: the one place that knows
/// all areas' metrics.
pub struct Telemetry {
    pub registry: Registry,
    pub serve: Arc<ServeMetrics>,
    pub upstream: Arc<UpstreamMetrics>,
    pub listen: Arc<ListenMetrics>,
    pub http: Arc<HttpMetrics>,
    pub cache: CacheGauges,
    pub node: Arc<NodeMetrics>,
    pub kubernetes: Arc<KubeMetrics>,
    pub reloads: Counters<ResultLabels<'static>>,
    /// Inputs others edit that a start skipped (`Config::load_to_start`).
    pub skipped_inputs: prometheus::IntCounter,
    pub workers: IntGauge,
    pub control: Arc<crate::control::ControlMetrics>,
    pub(crate) workloads: crate::workloads::WorkloadMetrics,
    /// The cache file on the node's disk (`warm`).
    pub warm: Arc<crate::cache::warm::WarmMetrics>,
}

impl Telemetry {
    /// `cache_server`: the `server` label of the cache-wide series.
    pub fn register(cache_server: String) -> Telemetry {
        let registry = Registry::new();
        // Process-wide counters, bumped where no registry reaches.
        registry.adopt(&crate::rewrite::TOO_LONG);
        registry.adopt(&crate::liveness::health::PANICS);
        registry.adopt(&crate::liveness::health::RESTARTS);
        registry.adopt_gauge(&crate::liveness::health::DEAD);
        Telemetry {
            serve: Arc::new(ServeMetrics::register(&registry)),
            upstream: Arc::new(UpstreamMetrics::register(&registry)),
            listen: Arc::new(ListenMetrics::register(&registry)),
            http: Arc::new(HttpMetrics::register(&registry)),
            cache: CacheGauges::register(&registry, cache_server),
            node: Arc::new(NodeMetrics::register(&registry)),
            kubernetes: Arc::new(KubeMetrics::register(&registry)),
            reloads: registry.counters(
                "nodens_config_reloads_total",
                "Configuration reloads (SIGHUP), by result.",
            ),
            workers: registry.gauge("nodens_workers", "Worker threads serving queries."),
            skipped_inputs: registry.counter(
                "nodens_config_inputs_skipped_total",
                "Inputs other parties edit (the kube-dns ConfigMap, hosts files) that were bad at start and skipped: nodens served without them.",
            ),
            control: Arc::new(crate::control::ControlMetrics::register(&registry)),
            workloads: crate::workloads::WorkloadMetrics::register(&registry),
            warm: Arc::new(crate::cache::warm::WarmMetrics::register(&registry)),
            registry,
        }
    }
}

pub struct Server {
    shared: Arc<Shared>,
    telemetry: Arc<Telemetry>,
    config: Config,
    config_path: Option<PathBuf>,
    workers: usize,
    listeners: HashMap<SocketAddr, Listener>,
    /// The metrics and probe servers (their sockets are handed over with
    /// the DNS sockets).
    http: HttpServers,
    log: LogHandle,
    /// The node setup, checked and repaired from the main loop (`run`).
    node: Option<Node>,
    /// `serve --keep-rules`: leave the node setup in place on exit.
    keep_node: bool,
    /// Sockets taken over from the previous process, until served.
    inherited: Inherited,
    /// Where the next process asks for our sockets.
    handover: Option<tokio::net::UnixListener>,
    /// A handover in progress on its own thread: true once the new
    /// process said it serves our sockets.
    giving: Option<tokio::sync::oneshot::Receiver<Given>>,
    /// Set by the handover thread once the successor has our sockets (they
    /// are sent before the cache): from then on it may be serving them.
    sockets_given: Arc<AtomicBool>,
    /// Set once our sockets went to a new process: nothing is served or
    /// reloaded any more, SIGTERM is awaited.
    handed_over: bool,
    /// Our claim on the node setup, held until exit (see `node::presence`).
    presence: Option<Presence>,
    /// The Kubernetes API watches: zones' upstreams from EndpointSlices,
    /// the namespaces.
    watches: Watches,
    /// Other processes' sockets on the listening addresses, at the last
    /// check (`check_sockets`).
    strangers: Vec<crate::listen::reuseport::Stranger>,
    /// The kube-dns ConfigMap's files, read every `kube_dns_config_interval`.
    kube_dns_poll: crate::config::KubeDnsPoll,
    /// Writes the cache to the node's disk now and then (`warm`).
    warm: crate::cache::warm::Writer,
}

/// How giving our sockets to a successor ended: true when it took over.
type Given = std::result::Result<bool, handover::HandoverError>;

/// How long the shutdown waits for dnstap's queue to be written and its
/// stream ended: a reader that stops reading holds the exit up no longer.
const DNSTAP_END: Duration = Duration::from_secs(3);

/// How long a SIGTERM waits for a handover in progress to end: the new
/// process has the sockets by then and only its `ready` is missing.
const HANDOVER_END: Duration = Duration::from_secs(5);

/// How long a starting server waits for the previous one (or a withdraw)
/// to let go of the node setup: a stopping nodens drains for up to its
/// `shutdown_grace` first.
const PRESENCE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

impl Server {
    /// Binds everything the configuration asks for; an address that cannot
    /// be bound is an error here, not a warning later. Call on the main
    /// runtime.
    pub async fn start(
        config: Config,
        config_path: Option<PathBuf>,
        workers: usize,
        log: LogHandle,
        keep_node: bool,
    ) -> Result<Server> {
        let telemetry = Arc::new(Telemetry::register(format!("dns://{}", config.listen[0])));
        telemetry.workers.set(workers as i64);
        for skipped in &config.skipped {
            tracing::error!("configuration: skipped at start: {skipped}");
            telemetry.skipped_inputs.inc();
        }
        let shared = Arc::new(Shared::new(
            &config,
            telemetry.serve.clone(),
            &telemetry.upstream,
        ));
        log_zones(&shared);
        shared
            .tasks
            .upkeep()
            .spawn(crate::upstream::udp::close_expired_sockets());
        let watches = Watches::new(
            telemetry.kubernetes.clone(),
            shared.search.namespaces.clone(),
            shared.search.clients.clone(),
            shared.clone(),
        );
        let mut server = Server {
            shared,
            telemetry,
            config: config.clone(),
            config_path,
            workers,
            listeners: HashMap::new(),
            http: HttpServers::default(),
            log,
            node: None,
            keep_node,
            inherited: Inherited::default(),
            handover: None,
            giving: None,
            sockets_given: Arc::new(AtomicBool::new(false)),
            handed_over: false,
            presence: None,
            watches,
            kube_dns_poll: crate::config::KubeDnsPoll::default(),
            strangers: Vec::new(),
            warm: crate::cache::warm::Writer::default(),
        };
        let predecessor = match &config.server.handover_socket {
            Some(path) => {
                let (shared, telemetry) = (&server.shared, &server.telemetry);
                let load = |input: &mut dyn std::io::Read| {
                    load_snapshot(shared, telemetry, &config.cache, input)
                };
                match handover::take_over(path, load) {
                    Ok(taken) => taken,
                    Err(e) => {
                        // Refused before anything received was used: no
                        // socket, no cache entry.
                        server.telemetry.listen.handovers_refused.inc();
                        tracing::warn!(
                            path = %path.display(),
                            "handover: {e}; starting without the previous process's sockets and cache"
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let confirm = predecessor.map(|(inherited, stream)| {
            server.inherited = inherited;
            stream
        });
        if confirm.is_none() {
            // No handover (a first start, a crash, a reboot): the cache
            // file, if any, is the freshest cache there is.
            let (shared, telemetry) = (&server.shared, &server.telemetry);
            let settings = shared.settings.load();
            let policy = |name: &[u8]| settings.router.route(name).map(|zone| zone.ttl);
            let zones = crate::cache::warm::Zones {
                policy: &policy,
                horizon: settings.router.longest_life(config.cache.stale_max_age),
            };
            crate::cache::warm::load_at_start(
                &shared.cache,
                &zones,
                &telemetry.warm,
                &telemetry.cache,
                &config.cache,
            );
        }
        if let Some(plan) = &config.node {
            if confirm.is_some() {
                // The previous process holds the claim until it exits.
                claim_when_free(server.shared.tasks.upkeep(), plan);
            } else {
                let serving = plan.clone();
                let (claim, overruled) = presence::claim(
                    &plan.state_dir,
                    &plan.interface,
                    PRESENCE_PATIENCE,
                    move || crate::node::serving(&serving),
                )
                .await
                .context("node setup")?;
                if overruled {
                    server.telemetry.node.claims_overruled.inc();
                }
                server.presence = Some(claim);
            }
        }
        // The interface first: the listeners bind to the addresses it holds.
        server.apply_node(&config).await?;
        server.apply_listeners(&config.listen)?;
        // A socket that was there before ours (a squatter in the seconds
        // of a restart) is found at once.
        server.check_sockets();
        server.apply_http(&config.http)?;
        server
            .watches
            .watch_for(&config, server.shared.tasks.upkeep())
            .await;
        if let Some(path) = &config.server.handover_socket {
            server.handover = Some(listen_for_successor(path)?);
        }
        if let Some(path) = &config.server.control_socket {
            crate::control::listen(
                path,
                server.shared.clone(),
                server.telemetry.control.clone(),
            )
            .context("the control socket")?;
        }
        // Only now, with everything serving: until the previous process
        // hears `ready` it keeps reading, so a start that fails loses nothing.
        if let Some(mut stream) = confirm {
            handover::confirm(&mut stream).context("handover: telling the previous process")?;
            tracing::info!("handover: took over; the previous process drains and stops reading");
        }
        server.shared.ready.store(true, Ordering::Relaxed);
        server.shared.prime();
        let (shared, telemetry) = (&server.shared, &server.telemetry);
        let upkeep = shared.tasks.upkeep();
        server
            .warm
            .apply(&config.cache, shared, &telemetry.warm, upkeep);
        Ok(server)
    }

    /// Serves until SIGTERM or SIGINT, reloading on SIGHUP.
    pub async fn run(mut self) -> Result<()> {
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        // Deadlines, not sleeps made anew at each turn: a signal, a watch
        // event or the other timer must not put a repair or a poll off.
        let mut next_repair = Instant::now() + self.repair_interval();
        let mut next_poll = Instant::now() + self.kube_dns_interval();
        let mut next_http_bind = Instant::now() + crate::http::BIND_RETRY;
        let mut next_socket_check = Instant::now() + crate::listen::reuseport::CHECK_EVERY;
        loop {
            tokio::select! {
                _ = hup.recv() => self.reload().await,
                found = self.watches.changed() => self.discovered(found),
                _ = term.recv() => break,
                _ = int.recv() => break,
                accepted = accept(&self.handover), if self.handover.is_some() => {
                    match accepted {
                        Ok(stream) => self.hand_over(stream),
                        Err(e) => tracing::warn!("handover: accept failed: {e}"),
                    }
                }
                given = given(&mut self.giving), if self.giving.is_some() => {
                    self.giving = None;
                    self.handed(given);
                }
                () = tokio::time::sleep_until(next_poll.into()), if self.config.kube_dns.is_some() => {
                    self.poll_kube_dns().await;
                    next_poll = Instant::now() + self.kube_dns_interval();
                }
                // An HTTP address another process held at start: DNS is
                // served meanwhile, the address tried again.
                () = tokio::time::sleep_until(next_http_bind.into()), if self.http.has_missing() && !self.handed_over => {
                    next_http_bind = Instant::now() + crate::http::BIND_RETRY;
                    let plan = self.config.http;
                    if let Err(e) = self.apply_http(&plan) {
                        tracing::error!("HTTP servers: {e:#}");
                    }
                }
                () = tokio::time::sleep_until(next_socket_check.into()), if !self.handed_over => {
                    next_socket_check = Instant::now() + crate::listen::reuseport::CHECK_EVERY;
                    self.check_sockets();
                }
                // Node repairs run here, on the main thread: the one that keeps
                // CAP_NET_ADMIN when node setup is on (see `privileges`).
                () = tokio::time::sleep_until(next_repair.into()), if self.node.is_some() => {
                    next_repair = Instant::now() + self.repair_interval();
                    if let Some(node) = &self.node
                        && let Err(e) = node.reconcile().await
                    {
                        tracing::error!("node: cannot repair: {e}");
                    }
                }
            }
        }
        // A SIGTERM can come while a handover ends (the new process already
        // serves our sockets, and a rolling update stops this one at once):
        // its outcome decides whose the node setup is, so it is waited for
        // (bounded) before the shutdown may remove the setup. A peer that
        // never got our sockets holds up nothing.
        if self.giving.is_some() && self.sockets_given.load(Ordering::Acquire) {
            match tokio::time::timeout(HANDOVER_END, given(&mut self.giving)).await {
                Ok(outcome) => self.handed(outcome),
                Err(_) => tracing::warn!("handover: no outcome within {HANDOVER_END:?} of SIGTERM"),
            }
            self.giving = None;
        }
        self.shutdown().await;
        Ok(())
    }

    /// Looks for other processes' sockets on the listening addresses
    /// (`listen::reuseport`): each new one is logged and counted, all are
    /// listed in /health while they stay.
    fn check_sockets(&mut self) {
        let mut found = Vec::new();
        let ours: Vec<u64> = self.listeners.values().flat_map(|l| l.inodes()).collect();
        for listener in self.listeners.values() {
            match listener.strangers(&ours) {
                Ok(strangers) => found.extend(strangers),
                Err(e) => tracing::debug!(addr = %listener.addr, "cannot list the sockets: {e}"),
            }
        }
        let metrics = &self.telemetry.listen;
        for stranger in found.iter().filter(|s| !self.strangers.contains(s)) {
            metrics.strangers_seen.inc();
            tracing::error!(
                "{stranger} is not nodens's: another process joined a listening address (it receives no query: nodens's sockets alone are selected); find it and stop it"
            );
        }
        metrics.strangers.set(found.len() as i64);
        crate::liveness::health::set_strangers(found.iter().map(ToString::to_string).collect());
        self.strangers = found;
    }

    /// Re-reads the configuration file. An invalid file changes nothing.
    async fn reload(&mut self) {
        // A query log file is opened again, valid file or not (an outside
        // rotation moved it away and sent SIGHUP).
        crate::querylog::REOPEN.fetch_add(1, Ordering::Relaxed);
        if self.handed_over {
            tracing::info!("SIGHUP: handed over to a new process; nothing to reload");
            return;
        }
        let Some(path) = self.config_path.clone() else {
            tracing::info!("SIGHUP: running on built-in defaults, nothing to reload");
            return;
        };
        let result = self.try_reload(&path).await;
        let outcome = if result.is_ok() { "success" } else { "failure" };
        self.telemetry
            .reloads
            .get(&ResultLabels { result: outcome })
            .inc();
        match result {
            Ok(()) => tracing::info!(path = %path.display(), "configuration reloaded"),
            Err(e) => tracing::error!(
                path = %path.display(),
                "reload failed, keeping the running configuration: {e:#}"
            ),
        }
    }

    /// How often the node setup is checked and repaired.
    fn repair_interval(&self) -> Duration {
        self.node
            .as_ref()
            .map_or(Duration::from_secs(3600), Node::reconcile_interval)
    }

    /// How often the kube-dns ConfigMap's files are read.
    fn kube_dns_interval(&self) -> Duration {
        self.config
            .kube_dns
            .as_ref()
            .map_or(Duration::from_secs(3600), |k| k.interval)
    }

    /// The kube-dns ConfigMap's files changed: reloaded as on SIGHUP (a
    /// bad file keeps the running zones, logged and counted once).
    async fn poll_kube_dns(&mut self) {
        let Some(source) = &self.config.kube_dns else {
            return;
        };
        if self.kube_dns_poll.due(source) {
            tracing::info!(dir = %source.dir.display(), "kube-dns ConfigMap changed: reloading");
            self.reload().await;
        }
    }

    /// A watch found other upstreams for a zone: the request path asks
    /// them from its next query on; queries in flight finish where they are.
    fn discovered(&mut self, found: Discovery) {
        if self.handed_over || !self.watches.record(found) {
            return;
        }
        let settings = Settings::build(
            &self.watches.apply(&self.config),
            &self.telemetry.upstream,
            self.shared.tasks.upkeep(),
            Some(&self.shared.settings.load()),
        );
        self.shared.settings.store(Arc::new(settings));
        log_zones(&self.shared);
    }

    async fn try_reload(&mut self, path: &Path) -> Result<()> {
        let config = Config::load(path)?;
        self.watches
            .watch_for(&config, self.shared.tasks.upkeep())
            .await;
        let settings = Settings::build(
            &self.watches.apply(&config),
            &self.telemetry.upstream,
            self.shared.tasks.upkeep(),
            Some(&self.shared.settings.load()),
        );
        self.log
            .set_level(&config.log.level)
            .context("reloading the log filter")?;
        if config.log.format != self.config.log.format {
            tracing::warn!("log.format changes take effect at the next restart");
        }
        if config.workers != self.config.workers {
            tracing::warn!("server.workers changes take effect at the next restart");
        }
        self.apply_node(&config).await?;
        // Listeners next: if a new address cannot be bound, nothing else changes.
        self.apply_listeners(&config.listen)?;
        self.apply_http(&config.http)?;
        self.shared.cache.set_capacity(config.cache.capacity);
        let upkeep = self.shared.tasks.upkeep();
        self.warm
            .apply(&config.cache, &self.shared, &self.telemetry.warm, upkeep);
        let views_changed = !settings
            .router
            .same_views(&self.shared.settings.load().router);
        self.shared.settings.store(Arc::new(settings));
        if views_changed {
            self.shared.cache.forget_views();
        }
        log_zones(&self.shared);
        self.shared.prime();
        self.config = config;
        Ok(())
    }

    /// Gives our sockets to the process that asked for them, on a thread
    /// of its own (a slow or silent peer cannot hold up signals, reloads
    /// and node repairs); [`Server::handed`] takes the outcome. Only a peer
    /// that runs as nodens's uid is served, and one at a time.
    fn hand_over(&mut self, stream: tokio::net::UnixStream) {
        if let Err(e) = crate::trust::check_peer(&stream) {
            self.telemetry.listen.handovers_refused.inc();
            tracing::warn!("handover refused: {e}");
            return;
        }
        if self.giving.is_some() {
            tracing::warn!("handover refused: another one is in progress");
            return;
        }
        let mut sockets: Vec<_> = self
            .listeners
            .values()
            .flat_map(Listener::sockets)
            .collect();
        for (addr, fd) in self.http.sockets() {
            let kind = handover::Kind::Http;
            sockets.push((handover::Named { addr, kind }, fd));
        }
        // The descriptors stay ours while the thread sends them: the
        // listeners are stopped only after `handed`, on this thread.
        let sockets: Vec<_> = match sockets
            .into_iter()
            .map(|(name, fd)| {
                // SAFETY: `fd` is open, owned by a listener that outlives
                // this call; the duplicate is owned by the thread.
                let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                borrowed.try_clone_to_owned().map(|owned| (name, owned))
            })
            .collect::<std::io::Result<_>>()
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("handover failed, still serving: {e}");
                return;
            }
        };
        let shared = self.shared.clone();
        let stale_max_age = self.config.cache.stale_max_age;
        let sockets_given = Arc::new(AtomicBool::new(false));
        self.sockets_given = sockets_given.clone();
        let send_cache = move |out: &mut dyn std::io::Write| {
            sockets_given.store(true, Ordering::Release);
            snapshot::write(&shared.cache, std::time::Instant::now(), stale_max_age, out)
        };
        let (done, giving) = tokio::sync::oneshot::channel();
        self.giving = Some(giving);
        let stream = stream.into_std();
        let spawned = std::thread::Builder::new()
            .name("nodens-handover".into())
            .spawn(move || {
                use std::os::fd::AsRawFd;
                let given = stream.map_err(Into::into).and_then(|stream| {
                    stream.set_nonblocking(false)?;
                    let raw: Vec<_> = sockets
                        .iter()
                        .map(|(name, fd)| (*name, fd.as_raw_fd()))
                        .collect();
                    handover::give(&stream, &raw, send_cache)
                });
                let _ = done.send(given);
            });
        if let Err(e) = spawned {
            self.giving = None;
            tracing::warn!("handover failed, still serving: {e}");
        }
    }

    /// Once the new process says it serves our sockets: stops reading
    /// (what is in flight is still answered), leaves the node setup to it,
    /// and waits, not ready, for SIGTERM.
    fn handed(&mut self, given: Given) {
        match given {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("handover: the other side did not take over; still serving");
                return;
            }
            Err(e) => {
                tracing::warn!("handover failed, still serving: {e}");
                return;
            }
        }
        tracing::info!("handover: the new process serves our sockets; stopping reading");
        self.shared.ready.store(false, Ordering::Relaxed);
        for (_, l) in self.listeners.drain() {
            l.stop();
        }
        // The new process owns the node setup and the handover path now.
        self.node = None;
        self.handover = None;
        self.keep_node = true;
        self.handed_over = true;
        self.warm.stop();
        self.http.stop();
    }

    /// Starts listeners for new addresses and stops those no longer wanted.
    fn apply_listeners(&mut self, wanted: &[SocketAddr]) -> Result<()> {
        let mut started = Vec::new();
        for &addr in wanted {
            if !self.listeners.contains_key(&addr) {
                let inherited = self.inherited.take(addr);
                match Listener::start(
                    addr,
                    self.workers,
                    inherited,
                    &self.shared,
                    &self.telemetry.listen,
                ) {
                    Ok(l) => started.push(l),
                    Err(e) => {
                        started.into_iter().for_each(Listener::stop);
                        return Err(e).with_context(|| format!("cannot listen on {addr}"));
                    }
                }
            }
        }
        for l in started {
            self.listeners.insert(l.addr, l);
        }
        let gone: Vec<SocketAddr> = self
            .listeners
            .keys()
            .filter(|a| !wanted.contains(a))
            .copied()
            .collect();
        for addr in gone {
            if let Some(l) = self.listeners.remove(&addr) {
                l.stop();
            }
        }
        Ok(())
    }

    fn apply_http(&mut self, plan: &crate::config::HttpPlan) -> Result<()> {
        let (shared, telemetry) = (&self.shared, &self.telemetry);
        let state = || {
            let ready = shared.ready.clone();
            let (shared, telemetry) = (shared.clone(), telemetry.clone());
            Arc::new(HttpState {
                metrics: Box::new(move || {
                    telemetry.cache.observe(&shared.cache.stats());
                    let settings = shared.settings.load();
                    if let Some(workloads) = &settings.workloads
                        && settings.workload_metrics
                    {
                        telemetry.workloads.publish(
                            workloads,
                            &shared.search.clients,
                            std::time::Instant::now(),
                        );
                    }
                    telemetry.registry.encode()
                }),
                ready,
            })
        };
        let inherited = &mut self.inherited;
        self.http.apply(
            plan,
            |addr| inherited.take_http(addr),
            state,
            &self.telemetry.http,
            self.shared.tasks.upkeep(),
        )
    }

    /// Sets up the node as `config` asks, if that changed: the interface
    /// and its addresses, the rules (replaced whole), the reconciler.
    async fn apply_node(&mut self, config: &Config) -> Result<()> {
        if self.node.as_ref().map(Node::plan) == config.node.as_ref() {
            return Ok(());
        }
        let Some(plan) = config.node.clone() else {
            self.node = None;
            return Ok(());
        };
        let node = Node::set_up(plan, self.telemetry.node.clone())
            .await
            .context("node setup")?;
        self.node = Some(node);
        Ok(())
    }

    /// Answers, not ready, for `lameduck`; then stops reading, answers
    /// what is in flight (up to `shutdown_grace`), exits.
    async fn shutdown(mut self) {
        self.shared.ready.store(false, Ordering::Relaxed);
        let lameduck = self.config.server.lameduck;
        if !lameduck.is_zero() && !self.handed_over {
            tracing::info!(
                ?lameduck,
                "shutting down: answering, not ready, for the lameduck time"
            );
            tokio::time::sleep(lameduck).await;
        }
        tracing::info!("shutting down: draining queries in flight");
        for (_, l) in self.listeners.drain() {
            l.stop();
        }
        let grace = self.config.server.shutdown_grace;
        if tokio::time::timeout(grace, self.shared.tasks.drain())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.shared.tasks.running(),
                "shutdown grace period over with queries still in flight"
            );
        }
        self.http.stop();
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || shared.finish_dnstap(DNSTAP_END)).await;
        if !self.handed_over {
            self.warm
                .last_write(&self.shared, &self.telemetry.warm)
                .await;
        }
        if let Some(node) = self.node.take() {
            let plan = node.plan();
            let overruled = self
                .presence
                .as_ref()
                .is_some_and(|p| !p.current(&plan.state_dir, &plan.interface));
            if self.keep_node || node.keep_on_exit() {
                tracing::info!("node: interface and rules kept for the next process");
            } else if overruled {
                // A server that found us silent took the claim over (a drain
                // longer than HOLDER_SILENCE): the setup is its now.
                tracing::warn!(
                    "node: our claim was taken over; the interface and rules are left to its holder"
                );
            } else if let Err(e) = node.tear_down().await {
                tracing::error!("node: cannot remove the interface and rules: {e}");
            }
        }
        tracing::info!("stopped");
    }
}

/// Listens on `path` for the process that will replace this one; a socket
/// file left there (by the process this one replaced, or a crash) is
/// replaced. The directory must be nodens's alone (`trust::check_dir`;
/// created so when missing), the socket is made 0600.
fn listen_for_successor(path: &Path) -> Result<tokio::net::UnixListener> {
    let listener = crate::trust::listen_private(path).context("the handover socket")?;
    listener.set_nonblocking(true)?;
    Ok(tokio::net::UnixListener::from_std(listener)?)
}

async fn accept(
    listener: &Option<tokio::net::UnixListener>,
) -> std::io::Result<tokio::net::UnixStream> {
    match listener {
        Some(l) => l.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

async fn given(giving: &mut Option<tokio::sync::oneshot::Receiver<Given>>) -> Given {
    match giving {
        Some(rx) => rx
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("the handover thread ended").into())),
        None => std::future::pending().await,
    }
}

fn log_zones(shared: &Shared) {
    for zone in shared.settings.load().router.zones() {
        let ups: Vec<&str> = zone.upstreams.iter().map(|u| u.label.as_str()).collect();
        tracing::info!(zone = %zone.name, view = %zone.view, upstreams = ?ups, "forwarding zone");
    }
}

/// Loads the previous process's cache from `input`, every record checked
/// against this process's settings (`cache::snapshot`): the TTL policy of
/// the zone that serves its name, the stale window, a bound on records from
/// the capacity, a deadline.
fn load_snapshot(
    shared: &Shared,
    telemetry: &Telemetry,
    cache: &crate::config::CacheSettings,
    input: &mut dyn std::io::Read,
) -> Result<usize, snapshot::CutShort> {
    let settings = shared.settings.load();
    let policy = |name: &[u8]| settings.router.route(name).map(|zone| zone.ttl);
    let now = std::time::Instant::now();
    let rules = snapshot::Rules {
        policy: &policy,
        stale_max_age: cache.stale_max_age,
        max_records: snapshot::max_records(cache.capacity),
        deadline: now + snapshot::LOAD_TIME,
    };
    let loaded = snapshot::read(&shared.cache, now, &rules, input);
    telemetry.cache.snapshot_read(&loaded);
    if let Some(why) = loaded.first_refusal {
        tracing::warn!(
            refused = loaded.refused,
            loaded = loaded.loaded,
            "cache snapshot: records refused (the first: {why})"
        );
    }
    loaded.into_result()
}

/// After a handover: claims the node setup once the previous process has
/// exited, and holds the claim until this one does.
fn claim_when_free(upkeep: &crate::tasks::Upkeep, plan: &crate::config::NodePlan) {
    let (dir, interface) = (plan.state_dir.clone(), plan.interface.clone());
    upkeep.spawn(async move {
        loop {
            match Presence::try_claim(&dir, &interface) {
                Ok(Some(claim)) => {
                    let _held = claim;
                    std::future::pending::<()>().await;
                }
                Ok(None) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                Err(e) => {
                    tracing::warn!("node: cannot claim the node setup: {e}");
                    return;
                }
            }
        }
    });
}

/// The control channel's view of the request path's state.
impl crate::control::Served for Shared {
    fn cache(&self) -> &crate::cache::Cache {
        &self.cache
    }

    fn stale_window(&self, view: u8, name: &[u8]) -> Duration {
        self.settings
            .load()
            .router
            .route_in(view, name)
            .map_or(Duration::ZERO, |zone| zone.cache.stale_max_age)
    }

    fn top(&self, limit: usize) -> Option<crate::control::TopView> {
        let workloads = self.settings.load().workloads.clone()?;
        Some(workloads.view(&self.search.clients, limit))
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}
