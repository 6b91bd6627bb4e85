//! Zero-loss handover: a new nodens takes the listening sockets of the one
//! it replaces over a Unix socket (SCM_RIGHTS), so no socket is ever closed
//! and no datagram queued in one is lost.
//!
//! 1. The running nodens listens on `[server] handover_socket`.
//! 2. A new nodens connects at start and says `nodens-handover 1`.
//! 3. The old one sends every listening socket (each UDP worker's, each TCP
//!    listener, the HTTP listener) in one message, with a JSON list naming
//!    them.
//! 4. Then it writes its cache on the same stream (`cache::snapshot`), and
//!    the new one loads it before serving: it starts warm.
//! 5. The new one serves on the sockets (both now read them) and says
//!    `ready`; the old one stops reading, answers what it has in flight,
//!    keeps the node setup in place, and waits, not ready, for SIGTERM.
//!
//! Whoever can connect to this socket gets every listening socket and the
//! whole cache, and whoever listens on it feeds the next nodens its sockets
//! and cache. So both sides trust nothing but nodens (`crate::trust`): the
//! socket file must be nodens's (mode 0600, in a 0700 directory of
//! nodens's uid), the peer must run as nodens's uid (`SO_PEERCRED`, checked
//! on both sides), every descriptor received must be the socket its name
//! says (family, type, listening, bound to the named address) or the whole
//! handover is refused, and each side bounds what it reads and gives the
//! whole exchange one deadline.

use std::collections::HashMap;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use serde::{Deserialize, Serialize};

use crate::trust;

const HELLO: &[u8] = b"nodens-handover 1\n";
const READY: &[u8] = b"ready\n";
/// The whole exchange, on either side: greeting, sockets, cache, `ready`.
/// A cache of a few hundred MB goes over a Unix socket in a few seconds.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);
/// Sockets one message can carry (the kernel's SCM_MAX_FD is 253).
const MAX_FDS: usize = 250;
/// The largest list of sockets a new process reads.
const MAX_LIST: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Udp,
    Tcp,
    /// An HTTP listener (the metrics server's or the probe server's), by
    /// its address.
    Http,
}

/// What one passed descriptor is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Named {
    pub addr: SocketAddr,
    pub kind: Kind,
}

/// Sockets taken over from the previous process, by listen address.
#[derive(Default)]
pub(crate) struct Inherited {
    udp: HashMap<SocketAddr, Vec<UdpSocket>>,
    tcp: HashMap<SocketAddr, TcpListener>,
    http: HashMap<SocketAddr, TcpListener>,
}

impl Inherited {
    /// The UDP sockets and the TCP listener for `addr`, if the previous
    /// process had them.
    pub(crate) fn take(&mut self, addr: SocketAddr) -> (Vec<UdpSocket>, Option<TcpListener>) {
        (
            self.udp.remove(&addr).unwrap_or_default(),
            self.tcp.remove(&addr),
        )
    }

    /// The HTTP listener for `addr`, if the previous process had it.
    pub(crate) fn take_http(&mut self, addr: SocketAddr) -> Option<TcpListener> {
        self.http.remove(&addr)
    }
}

/// One deadline for a whole exchange: each blocking call on the stream
/// gets what is left of it.
#[derive(Clone, Copy)]
struct Deadline(Instant);

impl Deadline {
    fn start() -> Deadline {
        Deadline(Instant::now() + DEADLINE)
    }

    fn arm(self, stream: &UnixStream) -> io::Result<()> {
        let left = self.0.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("handover: not done within {DEADLINE:?}"),
            ));
        }
        stream.set_read_timeout(Some(left))?;
        stream.set_write_timeout(Some(left))
    }
}

/// The stream with the deadline re-armed before each read and write.
struct Timed<'a> {
    stream: &'a UnixStream,
    deadline: Deadline,
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.deadline.arm(self.stream)?;
        (&mut &*self.stream).read(buf)
    }
}

impl Write for Timed<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.deadline.arm(self.stream)?;
        (&mut &*self.stream).write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads exactly `expected` (a greeting or `ready`), never more bytes than it has.
