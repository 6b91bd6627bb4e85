//! One query to one upstream over UDP.
//!
//! Each query gets its own socket, so its own random source port (chosen by
//! the kernel) on top of a random ID: an off-path attacker has to guess both,
//! and a conntrack entry is never shared by two queries. The socket is
//! connected, so the kernel drops datagrams from any other address and
//! reports an ICMP port-unreachable as an error at once.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout_at};

use super::ExchangeError;
use crate::wire::response::check_answers;

/// What came back.
pub struct UdpReply {
    pub msg: Vec<u8>,
    /// Datagrams that arrived on the socket but did not answer our query.
    pub mismatched: u32,
}

pub async fn exchange(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    question: &[u8],
    deadline: Instant,
) -> Result<UdpReply, ExchangeError> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(server).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; 65535];
    let mut mismatched = 0;
    loop {
        let n = match timeout_at(deadline, socket.recv(&mut buf)).await {
            Err(_) => return Err(ExchangeError::Timeout),
            Ok(result) => result?,
        };
        match check_answers(&buf[..n], id, question) {
            Ok(()) => {
                buf.truncate(n);
                return Ok(UdpReply {
                    msg: buf,
                    mismatched,
                });
            }
            // Not ours (late answer to a previous query, spoofing attempt):
            // keep waiting for the real one until the deadline.
            Err(_) => mismatched += 1,
        }
    }
}
