//! A start: the request path built from the configuration, the previous
//! process's sockets and cache taken over (or the cache file read), the
//! listeners, HTTP servers, node setup and watches started.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};

use super::PRESENCE_PATIENCE;
use super::Server;
use super::Telemetry;
use super::listen_for_successor;
use super::settings;
use crate::cache::snapshot;
use crate::config::Config;
use crate::http::HttpServers;
use crate::kubernetes::Watches;
use crate::listen::handover;
use crate::listen::handover::Inherited;
use crate::logging::LogHandle;
use crate::node::presence;
use crate::node::presence::Presence;
use crate::serve::Shared;

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
        log_deprecated(&config);
        let shared = Arc::new(settings::request_path(
            &config,
            &telemetry.upstream,
            telemetry.serve.clone(),
        ));
        log_zones(&shared);
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
            deprecated: Default::default(),
        };
        server.in_force(&config);
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
            .watch_for(&config.kubernetes_wanted(), server.shared.tasks.upkeep())
            .await;
        if let Some(path) = &config.server.handover_socket {
            server.handover = Some(listen_for_successor(path)?);
        }
        if let Some(path) = &config.server.control_socket {
            let view = super::served::ControlView {
                shared: server.shared.clone(),
                startup_taint: server.watches.startup_taint(),
                deprecated: server.deprecated.clone(),
            };
            crate::control::listen(path, Arc::new(view), server.telemetry.control.clone())
                .context("the control socket")?;
        }
        // Only now, with everything serving: until the previous process
        // hears `ready` it keeps reading, so a start that fails loses nothing.
        if let Some(mut stream) = confirm {
            handover::confirm(&mut stream).context("handover: telling the previous process")?;
            tracing::info!("handover: took over; the previous process drains and stops reading");
        }
        server.shared.ready.store(true, Ordering::Relaxed);
        server.watches.serving(server.shared.tasks.upkeep());
        server.shared.prime();
        let (shared, telemetry) = (&server.shared, &server.telemetry);
        let upkeep = shared.tasks.upkeep();
        server
            .warm
            .apply(&config.cache, shared, &telemetry.warm, upkeep);
        Ok(server)
    }
}

/// Loads the previous process's cache from `input`, every record checked
/// against this process's settings (`cache::snapshot`): the TTL policy of
/// the zone that serves its name, the stale window, a bound on records from
/// the capacity, a deadline.
pub(super) fn load_snapshot(
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
pub(super) fn claim_when_free(upkeep: &crate::tasks::Upkeep, plan: &crate::config::NodePlan) {
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

/// Each deprecated key of a configuration just loaded, at warn level: once
/// per load (start, reload), with its line and replacement.
pub(super) fn log_deprecated(config: &Config) {
    for deprecated in &config.deprecated {
        tracing::warn!("configuration: {deprecated}");
    }
}

impl Server {
    /// What is said of the configuration that takes effect: its
    /// deprecated keys' count (`nodens_config_deprecated_keys`) and list
    /// (the control channel's `status`, for `nodens doctor`).
    pub(super) fn in_force(&self, config: &Config) {
        let keys = super::served::deprecated_keys(config);
        self.telemetry.deprecated_keys.set(keys.len() as i64);
        self.deprecated.store(Arc::new(keys));
    }
}

pub(super) fn log_zones(shared: &Shared) {
    for zone in shared.settings.load().router.zones() {
        let ups: Vec<&str> = zone.upstreams.iter().map(|u| u.label.as_str()).collect();
        tracing::info!(zone = %zone.name, view = %zone.view, upstreams = ?ups, "forwarding zone");
    }
}
