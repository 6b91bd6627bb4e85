//! A reload (SIGHUP, a changed kube-dns ConfigMap, upstreams discovered
//! from EndpointSlices): the new configuration applied to the running
//! parts, or nothing changed if it is invalid.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};

use super::Server;
use super::log_zones;
use super::settings;
use crate::config::Config;
use crate::http::HttpState;
use crate::kubernetes::endpoints::Discovery;
use crate::listen::Listener;
use crate::metrics::ResultLabels;
use crate::node::Node;

impl Server {
    /// Re-reads the configuration file. An invalid file changes nothing.
    pub(super) async fn reload(&mut self) {
        // A query log file is opened again, valid file or not (an outside
        // rotation moved it away and sent SIGHUP).
        self.shared.reopen_query_log();
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

    /// The kube-dns ConfigMap's files changed: reloaded as on SIGHUP (a
    /// bad file keeps the running zones, logged and counted once).
    pub(super) async fn poll_kube_dns(&mut self) {
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
    pub(super) fn discovered(&mut self, found: Discovery) {
        if self.handed_over || !self.watches.record(found) {
            return;
        }
        let settings = self.settings_for(&self.config);
        self.shared.set_settings(settings);
        log_zones(&self.shared);
    }

    /// The request path's settings for `config`, with the upstreams the
    /// watches found in place; unchanged upstreams keep their connections.
    fn settings_for(&self, config: &Config) -> crate::serve::Settings {
        let mut discovered = config.clone();
        self.watches.apply(&mut discovered.zones);
        settings::build(
            &discovered,
            &self.telemetry.upstream,
            self.shared.tasks.upkeep(),
            Some(&self.shared.settings.load()),
            self.shared.dnstap_forwarder(),
        )
    }

    pub(super) async fn try_reload(&mut self, path: &Path) -> Result<()> {
        let config = Config::load(path)?;
        super::start::log_deprecated(&config);
        self.watches
            .watch_for(&config.kubernetes_wanted(), self.shared.tasks.upkeep())
            .await;
        let settings = self.settings_for(&config);
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
        self.shared.set_settings(settings);
        if views_changed {
            self.shared.cache.forget_views();
        }
        log_zones(&self.shared);
        self.shared.prime();
        self.in_force(&config);
        self.config = config;
        Ok(())
    }

    /// Starts listeners for new addresses and stops those no longer wanted.
    pub(super) fn apply_listeners(&mut self, wanted: &[SocketAddr]) -> Result<()> {
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

    pub(super) fn apply_http(&mut self, plan: &crate::config::HttpPlan) -> Result<()> {
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
        self.http
            .apply(
                plan,
                |addr| inherited.take_http(addr),
                state,
                &self.telemetry.http,
                self.shared.tasks.upkeep(),
            )
            .context("the HTTP servers")
    }

    /// Sets up the node as `config` asks, if that changed: the interface
    /// and its addresses, the rules (replaced whole), the reconciler.
    pub(super) async fn apply_node(&mut self, config: &Config) -> Result<()> {
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
}
