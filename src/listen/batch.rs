//! Batched UDP I/O: `recvmmsg` takes up to [`BATCH`] queries in one system
//! call and `sendmmsg` sends the replies to all of them in one. Under load,
//! the system calls are most of the cost of a cache hit; batching divides
//! them by the batch size. A call takes whatever has arrived, so nothing
//! waits for a batch to fill.
//!
//! The socket itself stays in blocking mode: the UDP worker blocks in
//! `recvmmsg` while it has nothing else to wait for, and passes
//! `MSG_DONTWAIT` while its event loop runs.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// Datagrams per system call.
pub(super) const BATCH: usize = 32;
/// Room per received datagram. A query that does not fit (MSG_TRUNC) is
/// dropped: DNS queries are a few hundred bytes at most.
const RECV_ROOM: usize = 4096;
/// Room for the control message that carries a datagram's destination
/// address (`in6_pktinfo`, the larger of the two, with its header).
const CONTROL_ROOM: usize = 64;

/// A wildcard socket (`0.0.0.0`, `::`) must answer from the address each
/// query was sent to: the kernel would pick the outgoing interface's
/// primary address, and a client that connected its socket (glibc does)
/// drops a reply from another address. `IP_PKTINFO` / `IPV6_RECVPKTINFO`
/// tell us the destination of each query; the reply names it as source.
pub(super) fn enable_destination_info(socket: &UdpSocket, ipv6: bool) -> io::Result<()> {
    let (level, option) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option value of the right size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            option,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Where a datagram was sent: the address, and the interface it came in
/// on (a reply from an IPv6 link-local address must name it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Destination {
    pub(super) ip: IpAddr,
    pub(super) ifindex: u32,
}

/// Buffers for one `recvmmsg` call, reused for every call.
pub(super) struct RecvBatch {
    buffers: Vec<Box<[u8; RECV_ROOM]>>,
    addrs: Vec<libc::sockaddr_storage>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    /// Control buffers, for wildcard sockets only (see
    /// [`enable_destination_info`]); u64 for the cmsghdr alignment.
    controls: Option<Vec<[u64; CONTROL_ROOM / 8]>>,
    received: usize,
}

impl RecvBatch {
    /// Buffers for a socket; `destinations` when it reports each
    /// datagram's destination address.
    pub(super) fn new(destinations: bool) -> RecvBatch {
        let mut batch = RecvBatch {
            buffers: (0..BATCH).map(|_| Box::new([0u8; RECV_ROOM])).collect(),
            // SAFETY: an all-zero sockaddr_storage is a valid value.
            addrs: vec![unsafe { zeroed() }; BATCH],
            // SAFETY: an all-zero iovec (null pointer, length 0) is valid.
            iovecs: vec![unsafe { zeroed() }; BATCH],
            // SAFETY: an all-zero mmsghdr (no buffers, no control) is valid.
            headers: vec![unsafe { zeroed() }; BATCH],
            controls: destinations.then(|| vec![[0u64; CONTROL_ROOM / 8]; BATCH]),
            received: 0,
        };
        // The pointers, once: they point into heap buffers the vectors own,
        // which never move or grow.
        for i in 0..BATCH {
            batch.iovecs[i] = libc::iovec {
                iov_base: batch.buffers[i].as_mut_ptr().cast(),
                iov_len: RECV_ROOM,
            };
            let header = &mut batch.headers[i].msg_hdr;
            header.msg_name = (&mut batch.addrs[i] as *mut libc::sockaddr_storage).cast();
            header.msg_iov = &mut batch.iovecs[i];
            header.msg_iovlen = 1;
            if let Some(controls) = &mut batch.controls {
                header.msg_control = controls[i].as_mut_ptr().cast();
            }
            batch.reset(i);
        }
        batch
    }

    /// Gives header `i` back the room the kernel shrank to what it wrote.
    #[inline]
    fn reset(&mut self, i: usize) {
        let header = &mut self.headers[i].msg_hdr;
        header.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        header.msg_controllen = if self.controls.is_some() {
            CONTROL_ROOM as _
        } else {
            0
        };
        header.msg_flags = 0;
        self.headers[i].msg_len = 0;
    }
}

