//! Only nodens's own sockets receive queries, though the kernel lets
//! others join their `SO_REUSEPORT` group.
//!
//! The kernel admits a socket to a group when it was created by the uid
//! that made the group, and a root process can take any uid for that
//! (`setfsuid`, `setresuid`): it would then get a share of every pod's
//! queries. Two defences:
//!
//! - A classic BPF program on the group (`SO_ATTACH_REUSEPORT_CBPF`) picks
//!   the socket of each datagram among the first `n` of the group, nodens's
//!   own (they join first, and a socket that joins later is appended), at
//!   random: a socket that joined after them receives nothing. A member may
//!   replace the program (any member can), so it is attached again at every
//!   check.
//! - The check ([`strangers`]) lists every UDP socket of the network
//!   namespace on the listener's port (`/proc/net/udp`, `/proc/net/udp6`)
//!   and names those that are not nodens's (by inode): the server logs,
//!   counts and shows them in `/health` (`listen::Listener::check`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// How often the server looks for strangers and attaches the selector again.
pub(crate) const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// A socket on a listener's address and port that is not nodens's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Stranger {
    pub(crate) local: SocketAddr,
    pub(crate) uid: u32,
    pub(crate) inode: u64,
}

impl std::fmt::Display for Stranger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a UDP socket of uid {} on {} (inode {})",
            self.uid, self.local, self.inode
        )
    }
}

/// Makes the group of `socket` deliver each datagram to one of its first
/// `ours` sockets, at random: `A = random; A %= ours; return A`. With one
/// socket, `return 0`: the random number cost 1 % of a cache hit's CPU
/// (docs/performance.md, "The fourth step").
pub(crate) fn attach_selector(socket: &UdpSocket, ours: usize) -> io::Result<()> {
    let ours = u32::try_from(ours.max(1)).unwrap_or(u32::MAX);
    let zero = libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: 0,
    };
    let mut random = [
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: (libc::SKF_AD_OFF + libc::SKF_AD_RANDOM) as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: ours,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_A) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let mut alone = [zero];
    let program: &mut [libc::sock_filter] = if ours == 1 { &mut alone } else { &mut random };
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: setsockopt reads `fprog` and the program it points to, both
    // alive for the call, on a descriptor `socket` owns.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The inode of a socket, as `/proc/net/udp` names it.
pub(crate) fn inode(socket: &UdpSocket) -> io::Result<u64> {
    // SAFETY: an all-zero stat is a valid output buffer for fstat.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `stat`, which outlives the call.
    if unsafe { libc::fstat(socket.as_raw_fd(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.st_ino)
}

/// The UDP sockets of this network namespace bound to `addr`'s port on
/// `addr`'s address or the wildcard of its family (either receives what
/// is sent to `addr` when nodens's sockets do not) that are none of
/// `ours` (the inodes of every socket of nodens: another listener's on the
/// wildcard address is no stranger).
pub(crate) fn strangers(addr: SocketAddr, ours: &[u64]) -> io::Result<Vec<Stranger>> {
    let table = if addr.is_ipv4() {
        "/proc/net/udp"
    } else {
        "/proc/net/udp6"
    };
    let text = std::fs::read_to_string(table)?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(parse_line)
        .filter(|s| {
            s.local.port() == addr.port()
                && (s.local.ip() == addr.ip() || s.local.ip().is_unspecified())
                && !ours.contains(&s.inode)
        })
        .collect())
}

/// One line of `/proc/net/udp{,6}`: `sl local rem st tx:rx tr:when retr
/// uid timeout inode ...`, the local address in hex, each 32-bit word in
/// host order.
fn parse_line(line: &str) -> Option<Stranger> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (ip, port) = fields.get(1)?.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        u32::from_str_radix(hex, 16).ok().map(u32::from_be)
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?.to_be_bytes())),
        32 => {
            let mut octets = [0u8; 16];
            for i in 0..4 {
                octets[i * 4..i * 4 + 4].copy_from_slice(&word(i)?.to_be_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(Stranger {
        local: SocketAddr::new(ip, port),
        uid: fields.get(7)?.parse().ok()?,
        inode: fields.get(9)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_udp_lines_are_read_in_host_order() {
        let v4 = "  12: 0A14FEA9:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000 65532        0 123456 2 0000000000000000 0";
        let s = parse_line(v4).unwrap();
        assert_eq!(s.local, "169.254.20.10:53".parse().unwrap());
        assert_eq!((s.uid, s.inode), (65532, 123456));
        let v6 = "  3: 00000000000000000000000001000000:0035 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 99 2 0000000000000000 0";
        assert_eq!(parse_line(v6).unwrap().local, "[::1]:53".parse().unwrap());
        assert!(parse_line("  sl  local_address rem_address").is_none());
    }

    #[test]
    fn a_socket_of_this_process_is_no_stranger_and_another_is() {
        let ours = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = ours.local_addr().unwrap();
        assert!(
            strangers(addr, &[inode(&ours).unwrap()])
                .unwrap()
                .is_empty()
        );
        let found = strangers(addr, &[]).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].local, addr);
        assert_eq!(found[0].inode, inode(&ours).unwrap());
    }
}
