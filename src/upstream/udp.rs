//! One query to one upstream over UDP.
//!
//! Every query in flight has a socket of its own, so its own random source
//! port (chosen by the kernel) on top of a random ID: an off-path attacker
//! has to guess both. The socket is connected, so the kernel drops datagrams
//! from any other address and reports an ICMP port-unreachable at once.
//!
//! Opening a socket is most of what a miss costs (socket, bind, connect,
//! register with the event loop, deregister, close), so a socket whose query
//! got its answer goes back to a small free list of its thread and carries
//! another query: at most [`MAX_USES`] in all, for at most [`MAX_AGE`], so
//! source ports keep changing. Before a reused socket sends, anything queued
//! on it is read and thrown away: only datagrams that arrive after the query
//! left are considered, so answers cannot be planted ahead of a query. A
//! socket whose query failed or timed out is closed, never reused: a late
//! answer must not meet the next query. Free sockets past their age are
//! closed by [`close_expired_sockets`] too, so a thread that has no more
//! misses (the burst of refreshes after an outage, then quiet) does not keep
//! them open until its next one.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout_at};

use super::ExchangeError;
use crate::lock::lock;
use crate::wire::response::{Answers, Case, ResponseError, check_answers, with_question};

/// Queries one socket carries before it is closed.
const MAX_USES: u32 = 32;
/// How long a socket is used before it is closed.
const MAX_AGE: Duration = Duration::from_secs(5);
/// Free sockets kept per upstream and thread; more are closed.
const MAX_FREE: usize = 256;
/// How often [`close_expired_sockets`] looks for free sockets past
/// [`MAX_AGE`]: none stays open longer than `MAX_AGE` and this.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Room for any UDP datagram.
const RECV_ROOM: usize = 65535;
/// Datagrams that were not our answer, arriving while one query waits,
/// from which on spoofing is suspected: the wait ends at once with
/// [`ExchangeError::SpoofSuspected`] and the socket is closed, so no
/// datagram that comes later on it is trusted, and the caller asks over
/// TCP (compare PowerDNS's `spoof-nearmiss-max`). A late duplicate is one;
/// a forger's guesses are many.
pub(crate) const SPOOF_SUSPECT: u32 = 4;

/// How an exchange went, whether it used a socket that had carried
/// queries before (a "connection cache hit" in CoreDNS's metrics), and
/// how many datagrams arrived that did not answer our query, whatever the
/// outcome.
pub(crate) struct Exchanged {
    pub reused: bool,
    pub mismatched: u32,
    pub result: Result<Vec<u8>, ExchangeError>,
}

struct PooledSocket {
    socket: UdpSocket,
    uses: u32,
    /// When it is closed instead of reused ([`MAX_AGE`] after it opened):
    /// a comparison per use, where an age would be a subtraction.
    expires: Instant,
}

/// One thread's free sockets, per upstream. A list rather than a map: a
/// thread talks to a handful of upstreams. Each queue has the socket given
/// back last at the back: it is used next, and expired ones are closed from
/// the front.
type FreeLists = Vec<(SocketAddr, VecDeque<PooledSocket>)>;

/// Every thread's free lists, for [`close_expired_sockets`]. A thread that
/// exits drops its lists (and closes their sockets); its entry here is
/// then dead and is removed by the next sweep.
static ALL_FREE: Mutex<Vec<Weak<Mutex<FreeLists>>>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's free lists. Per thread because a socket is registered
    /// with the event loop of the runtime that opened it, and every thread
    /// of nodens runs tasks of one runtime only. Behind a lock only for the
    /// sweep, once a second: the thread's own exchanges find it uncontended.
    static FREE: Arc<Mutex<FreeLists>> = {
        let lists = Arc::default();
        lock(&ALL_FREE).push(Arc::downgrade(&lists));
        lists
    };
    /// Where datagrams land before the answer is copied out at its size.
    static RECV_BUFFER: RefCell<Box<[u8]>> = RefCell::new(vec![0; RECV_ROOM].into_boxed_slice());
}

/// Sends `query` (ID `id`, question `question` as sent) to `server` and
/// waits until `deadline` for the datagram that answers it. An answer with
/// the right ID and the question in another letter case ends the wait
/// with [`ExchangeError::CaseMismatch`] when `case` is [`Case::Exact`].
/// `now` is the time of the try's start: a pooled socket's age is read
/// against it, so an exchange reads no clock of its own.
pub(crate) async fn exchange(
    server: &SocketAddr,
    query: &[u8],
    id: u16,
    question: &[u8],
    case: Case,
    now: Instant,
    deadline: Instant,
) -> Exchanged {
    let (mut pooled, mut mismatched) = match take_free(*server, now) {
        Some(free) => free,
        None => match open(*server, now) {
            Ok(fresh) => (fresh, 0),
            Err(e) => {
                return Exchanged {
                    reused: false,
                    mismatched: 0,
                    result: Err(e.into()),
                };
            }
        },
    };
    let reused = pooled.uses > 0;
    let result = ask(
        &pooled.socket,
        query,
        id,
        question,
        case,
        deadline,
        &mut mismatched,
    )
    .await;
    if result.is_ok() {
        pooled.uses += 1;
        give_back(*server, pooled, now);
    }
    Exchanged {
        reused,
        mismatched,
        result,
    }
}