impl RecvBatch {
    /// Receives up to [`BATCH`] datagrams. With `wait`, blocks until one
    /// arrives (or the socket's read timeout expires: `WouldBlock`), then
    /// takes what else has arrived; without, `WouldBlock` when none has.
    pub(super) fn recv(&mut self, socket: &UdpSocket, wait: bool) -> io::Result<usize> {
        // The kernel wrote only the headers of the datagrams it gave.
        for i in 0..self.received {
            self.reset(i);
        }
        self.received = 0;
        // SAFETY: every header points into buffers owned by `self`, which
        // outlive the call; the count matches the vectors' length.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                BATCH as u32,
                if wait {
                    libc::MSG_WAITFORONE
                } else {
                    libc::MSG_DONTWAIT
                },
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.received = 0;
            return Err(io::Error::last_os_error());
        }
        self.received = n as usize;
        Ok(self.received)
    }

    /// The bytes of datagram `i` of the last call, if it was not cut short.
    #[inline]
    pub(super) fn packet(&self, i: usize) -> Option<&[u8]> {
        debug_assert!(i < self.received);
        let header = &self.headers[i];
        (header.msg_hdr.msg_flags & libc::MSG_TRUNC == 0)
            .then(|| &self.buffers[i][..header.msg_len as usize])
    }

    /// Datagram `i` of the last call, who sent it, and (on a wildcard
    /// socket) the address it was sent to; `None` if it was cut short or
    /// came from an address family we do not serve.
    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<(&[u8], SocketAddr, Option<Destination>)> {
        let packet = self.packet(i)?;
        let header = &self.headers[i];
        let destination = self
            .controls
            .as_ref()
            .and_then(|_| destination(&header.msg_hdr));
        Some((packet, socket_addr(&self.addrs[i])?, destination))
    }
}

/// The destination address in a received message's control data.
fn destination(header: &libc::msghdr) -> Option<Destination> {
    // SAFETY: the header's control buffer was filled by recvmmsg; the CMSG
    // macros walk it within msg_controllen, and each payload is read as
    // the type its level and type say it holds.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(header);
        while !cmsg.is_null() {
            let c = &*cmsg;
            if c.cmsg_level == libc::IPPROTO_IP && c.cmsg_type == libc::IP_PKTINFO {
                let info =
                    std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::in_pktinfo>());
                return Some(Destination {
                    ip: IpAddr::V4(Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr))),
                    ifindex: 0,
                });
            }
            if c.cmsg_level == libc::IPPROTO_IPV6 && c.cmsg_type == libc::IPV6_PKTINFO {
                let info =
                    std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::in6_pktinfo>());
                return Some(Destination {
                    ip: IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)),
                    ifindex: info.ipi6_ifindex,
                });
            }
            cmsg = libc::CMSG_NXTHDR(header, cmsg);
        }
    }
    None
}

/// Writes a control message that sets a datagram's source address into
/// `buffer`; returns its length.
fn source_control(source: Destination, buffer: &mut [u64; CONTROL_ROOM / 8]) -> usize {
    // SAFETY: `buffer` is aligned for cmsghdr and CONTROL_ROOM holds one
    // cmsghdr with an in6_pktinfo (the larger payload); a msghdr pointing
    // at it lets CMSG_FIRSTHDR find its start.
    unsafe {
        let mut header: libc::msghdr = zeroed();
        header.msg_control = buffer.as_mut_ptr().cast();
        header.msg_controllen = CONTROL_ROOM as _;
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        match source.ip {
            IpAddr::V4(ip) => {
                (*cmsg).cmsg_level = libc::IPPROTO_IP;
                (*cmsg).cmsg_type = libc::IP_PKTINFO;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
                let mut info: libc::in_pktinfo = zeroed();
                info.ipi_spec_dst.s_addr = u32::from(ip).to_be();
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast(), info);
                libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize
            }
            IpAddr::V6(ip) => {
                (*cmsg).cmsg_level = libc::IPPROTO_IPV6;
                (*cmsg).cmsg_type = libc::IPV6_PKTINFO;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
                let mut info: libc::in6_pktinfo = zeroed();
                info.ipi6_addr.s6_addr = ip.octets();
                info.ipi6_ifindex = source.ifindex;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast(), info);
                libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize
            }
        }
    }
}

/// The sender of a datagram, from what `recvmmsg` wrote.
#[inline]
fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: ss_family says the storage holds a sockaddr_in.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: ss_family says the storage holds a sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let addr = std::net::SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            );
            Some(SocketAddr::V6(addr))
        }
        _ => None,
    }
}

