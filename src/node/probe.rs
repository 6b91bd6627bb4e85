//! The probe a withdraw sends before it removes the node setup: a query the
//! server answers itself, whatever its upstreams do. Something that answers
//! it on the node address (a successor after a handover, before it has
//! claimed the setup) keeps the setup in place.
//!
//! It decides no kill: it travels the client sockets, which a client flood
//! fills, so a lost probe says nothing about a server's health. The
//! supervisor judges that by the server's heartbeat (`liveness.rs`).

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// How long a probe waits for its answer; also the guard's period.
pub(super) const PROBE_EVERY: Duration = Duration::from_millis(250);

/// A query the server answers itself, whatever its upstreams do: opcode
/// STATUS, answered NOTIMP by the parse stage.
const PROBE: [u8; 12] = [0x4e, 0x50, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// Whether the server at `addr` answers a probe within [`PROBE_EVERY`].
pub(super) fn answers(addr: SocketAddr) -> bool {
    let bind: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let Ok(socket) = UdpSocket::bind(bind) else {
        return false;
    };
    let mut buf = [0u8; 512];
    // Connected, so a closed port is an immediate "connection refused"
    // (from the ICMP error) rather than a wait for the timeout, and only
    // `addr` can answer.
    socket.set_read_timeout(Some(PROBE_EVERY)).is_ok()
        && socket.connect(addr).is_ok()
        && socket.send(&PROBE).is_ok()
        && socket
            .recv(&mut buf)
            .is_ok_and(|n| n >= 2 && buf[..2] == PROBE[..2])
}