async fn ask(
    socket: &UdpSocket,
    query: &[u8],
    id: u16,
    question: &[u8],
    case: Case,
    deadline: Instant,
    mismatched: &mut u32,
) -> Result<Vec<u8>, ExchangeError> {
    // Straight to the kernel: a UDP send does not block but on a full
    // buffer, and a new socket's writability is not known to the event loop
    // until its next turn.
    match SockRef::from(socket).send(query) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            socket.send(query).await?;
        }
        Err(e) => return Err(e.into()),
    }
    // ERROR too: an ICMP port unreachable (nothing listens upstream) is
    // reported as a socket error, not as readability; without it the
    // query would wait out its whole deadline.
    let interest = Interest::READABLE | Interest::ERROR;
    loop {
        let ready = match timeout_at(deadline, socket.ready(interest)).await {
            Err(_) => return Err(ExchangeError::Timeout),
            Ok(ready) => ready?,
        };
        if ready.is_error() {
            // SO_ERROR says which (ECONNREFUSED); the socket is not reused.
            let error = SockRef::from(socket).take_error()?;
            return Err(error
                .unwrap_or_else(|| io::Error::other("socket error without a cause"))
                .into());
        }
        let received = RECV_BUFFER.with_borrow_mut(|buf| match socket.try_recv(buf) {
            Ok(n) => Ok(match check_answers(&buf[..n], id, question, case) {
                Ok(Answers::Question) => Some(Ok(buf[..n].to_vec())),
                // With 0x20 the question's case is half the proof that an
                // answer is ours; an error without a question has none.
                Ok(Answers::ErrorWithoutQuestion) if case == Case::Exact => {
                    Some(Err(ExchangeError::Unverifiable))
                }
                Ok(Answers::ErrorWithoutQuestion) => Some(Ok(with_question(&buf[..n], question))),
                Err(ResponseError::CaseMismatch) => Some(Err(ExchangeError::CaseMismatch)),
                // Not ours (late answer to a previous query, spoofing
                // attempt): keep waiting for the real one until the deadline.
                Err(_) => {
                    *mismatched += 1;
                    (*mismatched >= SPOOF_SUSPECT).then_some(Err(ExchangeError::SpoofSuspected))
                }
            }),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        })?;
        if let Some(answer) = received {
            return answer;
        }
    }
}

/// A free socket to `server`, emptied; with the count of datagrams that
/// were waiting on it (none but a late duplicate or a forgery can be).
fn take_free(server: SocketAddr, now: Instant) -> Option<(PooledSocket, u32)> {
    loop {
        let pooled = FREE.with(|free| {
            let mut free = lock(free);
            let (_, list) = free.iter_mut().find(|(addr, _)| *addr == server)?;
            list.pop_back()
        })?;
        if now >= pooled.expires {
            continue;
        }
        if let Ok(discarded) = discard_queued(&pooled.socket) {
            return Some((pooled, discarded));
        }
    }
}

fn give_back(server: SocketAddr, pooled: PooledSocket, now: Instant) {
    let too_old = |s: &PooledSocket| now >= s.expires;
    if pooled.uses >= MAX_USES || too_old(&pooled) {
        return;
    }
    FREE.with(|free| {
        let mut free = lock(free);
        let at = match free.iter().position(|(addr, _)| *addr == server) {
            Some(at) => at,
            None => {
                free.push((server, VecDeque::new()));
                free.len() - 1
            }
        };
        let list = &mut free[at].1;
        // Sockets left over from a burst do not stay open for long.
        while list.front().is_some_and(too_old) {
            list.pop_front();
        }
        if list.len() < MAX_FREE {
            list.push_back(pooled);
        }
    });
}

/// Closes, every [`SWEEP_EVERY`], the free sockets of every thread that are
/// past [`MAX_AGE`]. Runs for the life of the process (upkeep).
pub(crate) async fn close_expired_sockets() {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        close_expired(Instant::now());
    }
}

/// Closes the free sockets of every thread that expire by `now`; returns
/// how many it closed.
fn close_expired(now: Instant) -> usize {
    // The threads still running; the lists of those that exited are gone.
    let mut threads = Vec::new();
    lock(&ALL_FREE).retain(|lists| match lists.upgrade() {
        Some(running) => {
            threads.push(running);
            true
        }
        None => false,
    });
    threads
        .iter()
        .map(|lists| close_expired_in(lists, now))
        .sum()
}