/// A reply's destination as `sendmmsg` reads it: the address alone (16 or
/// 28 bytes), where a `SockAddr` is 128 bytes cleared and moved for each
/// reply (about 40 instructions of a cache hit's 900, by callgrind).
enum Peer {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl From<SocketAddr> for Peer {
    #[inline]
    fn from(to: SocketAddr) -> Peer {
        match to {
            SocketAddr::V4(a) => Peer::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => Peer::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }
}

impl Peer {
    /// The address and its length, for a message header.
    #[inline]
    fn name(&self) -> (*mut libc::c_void, libc::socklen_t) {
        match self {
            Peer::V4(sin) => (
                (sin as *const libc::sockaddr_in).cast_mut().cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            Peer::V6(sin6) => (
                (sin6 as *const libc::sockaddr_in6).cast_mut().cast(),
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            ),
        }
    }
}

/// Replies collected while a batch is processed, sent with one `sendmmsg`.
pub(super) struct SendBatch {
    /// Each reply, its destination, and the source address to send it
    /// from (on a wildcard socket).
    replies: Vec<(Vec<u8>, Peer, Option<Destination>)>,
    /// Control messages naming those source addresses, one per reply of a
    /// `sendmmsg` call; kept so that a call does not clear them anew.
    controls: Box<[[u64; CONTROL_ROOM / 8]; BATCH]>,
    /// A call's headers, kept so that a call does not clear 2.5 KiB of them
    /// anew: it writes every field of the ones it uses.
    iovecs: Box<[libc::iovec; BATCH]>,
    headers: Box<[libc::mmsghdr; BATCH]>,
    used: usize,
    sent: usize,
}

impl Default for SendBatch {
    fn default() -> Self {
        SendBatch {
            replies: Vec::new(),
            controls: Box::new([[0; CONTROL_ROOM / 8]; BATCH]),
            // SAFETY: all-zero iovecs (null pointer, length 0) are valid.
            iovecs: Box::new(unsafe { zeroed() }),
            // SAFETY: all-zero mmsghdrs (no buffers, no control) are valid.
            headers: Box::new(unsafe { zeroed() }),
            used: 0,
            sent: 0,
        }
    }
}

impl SendBatch {
    /// A buffer for the next reply, to be committed with [`SendBatch::commit`].
    #[inline]
    pub(super) fn next_buffer(&mut self) -> &mut Vec<u8> {
        if self.used == self.replies.len() {
            self.replies.push((
                Vec::with_capacity(1232),
                Peer::from(SocketAddr::from(([0, 0, 0, 0], 0))),
                None,
            ));
        }
        &mut self.replies[self.used].0
    }

    /// Queues the buffer last returned by `next_buffer` for `to`, sent
    /// from `from` if given.
    #[inline]
    pub(super) fn commit(&mut self, to: SocketAddr, from: Option<Destination>) {
        let reply = &mut self.replies[self.used];
        reply.1 = Peer::from(to);
        reply.2 = from;
        self.used += 1;
    }

    /// Sends the queued replies not sent yet. With `wait`, blocks while the
    /// socket's buffer is full; without, returns `WouldBlock`: call again
    /// when it is writable. A reply the kernel refuses for another reason
    /// (an unreachable client) is dropped, as a lost datagram would be.
    pub(super) fn send(&mut self, socket: &UdpSocket, wait: bool) -> io::Result<()> {
        let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
        while self.sent < self.used {
            let count = (self.used - self.sent).min(BATCH);
            for i in 0..count {
                let (reply, to, from) = &self.replies[self.sent + i];
                self.iovecs[i] = libc::iovec {
                    iov_base: reply.as_ptr() as *mut _,
                    iov_len: reply.len(),
                };
                let header = &mut self.headers[i].msg_hdr;
                (header.msg_name, header.msg_namelen) = to.name();
                header.msg_iov = &mut self.iovecs[i];
                header.msg_iovlen = 1;
                header.msg_flags = 0;
                match from {
                    Some(from) => {
                        let len = source_control(*from, &mut self.controls[i]);
                        header.msg_control = self.controls[i].as_mut_ptr().cast();
                        header.msg_controllen = len as _;
                    }
                    None => {
                        header.msg_control = std::ptr::null_mut();
                        header.msg_controllen = 0;
                    }
                }
                self.headers[i].msg_len = 0;
            }
            // SAFETY: the headers point at replies, addresses and control
            // messages owned by `self`, and at `iovecs`, all alive for the call.
            let n = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    self.headers.as_mut_ptr(),
                    count as u32,
                    flags,
                )
            };
            if n > 0 {
                self.sent += n as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Err(e),
                io::ErrorKind::Interrupted => {}
                _ => {
                    // Skip the datagram the kernel refused and carry on with the rest.
                    tracing::debug!(error = %e, "UDP send failed");
                    self.sent += 1;
                }
            }
        }
        self.clear();
        Ok(())
    }

    /// Forgets the queued replies, sent or not.
    pub(super) fn clear(&mut self) {
        self.used = 0;
        self.sent = 0;
    }
}
