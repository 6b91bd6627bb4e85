//! The running HTTP servers, kept as the configuration asks: started,
//! restarted with new bounds on the same socket, stopped; and their
//! listening sockets, for the handover to the next process.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

use super::serve::{self, Bounds, Counters};
use super::{HttpMetrics, HttpState, Role};
use crate::config::HttpPlan;
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
}

impl HttpServers {
    /// Makes the running servers what `plan` asks. A new address takes the
    /// previous process's socket (`inherited`) or is bound; one that cannot
    /// be is an error and changes nothing. Changed bounds restart a server
    /// on its own socket (no rebind, no refused connection).
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
        // Bind every new address first: a failure leaves all as it was.
        let mut sockets = Vec::new();
        for &(addr, role) in &wanted {
            let kept = self.running.iter().find(|r| r.addr == addr);
            let socket = match kept {
                Some(r) => r.socket.try_clone()?,
                None => match inherited(addr) {
                    Some(socket) => socket,
                    None => std::net::TcpListener::bind(addr)
                        .with_context(|| format!("cannot serve {} on {addr}", describe(role)))?,
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
                Ok(r) => started.push(r),
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
        Ok(())
    }

    /// Each server's address and listening socket, for the handover.
    pub(crate) fn sockets(&self) -> impl Iterator<Item = (SocketAddr, RawFd)> + '_ {
        self.running.iter().map(|r| (r.addr, r.socket.as_raw_fd()))
    }

    /// Stops every server (each connection finishes the answer it writes).
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