fn expect(input: &mut impl Read, expected: &[u8]) -> io::Result<bool> {
    let mut got = vec![0u8; expected.len()];
    match input.read_exact(&mut got) {
        Ok(()) => Ok(got == expected),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Why a handover did not happen. The `Display` of every refusal starts
/// with `handover refused: `.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// The socket file or the peer is not nodens's (`crate::trust`).
    #[error("handover refused: {0}")]
    Untrusted(#[source] io::Error),
    #[error("handover refused: list of sockets too long")]
    ListTooLong,
    #[error("handover refused: bad list of sockets: {0}")]
    ListNotUtf8(#[source] std::str::Utf8Error),
    #[error("handover refused: bad list of sockets: {0}")]
    BadList(#[source] serde_json::Error),
    #[error("handover refused: {0} sockets named, at most {MAX_FDS} can be passed")]
    TooManyNamed(usize),
    #[error("handover refused: more descriptors than one message holds")]
    DescriptorsCut,
    #[error("handover refused: {named} sockets named, {received} received")]
    CountMismatch { named: usize, received: usize },
    /// A descriptor is not the socket its name says.
    #[error("handover refused: the descriptor named {name:?} {what}")]
    WrongSocket { name: Named, what: &'static str },
    /// The old side has more sockets than one message carries.
    #[error("handover: too many sockets for one message")]
    TooManySockets,
    /// The stream failed or the deadline passed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<nix::Error> for HandoverError {
    fn from(e: nix::Error) -> HandoverError {
        HandoverError::Io(e.into())
    }
}

/// The list of sockets the previous process sent: input, bounded like the
/// descriptors it names (at most `MAX_FDS`). UTF-8 is checked first: read
/// from bytes, serde_json does not check the strings it skips (a field it
/// does not know).
pub fn parse_names(payload: &[u8]) -> Result<Vec<Named>, HandoverError> {
    if payload.len() > MAX_LIST {
        return Err(HandoverError::ListTooLong);
    }
    let text = std::str::from_utf8(payload).map_err(HandoverError::ListNotUtf8)?;
    let names: Vec<Named> = serde_json::from_str(text).map_err(HandoverError::BadList)?;
    if names.len() > MAX_FDS {
        return Err(HandoverError::TooManyNamed(names.len()));
    }
    Ok(names)
}

/// Checks that `fd` is the socket `name` says: a listening TCP socket or a
/// UDP socket, of the address's family, bound to the address, not connected.
fn check_socket(fd: &OwnedFd, name: &Named) -> Result<(), HandoverError> {
    let sock = socket2::SockRef::from(fd);
    let wrong = |what| HandoverError::WrongSocket { name: *name, what };
    let domain = sock.domain().map_err(|_| wrong("is not a socket"))?;
    let family = if name.addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    if domain != family {
        return Err(wrong("is of another address family"));
    }
    let (ty, listening) = match name.kind {
        Kind::Udp => (socket2::Type::DGRAM, false),
        Kind::Tcp | Kind::Http => (socket2::Type::STREAM, true),
    };
    if sock.r#type()? != ty {
        return Err(wrong("is of another socket type"));
    }
    if sock.is_listener()? != listening {
        return Err(wrong(if listening {
            "is not listening"
        } else {
            "is listening"
        }));
    }
    if sock.local_addr()?.as_socket() != Some(name.addr) {
        return Err(wrong("is bound elsewhere"));
    }
    if sock.peer_addr().is_ok() {
        return Err(wrong("is connected"));
    }
    Ok(())
}

/// The new process's side: takes the sockets of the nodens listening on
/// `path`, if there is one. The returned stream says `ready` with
/// [`confirm`] once the sockets are served. An error is a handover refused
/// (the socket file or the peer is not nodens's, a descriptor is not what
/// it is named, the deadline passed): nothing received is used, and the
/// caller starts as on a first start.
pub(crate) fn take_over<E: std::fmt::Display>(
    path: &Path,
    load_cache: impl FnOnce(&mut dyn Read) -> Result<usize, E>,
) -> Result<Option<(Inherited, UnixStream)>, HandoverError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        _ => trust::check_socket_file(path).map_err(HandoverError::Untrusted)?,
    }
    let stream = match UnixStream::connect(path) {
        Ok(s) => s,
        // Nobody there: a first start.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    trust::check_peer(&stream).map_err(HandoverError::Untrusted)?;
    let deadline = Deadline::start();
    let mut timed = Timed {
        stream: &stream,
        deadline,
    };
    timed.write_all(HELLO)?;
    let mut payload = vec![0u8; MAX_LIST];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(&mut payload)];
    deadline.arm(&stream)?;
    let message = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for cmsg in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: the kernel installed these descriptors in this process
            // for this message; nothing else owns them.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if message.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(HandoverError::DescriptorsCut);
    }
    // The list came in the same segment as the descriptors, and a Unix
    // stream read stops after a segment that carried descriptors, so these
    // bytes are the list alone (the cache follows in later segments).
    let len = message.bytes;
    let names = parse_names(&payload[..len])?;
    if names.len() != fds.len() {
        return Err(HandoverError::CountMismatch {
            named: names.len(),
            received: fds.len(),
        });
    }
    for (name, fd) in names.iter().zip(&fds) {
        check_socket(fd, name)?;
    }
    let loaded = load_cache(&mut io::BufReader::new(Timed {
        stream: &stream,
        deadline,
    }));
    match loaded {
        Ok(n) => tracing::info!(entries = n, "handover: cache received"),
        Err(e) => tracing::warn!("handover: cache not (all) received: {e}"),
    }
    // Nothing more is read: a sender still writing a cache the load cut
    // short (its deadline, its record bound) gets EPIPE at once, instead of
    // blocking on a full socket until its deadline, and goes on to `ready`.
    let _ = stream.shutdown(std::net::Shutdown::Read);
    let mut inherited = Inherited::default();
    for (name, fd) in names.into_iter().zip(fds) {
        match name.kind {
            Kind::Udp => inherited
                .udp
                .entry(name.addr)
                .or_default()
                .push(UdpSocket::from(fd)),
            Kind::Tcp => {
                inherited.tcp.insert(name.addr, TcpListener::from(fd));
            }
            Kind::Http => {
                inherited.http.insert(name.addr, TcpListener::from(fd));
            }
        }
    }
    Ok(Some((inherited, stream)))
}

/// Tells the previous process that its sockets are served here now.
pub(crate) fn confirm(stream: &mut UnixStream) -> io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(READY)
}

