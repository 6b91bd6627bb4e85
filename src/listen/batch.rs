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
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::SockAddr;

/// Datagrams per system call.
pub const BATCH: usize = 32;
/// Room per received datagram. A query that does not fit (MSG_TRUNC) is
/// dropped: DNS queries are a few hundred bytes at most.
const RECV_ROOM: usize = 4096;

/// Buffers for one `recvmmsg` call, reused for every call.
pub struct RecvBatch {
    buffers: Vec<Box<[u8; RECV_ROOM]>>,
    addrs: Vec<libc::sockaddr_storage>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    received: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch {
            buffers: (0..BATCH).map(|_| Box::new([0u8; RECV_ROOM])).collect(),
            // SAFETY: all-zero sockaddr_storage, iovec and mmsghdr are valid values.
            addrs: vec![unsafe { zeroed() }; BATCH],
            iovecs: vec![unsafe { zeroed() }; BATCH],
            headers: vec![unsafe { zeroed() }; BATCH],
            received: 0,
        }
    }
}

impl RecvBatch {
    /// Receives up to [`BATCH`] datagrams. With `wait`, blocks until one
    /// arrives (or the socket's read timeout expires: `WouldBlock`), then
    /// takes what else has arrived; without, `WouldBlock` when none has.
    pub fn recv(&mut self, socket: &UdpSocket, wait: bool) -> io::Result<usize> {
        for i in 0..BATCH {
            self.iovecs[i] = libc::iovec {
                iov_base: self.buffers[i].as_mut_ptr().cast(),
                iov_len: RECV_ROOM,
            };
            let header = &mut self.headers[i].msg_hdr;
            header.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            header.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            header.msg_iov = &mut self.iovecs[i];
            header.msg_iovlen = 1;
            header.msg_control = std::ptr::null_mut();
            header.msg_controllen = 0;
            header.msg_flags = 0;
            self.headers[i].msg_len = 0;
        }
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

    /// Datagram `i` of the last call and who sent it; `None` if it was cut
    /// short or came from an address family we do not serve.
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        debug_assert!(i < self.received);
        let header = &self.headers[i];
        if header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return None;
        }
        Some((
            &self.buffers[i][..header.msg_len as usize],
            socket_addr(&self.addrs[i])?,
        ))
    }
}

/// The sender of a datagram, from what `recvmmsg` wrote.
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

/// Replies collected while a batch is processed, sent with one `sendmmsg`.
#[derive(Default)]
pub struct SendBatch {
    replies: Vec<(Vec<u8>, SockAddr)>,
    used: usize,
    sent: usize,
}

impl SendBatch {
    /// A buffer for the next reply, to be committed with [`SendBatch::commit`].
    pub fn next_buffer(&mut self) -> &mut Vec<u8> {
        if self.used == self.replies.len() {
            self.replies.push((
                Vec::with_capacity(1232),
                SockAddr::from(SocketAddr::from(([0, 0, 0, 0], 0))),
            ));
        }
        &mut self.replies[self.used].0
    }

    /// Queues the buffer last returned by `next_buffer` for `to`.
    pub fn commit(&mut self, to: SocketAddr) {
        self.replies[self.used].1 = SockAddr::from(to);
        self.used += 1;
    }

    /// Sends the queued replies not sent yet. With `wait`, blocks while the
    /// socket's buffer is full; without, returns `WouldBlock`: call again
    /// when it is writable. A reply the kernel refuses for another reason
    /// (an unreachable client) is dropped, as a lost datagram would be.
    pub fn send(&mut self, socket: &UdpSocket, wait: bool) -> io::Result<()> {
        let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
        while self.sent < self.used {
            let count = (self.used - self.sent).min(BATCH);
            // SAFETY: all-zero iovec and mmsghdr are valid values.
            let mut iovecs: [libc::iovec; BATCH] = unsafe { zeroed() };
            let mut headers: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
            for i in 0..count {
                let (reply, to) = &self.replies[self.sent + i];
                iovecs[i] = libc::iovec {
                    iov_base: reply.as_ptr() as *mut _,
                    iov_len: reply.len(),
                };
                let header = &mut headers[i].msg_hdr;
                header.msg_name = to.as_ptr() as *mut _;
                header.msg_namelen = to.len();
                header.msg_iov = &mut iovecs[i];
                header.msg_iovlen = 1;
            }
            // SAFETY: the headers point at replies and addresses owned by
            // `self` and at `iovecs`, all alive for the call.
            let n = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    headers.as_mut_ptr(),
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
    pub fn clear(&mut self) {
        self.used = 0;
        self.sent = 0;
    }
}