/// Closes the sockets of one thread's `lists` that expire by `now`.
fn close_expired_in(lists: &Mutex<FreeLists>, now: Instant) -> usize {
    let mut expired = Vec::new();
    for (_, list) in lock(lists).iter_mut() {
        let (keep, old): (VecDeque<_>, VecDeque<_>) = std::mem::take(list)
            .into_iter()
            .partition(|s| now < s.expires);
        *list = keep;
        expired.extend(old);
    }
    // They close on return, out of the lock (each leaves its event loop).
    expired.len()
}

/// Reads everything queued on `socket` and returns how many datagrams that
/// was, with one system call when nothing is (the usual case).
fn discard_queued(socket: &UdpSocket) -> io::Result<u32> {
    let raw = SockRef::from(socket);
    let mut scratch = [std::mem::MaybeUninit::<u8>::uninit(); 512];
    let mut asked_kernel = false;
    // Through the event loop while it believes something is waiting, so
    // that the kernel's "nothing" also clears that belief (and the wait for
    // the answer does not begin with a read that finds nothing)...
    let mut discarded = read_until_empty(|| {
        socket.try_io(Interest::READABLE, || {
            asked_kernel = true;
            raw.recv_with_flags(&mut scratch, libc::MSG_DONTWAIT)
        })
    })?;
    // ... and straight from the kernel otherwise: the event loop may not
    // have seen datagrams that arrived since its last turn.
    if !asked_kernel {
        discarded += read_until_empty(|| raw.recv_with_flags(&mut scratch, libc::MSG_DONTWAIT))?;
    }
    Ok(discarded)
}

/// Calls `read` until it says `WouldBlock`; returns how many reads succeeded.
fn read_until_empty(mut read: impl FnMut() -> io::Result<usize>) -> io::Result<u32> {
    let mut count = 0;
    loop {
        match read() {
            Ok(_) => count += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(count),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A new socket on a random port, connected to `server`.
fn open(server: SocketAddr, now: Instant) -> io::Result<PooledSocket> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = Socket::new(
        Domain::for_address(server),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    socket.set_nonblocking(true)?;
    socket.bind(&local.into())?;
    socket.connect(&server.into())?;
    Ok(PooledSocket {
        socket: UdpSocket::from_std(socket.into())?,
        uses: 0,
        expires: now + MAX_AGE,
    })
}

#[cfg(test)]
mod tests {
    //! Against a real UDP socket on loopback playing the upstream. One
    //! runtime worker: every exchange runs on the same thread, so sees the
    //! same free list, while the test body plays the upstream.
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

    async fn upstream() -> (std::net::UdpSocket, SocketAddr) {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let addr = s.local_addr().unwrap();
        (s, addr)
    }

    /// Asks `question` with `id` while the upstream answers with `marker`
    /// (or not at all); returns the reply and the port the query came from.
    async fn ask_once(
        server: &std::net::UdpSocket,
        question: &'static [u8],
        id: u16,
        marker: Option<u8>,
        wait: Duration,
    ) -> (Exchanged, u16) {
        let addr = server.local_addr().unwrap();
        let query = build::upstream_query(id, question, false, false);
        let asking = tokio::spawn(async move {
            exchange(
                &addr,
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
        let (reply, port2) =
            ask_once(&server, QUESTION_B, 7, Some(2), Duration::from_secs(2)).await;
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

    /// The free lists of the runtime's one worker thread, swept there.
    async fn sweep_worker_thread(now: Instant) -> usize {
        tokio::spawn(async move { FREE.with(|lists| close_expired_in(lists, now)) })
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_free_socket_is_closed_at_its_age_without_another_query() {
        let (server, _) = upstream().await;
        let (reply, port) = ask_once(&server, QUESTION_A, 1, Some(1), Duration::from_secs(2)).await;
        reply.result.unwrap();
        assert!(port_taken(port), "the socket is free, and open");
        assert_eq!(sweep_worker_thread(Instant::now()).await, 0);
        assert!(port_taken(port), "younger than MAX_AGE: kept");
        assert_eq!(sweep_worker_thread(Instant::now() + MAX_AGE).await, 1);
        assert!(!port_taken(port), "past MAX_AGE: closed");
        let (reply, _) = ask_once(&server, QUESTION_A, 2, Some(1), Duration::from_secs(2)).await;
        assert!(!reply.reused, "the next query opens a new socket");
        reply.result.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_socket_whose_query_timed_out_is_not_reused() {
        let (server, _) = upstream().await;
        let (reply, port) =
            ask_once(&server, QUESTION_A, 1, None, Duration::from_millis(100)).await;
        assert!(matches!(reply.result, Err(ExchangeError::Timeout)));
        let (reply, port2) =
            ask_once(&server, QUESTION_A, 2, Some(1), Duration::from_secs(2)).await;
        assert!(!reply.reused);
        reply.result.unwrap();
        assert_ne!(port, port2);
    }
}
