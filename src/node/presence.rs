//! Which nodens owns the node setup, as the kernel sees it.
//!
//! A server holds an abstract Unix socket named after its interface for as
//! long as it lives, and the kernel releases the name the instant the process
//! dies, SIGKILL and OOM kill included. Abstract names belong to the network
//! namespace, which the server, its supervisor and the guard share (the host
//! network) whatever their containers. So "is a server alive here?" is one
//! `bind`, with no probe timeout and no confusion between a server that is
//! starting and one that is dead. Holding the name is also the lock that keeps
//! a withdraw (by the supervisor or the guard) from interleaving with a
//! server's setup.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// The claim on the node setup of one interface; released on drop or exit.
#[derive(Debug)]
pub struct Presence {
    _socket: UnixDatagram,
}

fn name(interface: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("nodens/node/{interface}"))
}

impl Presence {
    /// Claims the name, or `None` if another process holds it.
    pub fn try_claim(interface: &str) -> io::Result<Option<Presence>> {
        match UnixDatagram::bind_addr(&name(interface)?) {
            Ok(socket) => Ok(Some(Presence { _socket: socket })),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Claims the name, waiting up to `patience` for its holder to let go
    /// (a server stopping, a withdraw in progress).
    pub async fn claim(interface: &str, patience: Duration) -> io::Result<Presence> {
        let deadline = Instant::now() + patience;
        let mut said = false;
        loop {
            if let Some(p) = Presence::try_claim(interface)? {
                return Ok(p);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "another nodens has held the node setup of {interface} for {patience:?}"
                    ),
                ));
            }
            if !said {
                tracing::info!(
                    interface,
                    "node: waiting for the process that holds the node setup to let go"
                );
                said = true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether some process holds the name now.
    pub fn held(interface: &str) -> io::Result<bool> {
        Ok(Presence::try_claim(interface)?.is_none())
    }
}
