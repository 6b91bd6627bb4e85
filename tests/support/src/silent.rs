//! An upstream that never answers: a bound UDP socket nobody reads until the
//! test wants to see what nodens sent.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// An upstream that never answers: a real UDP socket the test binds and does
/// not read until it wants to see what nodens sent it.
pub struct Silent {
    pub sock: UdpSocket,
    pub addr: SocketAddr,
}

impl Silent {
    pub fn bind(addr: SocketAddr) -> Silent {
        let sock = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        Silent { sock, addr }
    }

    /// The next datagram that arrived, waiting up to `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<(SocketAddr, Vec<u8>)> {
        self.sock.set_nonblocking(false).unwrap();
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = vec![0u8; 65535];
        match self.sock.recv_from(&mut buf) {
            Ok((n, from)) => Some((from, buf[..n].to_vec())),
            Err(_) => None,
        }
    }

    /// Every datagram queued so far, without waiting.
    pub fn drain(&self) -> Vec<(SocketAddr, Vec<u8>)> {
        self.sock.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65535];
        for _ in 0..100_000 {
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) => out.push((from, buf[..n].to_vec())),
                Err(_) => break,
            }
        }
        self.sock.set_nonblocking(false).unwrap();
        out
    }
}
