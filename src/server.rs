//! The running server: listeners, the metrics endpoint, reload on SIGHUP,
//! drain on SIGTERM.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::handler::{Settings, Shared};
use crate::listen::Listener;
use crate::logging::LogHandle;
use crate::metrics::{self, HttpState, Metrics};

pub struct Server {
    shared: Arc<Shared>,
    config: Config,
    config_path: Option<PathBuf>,
    workers: usize,
    listeners: HashMap<SocketAddr, Listener>,
    http: Option<(String, CancellationToken)>,
    log: LogHandle,
}

impl Server {
    /// Binds everything the configuration asks for; an address that cannot
    /// be bound is an error here, not a warning later.
    pub async fn start(
        config: Config,
        config_path: Option<PathBuf>,
        workers: usize,
        log: LogHandle,
    ) -> Result<Server> {
        let cache_server = format!("dns://{}", config.listen_addrs()[0]);
        let metrics = Arc::new(Metrics::new(cache_server));
        metrics.workers.set(workers as i64);
        let shared = Arc::new(Shared::new(
            &config,
            metrics,
            tokio::runtime::Handle::current(),
        )?);
        for zone in shared.settings.load().router.zones() {
            let ups: Vec<&str> = zone.upstreams.iter().map(|u| u.label.as_str()).collect();
            tracing::info!(zone = %zone.name, upstreams = ?ups, "forwarding zone");
        }
        let mut server = Server {
            shared,
            config: config.clone(),
            config_path,
            workers,
            listeners: HashMap::new(),
            http: None,
            log,
        };
        server.apply_listeners(&config.listen_addrs())?;
        server.apply_http(&config.metrics.listen).await?;
        server.shared.ready.store(true, Ordering::Relaxed);
        Ok(server)
    }

    /// Serves until SIGTERM or SIGINT, reloading on SIGHUP.
    pub async fn run(mut self) -> Result<()> {
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        loop {
            tokio::select! {
                _ = hup.recv() => self.reload().await,
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        self.shutdown().await;
        Ok(())
    }

    /// Re-reads the configuration file. An invalid file changes nothing.
    async fn reload(&mut self) {
        let Some(path) = self.config_path.clone() else {
            tracing::info!("SIGHUP: running on built-in defaults, nothing to reload");
            return;
        };
        match self.try_reload(&path).await {
            Ok(()) => {
                self.shared
                    .metrics
                    .reloads
                    .with_label_values(&["success"])
                    .inc();
                tracing::info!(path = %path.display(), "configuration reloaded");
            }
            Err(e) => {
                self.shared
                    .metrics
                    .reloads
                    .with_label_values(&["failure"])
                    .inc();
                tracing::error!(path = %path.display(), "reload failed, keeping the running configuration: {e:#}");
            }
        }
    }

    async fn try_reload(&mut self, path: &std::path::Path) -> Result<()> {
        let config = Config::load(path)?;
        let settings = Settings::from_config(
            &config,
            &self.shared.metrics,
            Some(&self.shared.settings.load()),
        )?;
        self.log.set_level(&config.log.level)?;
        if config.log.format != self.config.log.format {
            tracing::warn!("log.format changes take effect at the next restart");
        }
        if config.server.workers != self.config.server.workers {
            tracing::warn!("server.workers changes take effect at the next restart");
        }
        // Listeners first: if a new address cannot be bound, nothing else changes.
        self.apply_listeners(&config.listen_addrs())?;
        self.apply_http(&config.metrics.listen).await?;
        self.shared
            .cache
            .set_capacity(config.cache.capacity.as_u64());
        self.shared.settings.store(Arc::new(settings));
        for zone in self.shared.settings.load().router.zones() {
            let ups: Vec<&str> = zone.upstreams.iter().map(|u| u.label.as_str()).collect();
            tracing::info!(zone = %zone.name, upstreams = ?ups, "forwarding zone");
        }
        self.config = config;
        Ok(())
    }

    /// Starts listeners for new addresses and stops those no longer wanted.
    fn apply_listeners(&mut self, wanted: &[SocketAddr]) -> Result<()> {
        let mut started = Vec::new();
        for &addr in wanted {
            if !self.listeners.contains_key(&addr) {
                match Listener::start(addr, self.workers, &self.shared) {
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

    async fn apply_http(&mut self, listen: &str) -> Result<()> {
        if self.http.as_ref().is_some_and(|(addr, _)| addr == listen) {
            return Ok(());
        }
        let new = if listen.is_empty() {
            None
        } else {
            let addr: SocketAddr = listen
                .parse()
                .with_context(|| format!("metrics.listen `{listen}`"))?;
            let listener = metrics::bind_http(addr)
                .await
                .with_context(|| format!("cannot serve metrics on {addr}"))?;
            let stop = CancellationToken::new();
            let shared = self.shared.clone();
            let state = Arc::new(HttpState {
                metrics: shared.metrics.clone(),
                ready: shared.ready.clone(),
                cache_stats: Box::new(move || shared.cache.stats()),
            });
            tokio::spawn(metrics::serve_http(listener, state, stop.clone()));
            tracing::info!(%addr, "serving /metrics, /health and /ready");
            Some((listen.to_string(), stop))
        };
        if let Some((_, old)) = std::mem::replace(&mut self.http, new) {
            old.cancel();
        }
        Ok(())
    }

    /// Stops reading, answers what is in flight (up to `shutdown_grace`), exits.
    async fn shutdown(mut self) {
        tracing::info!("shutting down: draining queries in flight");
        self.shared.ready.store(false, Ordering::Relaxed);
        for (_, l) in self.listeners.drain() {
            l.stop();
        }
        self.shared.tasks.close();
        let grace = self.config.server.shutdown_grace;
        if tokio::time::timeout(grace, self.shared.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.shared.tasks.len(),
                "shutdown grace period over with queries still in flight"
            );
        }
        if let Some((_, stop)) = self.http.take() {
            stop.cancel();
        }
        tracing::info!("stopped");
    }
}
