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

use std::collections::HashMap;
use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use serde::{Deserialize, Serialize};

const HELLO: &[u8] = b"nodens-handover 1\n";
const READY: &[u8] = b"ready\n";
/// How long either side waits for the other at each step.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Sockets one message can carry (the kernel's SCM_MAX_FD is 253).
const MAX_FDS: usize = 250;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Udp,
    Tcp,
    /// The /metrics, /health, /ready listener.
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
pub struct Inherited {
    udp: HashMap<SocketAddr, Vec<UdpSocket>>,
    tcp: HashMap<SocketAddr, TcpListener>,
    http: HashMap<SocketAddr, TcpListener>,
}

impl Inherited {
    /// The UDP sockets and the TCP listener for `addr`, if the previous
    /// process had them.
    pub fn take(&mut self, addr: SocketAddr) -> (Vec<UdpSocket>, Option<TcpListener>) {
        (
            self.udp.remove(&addr).unwrap_or_default(),
            self.tcp.remove(&addr),
        )
    }

    /// The HTTP listener for `addr`, if the previous process had it.
    pub fn take_http(&mut self, addr: SocketAddr) -> Option<TcpListener> {
        self.http.remove(&addr)
    }
}

/// The new process's side: takes the sockets of the nodens listening on
/// `path`, if there is one. The returned stream says `ready` with
/// [`confirm`] once the sockets are served.
pub fn take_over(
    path: &Path,
    load_cache: impl FnOnce(&mut dyn std::io::Read) -> std::io::Result<usize>,
) -> std::io::Result<Option<(Inherited, UnixStream)>> {
    let mut stream = match UnixStream::connect(path) {
        Ok(s) => s,
        // Nobody there: a first start.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    stream.set_read_timeout(Some(STEP_TIMEOUT))?;
    stream.set_write_timeout(Some(STEP_TIMEOUT))?;
    stream.write_all(HELLO)?;
    let mut payload = vec![0u8; 64 << 10];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(&mut payload)];
    let message = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for cmsg in message.cmsgs().map_err(std::io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: the kernel installed these descriptors in this process
            // for this message; nothing else owns them.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    // The list came in the same segment as the descriptors, and a Unix
    // stream read stops after a segment that carried descriptors, so these
    // bytes are the list alone (the cache follows in later segments).
    let len = message.bytes;
    let names = parse_names(&payload[..len])?;
    if names.len() != fds.len() {
        return Err(std::io::Error::other(format!(
            "handover: {} sockets named, {} received",
            names.len(),
            fds.len()
        )));
    }
    let loaded = load_cache(&mut BufReader::new(stream.try_clone()?));
    match loaded {
        Ok(n) => tracing::info!(entries = n, "handover: cache received"),
        Err(e) => tracing::warn!("handover: cache not (all) received: {e}"),
    }
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

/// The list of sockets the previous process sent: input, bounded like the
/// descriptors it names (at most `MAX_FDS`). UTF-8 is checked first: read
/// from bytes, serde_json does not check the strings it skips (a field it
/// does not know).
pub fn parse_names(payload: &[u8]) -> std::io::Result<Vec<Named>> {
    let bad = |e: &dyn std::fmt::Display| {
        std::io::Error::other(format!("handover: bad list of sockets: {e}"))
    };
    let text = std::str::from_utf8(payload).map_err(|e| bad(&e))?;
    let names: Vec<Named> = serde_json::from_str(text).map_err(|e| bad(&e))?;
    if names.len() > MAX_FDS {
        return Err(std::io::Error::other(format!(
            "handover: {} sockets named, at most {MAX_FDS} can be passed",
            names.len()
        )));
    }
    Ok(names)
}

/// Tells the previous process that its sockets are served here now.
pub fn confirm(stream: &mut UnixStream) -> std::io::Result<()> {
    stream.write_all(READY)
}

/// The old process's side, for one new process on `stream`: checks its
/// greeting, sends `sockets`, and waits for `ready`. Blocking; true when
/// the new process took over.
pub fn give(
    stream: &mut UnixStream,
    sockets: &[(Named, RawFd)],
    send_cache: impl FnOnce(&mut dyn Write) -> std::io::Result<usize>,
) -> std::io::Result<bool> {
    stream.set_read_timeout(Some(STEP_TIMEOUT))?;
    stream.set_write_timeout(Some(STEP_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut hello = String::new();
    reader.read_line(&mut hello)?;
    if hello.as_bytes() != HELLO {
        return Ok(false);
    }
    if sockets.len() > MAX_FDS {
        return Err(std::io::Error::other(
            "handover: too many sockets for one message",
        ));
    }
    let names: Vec<Named> = sockets.iter().map(|(n, _)| *n).collect();
    let payload = serde_json::to_vec(&names).map_err(std::io::Error::other)?;
    let fds: Vec<RawFd> = sockets.iter().map(|(_, fd)| *fd).collect();
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&payload)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(std::io::Error::from)?;
    let mut out = std::io::BufWriter::new(stream.try_clone()?);
    let sent = send_cache(&mut out)?;
    out.flush()?;
    tracing::info!(entries = sent, "handover: cache sent");
    let mut ready = String::new();
    reader.read_line(&mut ready)?;
    Ok(ready.as_bytes() == READY)
}
