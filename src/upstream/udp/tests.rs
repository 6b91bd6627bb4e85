//! Against a real UDP socket on loopback playing the upstream. One
//! runtime worker: every exchange runs on the same thread, so sees the
//! same free list, while the test body plays the upstream.
use std::sync::Arc;
use std::time::Duration;

use super::free::MAX_USES;
use super::*;
use crate::wire::build;

const QUESTION_A: &[u8] = b"\x01a\x04test\x00\x00\x01\x00\x01";
const QUESTION_B: &[u8] = b"\x01b\x04test\x00\x00\x01\x00\x01";

/// The upstream's answer to `query`: the query with QR set and one
/// marker byte at the end, so a test can tell answers apart.
fn answer(query: &[u8], marker: u8) -> Vec<u8> {
    let mut a = query.to_vec();
    a[2] |= 0x80;
    a.push(marker);
    a
}

/// The upstream's socket, and its free sockets as `upstream::Upstream`
/// holds them.
struct Fake {
    socket: std::net::UdpSocket,
    free: Arc<Sockets>,
}

impl std::ops::Deref for Fake {
    type Target = std::net::UdpSocket;
    fn deref(&self) -> &std::net::UdpSocket {
        &self.socket
    }
}

async fn upstream() -> (Fake, SocketAddr) {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let addr = s.local_addr().unwrap();
    let free = Arc::new(Sockets::new(addr));
    (Fake { socket: s, free }, addr)
}

/// Asks `question` with `id` while the upstream answers with `marker`
/// (or not at all); returns the reply and the port the query came from.
async fn ask_once(
    server: &Fake,
    question: &'static [u8],
    id: u16,
    marker: Option<u8>,
    wait: Duration,
) -> (Exchanged, u16) {
    let query = build::upstream_query(id, question, false, false);
    let free = server.free.clone();
    let asking = tokio::spawn(async move {
        exchange(
            &free,
            &query,
            id,
            question,
            Case::Ignore,
            Instant::now(),
            Instant::now() + wait,
        )
        .await
    });
    let mut buf = [0u8; 512];
    let (n, from) = server.recv_from(&mut buf).unwrap();
    if let Some(m) = marker {
        server.send_to(&answer(&buf[..n], m), from).unwrap();
    }
    (asking.await.unwrap(), from.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_socket_is_reused_then_replaced() {
    let (server, _) = upstream().await;
    let mut ports = Vec::new();
    for i in 0..(MAX_USES + 2) {
        let (reply, port) = ask_once(
            &server,
            QUESTION_A,
            i as u16,
            Some(1),
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(reply.reused, i > 0 && i != MAX_USES);
        assert_eq!(reply.result.unwrap().last(), Some(&1));
        ports.push(port);
    }
    let first = ports[0];
    assert!(
        ports[..MAX_USES as usize].iter().all(|&p| p == first),
        "the first {MAX_USES} queries share a socket: {ports:?}"
    );
    assert_ne!(ports[MAX_USES as usize], first, "then a new one: {ports:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn an_answer_planted_on_a_free_socket_is_discarded() {
    let (server, _) = upstream().await;
    let (reply, port) = ask_once(&server, QUESTION_A, 1, Some(1), Duration::from_secs(2)).await;
    reply.result.unwrap();
    // A forger who knows the free socket's port, and guesses the next
    // query's ID and question right, answers before it is asked.
    let forged = answer(&build::upstream_query(7, QUESTION_B, false, false), 66);
    server.send_to(&forged, ("127.0.0.1", port)).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (reply, port2) = ask_once(&server, QUESTION_B, 7, Some(2), Duration::from_secs(2)).await;
    assert_eq!(port2, port, "the free socket was reused");
    assert_eq!(
        reply.mismatched, 1,
        "the planted answer was read and thrown away"
    );
    let msg = reply.result.unwrap();
    assert_eq!(msg.last(), Some(&2), "the real answer, not the planted one");
}

/// Whether a UDP socket of this process (or any) holds `port`.
fn port_taken(port: u16) -> bool {
    std::net::UdpSocket::bind(("127.0.0.1", port)).is_err()
}

/// One answered query: its socket is now free, and open; returns its port.
async fn one_free_socket(server: &Fake) -> u16 {
    let (reply, port) = ask_once(server, QUESTION_A, 1, Some(1), Duration::from_secs(2)).await;
    reply.result.unwrap();
    assert!(port_taken(port), "the socket is free, and open");
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_free_socket_is_closed_at_its_age_without_another_query() {
    let (server, _) = upstream().await;
    let port = one_free_socket(&server).await;
    assert_eq!(server.free.close_expired(Instant::now()), 0);
    assert!(port_taken(port), "younger than MAX_AGE: kept");
    assert_eq!(server.free.close_expired(Instant::now() + MAX_AGE), 1);
    assert!(!port_taken(port), "past MAX_AGE: closed");
    let (reply, _) = ask_once(&server, QUESTION_A, 2, Some(1), Duration::from_secs(2)).await;
    assert!(!reply.reused, "the next query opens a new socket");
    reply.result.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_socket_whose_query_timed_out_is_not_reused() {
    let (server, _) = upstream().await;
    let (reply, port) = ask_once(&server, QUESTION_A, 1, None, Duration::from_millis(100)).await;
    assert!(matches!(reply.result, Err(ExchangeError::Timeout)));
    let (reply, port2) = ask_once(&server, QUESTION_A, 2, Some(1), Duration::from_secs(2)).await;
    assert!(!reply.reused);
    reply.result.unwrap();
    assert_ne!(port, port2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn an_upstream_dropped_closes_its_free_sockets_and_ends_its_sweep() {
    let (server, _) = upstream().await;
    let port = one_free_socket(&server).await;
    let sweeping = tokio::spawn(super::sweep(Arc::downgrade(&server.free)));
    let Fake {
        socket: _socket,
        free,
    } = server;
    drop(free);
    assert!(!port_taken(port), "closed with the upstream's free sockets");
    tokio::time::timeout(Duration::from_secs(5), sweeping)
        .await
        .expect("the sweep ends once the upstream is gone")
        .unwrap();
}
