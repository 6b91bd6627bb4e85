//! The running HTTP servers, kept as the configuration asks: started,
//! restarted with new bounds on the same socket, stopped; and their
//! listening sockets, for the handover to the next process.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use std::io::Result;
use tokio_util::sync::CancellationToken;

use super::config::HttpPlan;
use super::serve::{self, Bounds, Counters};
use super::{HttpMetrics, HttpState, Role};
use crate::tasks::Upkeep;

/// One server: its socket (a second descriptor of what its accept loop
/// reads, kept for the handover and for a restart with new bounds).
struct Running {
    addr: SocketAddr,
    role: Role,
    bounds: Bounds,
    stop: CancellationToken,
    socket: std::net::TcpListener,
}

/// The metrics server and the probe server, each if configured.
#[derive(Default)]
pub(crate) struct HttpServers {
    running: Vec<Running>,
    /// Addresses the configuration asks for that could not be bound (taken
    /// by another process): retried by [`HttpServers::retry`].
    missing: Vec<(SocketAddr, Role)>,
}

/// How often an address that could not be bound is tried again.
pub(crate) const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

impl HttpServers {
    /// Makes the running servers what `plan` asks. A new address takes the
    /// previous process's socket (`inherited`) or is bound. One that cannot
    /// be bound (any local user can take a port in the seconds between a
    /// crash and the restart) does not stop DNS: it is logged, counted,
    /// and tried again every [`BIND_RETRY`] (`retry`). Changed bounds
    /// restart a server on its own socket (no rebind, no refused
    /// connection).
    pub(crate) fn apply(
        &mut self,
        plan: &HttpPlan,
        mut inherited: impl FnMut(SocketAddr) -> Option<std::net::TcpListener>,
        state: impl Fn() -> Arc<HttpState>,
        metrics: &Arc<HttpMetrics>,
        upkeep: &Upkeep,
    ) -> Result<()> {
        let bounds = Bounds {
            max_connections: plan.max_connections,
            header_timeout: plan.header_timeout,
        };
        let wanted = [(plan.metrics, Role::Metrics), (plan.probes, Role::Probes)];
        let wanted: Vec<(SocketAddr, Role)> = wanted
            .into_iter()
            .filter_map(|(addr, role)| Some((addr?, role)))
            .collect();
        let mut sockets = Vec::new();
        let mut missing = Vec::new();
        for &(addr, role) in &wanted {
            let kept = self.running.iter().find(|r| r.addr == addr);
            let socket = match kept {
                Some(r) => r.socket.try_clone()?,
                None => match inherited(addr) {
                    Some(socket) => socket,
                    None => match std::net::TcpListener::bind(addr) {
                        Ok(socket) => socket,
                        Err(e) => {
                            let first = !self.missing.contains(&(addr, role));
                            metrics.bind_failed(role.label());
                            if first {
                                tracing::error!(
                                    %addr,
                                    "cannot serve {}: {e}; DNS is served without it, and the address is tried again every {BIND_RETRY:?}",
                                    describe(role)
                                );
                            }
                            missing.push((addr, role));
                            continue;
                        }
                    },
                },
            };
            sockets.push((addr, role, socket));
        }
        let (mut kept, mut started) = (Vec::new(), Vec::new());
        for (addr, role, socket) in sockets {
            let unchanged = |r: &Running| r.addr == addr && r.role == role && r.bounds == bounds;
            if let Some(i) = self.running.iter().position(unchanged) {
                kept.push(self.running.swap_remove(i));
                continue;
            }
            match start(addr, role, bounds, socket, &state, metrics, upkeep) {
                Ok(r) => {
                    if self.missing.contains(&(addr, role)) {
                        tracing::info!(%addr, "bound at last: serving {}", describe(role));
                    }
                    started.push(r);
                }
                Err(e) => {
                    started.iter().for_each(|r| r.stop.cancel());
                    self.running.append(&mut kept);
                    return Err(e);
                }
            }
        }
        let mut next = kept;
        next.append(&mut started);
        self.stop();
        self.running = next;
        self.missing = missing;
        Ok(())
    }

    /// Whether an address the configuration asks for is not served yet.
    pub(crate) fn has_missing(&self) -> bool {
        !self.missing.is_empty()
    }

    /// Each server's address and listening socket, for the handover.
    pub(crate) fn sockets(&self) -> impl Iterator<Item = (SocketAddr, RawFd)> + '_ {
        self.running.iter().map(|r| (r.addr, r.socket.as_raw_fd()))
    }

    /// Stops every server (each connection finishes the answer it writes);
    /// a later `apply` starts them again.
    pub(crate) fn stop(&mut self) {
        for r in self.running.drain(..) {
            r.stop.cancel();
        }
    }
}

fn describe(role: Role) -> &'static str {
    match role {
        Role::Metrics => "/metrics (metrics.listen)",
        Role::Probes => "/health and /ready (metrics.probe_listen)",
    }
}

fn start(
    addr: SocketAddr,
    role: Role,
    bounds: Bounds,
    socket: std::net::TcpListener,
    state: &impl Fn() -> Arc<HttpState>,
    metrics: &HttpMetrics,
    upkeep: &Upkeep,
) -> Result<Running> {
    socket.set_nonblocking(true)?;
    let keep = socket.try_clone()?;
    let listener = {
        let _main = upkeep.enter();
        tokio::net::TcpListener::from_std(socket)?
    };
    let label = role.label();
    let counters = Counters {
        open: metrics.connections(label),
        refused: metrics.refused(label),
        header_timeouts: metrics.header_timeouts(label),
    };
    let stop = CancellationToken::new();
    upkeep.spawn(serve::serve(
        listener,
        role.router(state()),
        bounds,
        counters,
        stop.clone(),
    ));
    tracing::info!(%addr, max_connections = bounds.max_connections, header_timeout = ?bounds.header_timeout, "serving {}", describe(role));
    Ok(Running {
        addr,
        role,
        bounds,
        stop,
        socket: keep,
    })
}
