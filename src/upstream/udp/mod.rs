//! One query to one upstream over UDP.
//!
//! Every query in flight has a socket of its own, so its own random source
//! port (chosen by the kernel) on top of a random ID: an off-path attacker
//! has to guess both. The socket is connected, so the kernel drops datagrams
//! from any other address and reports an ICMP port-unreachable at once.
//!
//! Opening a socket is most of what a miss costs (socket, bind, connect,
//! register with the event loop, deregister, close), so a socket whose query
//! got its answer goes back to its upstream's free list for this thread
//! (`free.rs`) and carries another query: at most `MAX_USES` in all, for at
//! most [`MAX_AGE`], so
//! source ports keep changing. Before a reused socket sends, anything queued
//! on it is read and thrown away: only datagrams that arrive after the query
//! left are considered, so answers cannot be planted ahead of a query. A
//! socket whose query failed or timed out is closed, never reused: a late
//! answer must not meet the next query. Free sockets past their age are
//! closed by the upstream's [`sweep`] too.

mod free;

use std::cell::RefCell;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout_at};

use super::ExchangeError;
use crate::wire::response::{Answers, Case, ResponseError, check_answers, with_question};
use free::{MAX_AGE, PooledSocket};
pub(crate) use free::{Sockets, sweep};

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

thread_local! {
    /// Where datagrams land before the answer is copied out at its size.
    static RECV_BUFFER: RefCell<Box<[u8]>> = RefCell::new(vec![0; RECV_ROOM].into_boxed_slice());
}

/// Sends `query` (ID `id`, question `question` as sent) to the upstream of
/// `sockets` (on one of its free sockets, or a new one) and
/// waits until `deadline` for the datagram that answers it. An answer with
/// the right ID and the question in another letter case ends the wait
/// with [`ExchangeError::CaseMismatch`] when `case` is [`Case::Exact`].
/// `now` is the time of the try's start: a pooled socket's age is read
/// against it, so an exchange reads no clock of its own.
pub(crate) async fn exchange(
    sockets: &Sockets,
    query: &[u8],
    id: u16,
    question: &[u8],
    case: Case,
    now: Instant,
    deadline: Instant,
) -> Exchanged {
    let (mut pooled, mut mismatched) = match take_free(sockets, now) {
        Some(free) => free,
        None => match open(sockets.server, now) {
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
        sockets.give_back(pooled, now);
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

/// A free socket of `sockets`, emptied; with the count of datagrams that
/// were waiting on it (none but a late duplicate or a forgery can be).
fn take_free(sockets: &Sockets, now: Instant) -> Option<(PooledSocket, u32)> {
    loop {
        let pooled = sockets.take(now)?;
        if let Ok(discarded) = discard_queued(&pooled.socket) {
            return Some((pooled, discarded));
        }
    }
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
mod tests;
