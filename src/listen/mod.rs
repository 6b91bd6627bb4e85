//! Listeners: for each configured address, UDP worker threads and a TCP
//! acceptor, started and stopped together.

mod batch;
pub mod tcp;
pub mod udp;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::handler::{ListenerInfo, Shared};

/// The UDP and TCP side of one address.
pub struct Listener {
    pub addr: SocketAddr,
    udp: udp::UdpWorkers,
    tcp_stop: CancellationToken,
}

impl Listener {
    /// Binds UDP and TCP on `addr`; fails if either cannot be bound.
    pub fn start(
        addr: SocketAddr,
        workers: usize,
        shared: &Arc<Shared>,
    ) -> std::io::Result<Listener> {
        let info = Arc::new(ListenerInfo::new(addr));
        let tcp_listener = tcp::bind(addr)?;
        let udp = udp::UdpWorkers::start(addr, workers, shared, &info)?;
        let tcp_stop = CancellationToken::new();
        let _guard = shared.runtime.enter();
        let tcp_listener = tokio::net::TcpListener::from_std(tcp_listener)?;
        shared.runtime.spawn(tcp::accept_loop(
            tcp_listener,
            shared.clone(),
            info,
            tcp_stop.clone(),
        ));
        tracing::info!(%addr, workers, "listening on UDP and TCP");
        Ok(Listener {
            addr,
            udp,
            tcp_stop,
        })
    }

    /// Stops reading new queries; queries in flight still get their answers.
    pub fn stop(self) {
        self.tcp_stop.cancel();
        self.udp.stop();
        tracing::info!(addr = %self.addr, "stopped listening");
    }
}