/// The old process's side, for one new process on `stream` whose peer
/// passed [`trust::check_peer`]: checks its greeting, sends `sockets` and
/// the cache, and waits for `ready`, all within [`DEADLINE`]. Blocking: run
/// it off the main loop. True when the new process took over.
pub(crate) fn give(
    stream: &UnixStream,
    sockets: &[(Named, RawFd)],
    send_cache: impl FnOnce(&mut dyn Write) -> io::Result<usize>,
) -> Result<bool, HandoverError> {
    let deadline = Deadline::start();
    let mut timed = Timed { stream, deadline };
    if !expect(&mut timed, HELLO)? {
        return Ok(false);
    }
    if sockets.len() > MAX_FDS {
        return Err(HandoverError::TooManySockets);
    }
    let names: Vec<Named> = sockets.iter().map(|(n, _)| *n).collect();
    let payload = serde_json::to_vec(&names).map_err(io::Error::other)?;
    let fds: Vec<RawFd> = sockets.iter().map(|(_, fd)| *fd).collect();
    deadline.arm(stream)?;
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&payload)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )?;
    let mut out = io::BufWriter::new(Timed { stream, deadline });
    // A cache not all taken (the new process stops reading when its load
    // is cut short) is not a failed handover: the sockets are what counts.
    match send_cache(&mut out).and_then(|sent| out.flush().map(|()| sent)) {
        Ok(sent) => tracing::info!(entries = sent, "handover: cache sent"),
        Err(e) => {
            tracing::warn!("handover: cache not all sent ({e}); the new process starts partly warm")
        }
    }
    drop(out);
    Ok(expect(&mut timed, READY)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(addr: &str, kind: Kind) -> Named {
        Named {
            addr: addr.parse().unwrap(),
            kind,
        }
    }

    #[test]
    fn a_descriptor_must_be_the_socket_its_name_says() {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let udp_addr = udp.local_addr().unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp_addr = tcp.local_addr().unwrap();
        let udp = OwnedFd::from(udp);
        let tcp = OwnedFd::from(tcp);
        check_socket(&udp, &named(&udp_addr.to_string(), Kind::Udp)).unwrap();
        check_socket(&tcp, &named(&tcp_addr.to_string(), Kind::Tcp)).unwrap();
        check_socket(&tcp, &named(&tcp_addr.to_string(), Kind::Http)).unwrap();
        // Another kind, another address, another family.
        assert!(check_socket(&udp, &named(&udp_addr.to_string(), Kind::Tcp)).is_err());
        assert!(check_socket(&tcp, &named(&tcp_addr.to_string(), Kind::Udp)).is_err());
        assert!(check_socket(&udp, &named("127.0.0.1:53", Kind::Udp)).is_err());
        assert!(check_socket(&udp, &named("[::1]:53", Kind::Udp)).is_err());
        // A stream that is not listening, a connected datagram socket, a pipe.
        let client = std::net::TcpStream::connect(tcp_addr).unwrap();
        let local = client.local_addr().unwrap().to_string();
        assert!(check_socket(&OwnedFd::from(client), &named(&local, Kind::Tcp)).is_err());
        let connected = UdpSocket::bind("127.0.0.1:0").unwrap();
        connected.connect(udp_addr).unwrap();
        let local = connected.local_addr().unwrap().to_string();
        assert!(check_socket(&OwnedFd::from(connected), &named(&local, Kind::Udp)).is_err());
        let (pipe, _other) = UnixStream::pair().unwrap();
        assert!(check_socket(&OwnedFd::from(pipe), &named("127.0.0.1:53", Kind::Udp)).is_err());
    }

    #[test]
    fn the_list_of_sockets_is_bounded() {
        let one = r#"[{"addr":"127.0.0.1:53","kind":"udp"}]"#;
        assert_eq!(parse_names(one.as_bytes()).unwrap().len(), 1);
        let many = format!("[{}]", vec![&one[1..one.len() - 1]; MAX_FDS + 1].join(","));
        assert!(parse_names(many.as_bytes()).is_err());
        assert!(parse_names(b"{").is_err());
    }

    #[test]
    fn a_greeting_is_read_to_its_length_only() {
        let mut long = &b"nodens-handover 1\nmore bytes that are not read"[..];
        assert!(expect(&mut long, HELLO).unwrap());
        assert_eq!(long, b"more bytes that are not read");
        assert!(!expect(&mut &b"nodens"[..], HELLO).unwrap());
        assert!(!expect(&mut &b"nodens-handover 2\n"[..], HELLO).unwrap());
    }
}
