//! The running server: wires the areas together (metrics, request path,
//! listeners, HTTP), reloads on SIGHUP, drains on SIGTERM. One file per
//! part of its life: `start.rs`, `reload.rs`, `successor.rs` (the
//! handover to the next process), `shutdown.rs`; this one holds the state and the main loop (`run`).

mod reload;
mod served;
mod settings;
mod shutdown;
mod standalone;
mod start;
mod successor;
mod telemetry;

pub use telemetry::Telemetry;

use start::log_zones;
use successor::{accept, given, listen_for_successor};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::signal::unix::{SignalKind, signal};

use crate::config::Config;
use crate::http::HttpServers;
use crate::kubernetes::Watches;
use crate::listen::Listener;
use crate::listen::handover::{self, Inherited};
use crate::logging::LogHandle;
use crate::node::Node;
use crate::node::presence::Presence;
use crate::serve::Shared;

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
    /// The configuration's deprecated keys, for the control channel.
    deprecated: served::Deprecated,
}

/// How giving our sockets to a successor ended: true when it took over.
type Given = std::result::Result<bool, handover::HandoverError>;

/// How long the shutdown waits for each observer's queue (the query log's,
/// dnstap's) to be written and dnstap's stream ended: an output that stops
/// taking holds the exit up no longer.
const OBSERVERS_END: Duration = Duration::from_secs(3);

/// How long a SIGTERM waits for a handover in progress to end: the new
/// process has the sockets by then and only its `ready` is missing.
const HANDOVER_END: Duration = Duration::from_secs(5);

/// How long a starting server waits for the previous one (or a withdraw)
/// to let go of the node setup: a stopping nodens drains for up to its
/// `shutdown_grace` first.
const PRESENCE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

impl Server {
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
}
