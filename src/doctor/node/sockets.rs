//! Listening sockets of this network namespace (/proc/net/{tcp,udp}{,6})
//! and the process holding each, found by socket inode in /proc/*/fd.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use super::Out;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// A process, by pid and `comm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) pid: u32,
    pub(crate) comm: String,
}

/// A TCP socket in LISTEN or an unconnected UDP socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listener {
    pub(crate) proto: Proto,
    pub(crate) addr: SocketAddr,
    pub(crate) inode: u64,
    /// `None` when no process in /proc holds it (or it could not be read).
    pub(crate) owner: Option<Owner>,
}

impl Listener {
    /// Whether a packet to `addr` reaches this socket: same port, and the
    /// same address or a wildcard (`::` also takes IPv4 unless v6only,
    /// which /proc does not tell; counted as taking it).
    pub(crate) fn covers(&self, addr: SocketAddr) -> bool {
        let ip = self.addr.ip();
        self.addr.port() == addr.port()
            && (ip == addr.ip()
                || (ip.is_unspecified() && (ip.is_ipv6() || addr.is_ipv4()))
                || addr.ip().is_unspecified())
    }

    /// "udp 169.254.20.10:53 (nodens, pid 42)".
    pub(crate) fn describe(&self) -> String {
        let owner = match &self.owner {
            Some(o) => format!("{}, pid {}", o.comm, o.pid),
            None => format!("socket inode {}, owner not found", self.inode),
        };
        format!("{} {} ({owner})", self.proto.name(), self.addr)
    }
}

const TCP_LISTEN: &str = "0A";
const UDP_UNCONNECTED: &str = "07";

/// Every listener of this namespace, owners filled in. `None` (and a fact
/// saying why) when /proc/net cannot be read.
pub(crate) fn read(proc_root: &Path, out: &mut Out) -> Option<Vec<Listener>> {
    let mut listeners = Vec::new();
    for (file, proto, state) in [
        ("tcp", Proto::Tcp, TCP_LISTEN),
        ("tcp6", Proto::Tcp, TCP_LISTEN),
        ("udp", Proto::Udp, UDP_UNCONNECTED),
        ("udp6", Proto::Udp, UDP_UNCONNECTED),
    ] {
        let path = proc_root.join("net").join(file);
        match std::fs::read_to_string(&path) {
            Ok(text) => listeners.extend(parse_table(&text, proto, state)),
            // No IPv6 on this node: its tables are absent.
            Err(_) if file.ends_with('6') => {}
            Err(e) => {
                out.fact(format!("sockets: not read ({}: {e})", path.display()));
                return None;
            }
        }
    }
    let owners = socket_owners(proc_root);
    for l in &mut listeners {
        l.owner = owners.get(&l.inode).cloned();
    }
    Some(listeners)
}

/// The sockets of one /proc/net table in `state` (hex, as printed).
pub(crate) fn parse_table(text: &str, proto: Proto, state: &str) -> Vec<Listener> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) != Some(&state) {
                return None;
            }
            Some(Listener {
                proto,
                addr: parse_addr(fields.get(1)?)?,
                inode: fields.get(9)?.parse().ok()?,
                owner: None,
            })
        })
        .collect()
}

/// "0A14FEA9:0035": the address as the kernel's 32-bit words in host
/// order, the port in plain hex.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Option<Vec<[u8; 4]>> = (0..ip.len() / 8)
        .map(|i| {
            let word = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
            Some(word.to_ne_bytes())
        })
        .collect();
    let bytes: Vec<u8> = words?.concat();
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => {
            let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// socket inode -> the process holding it (the first found).
fn socket_owners(proc_root: &Path) -> HashMap<u64, Owner> {
    let mut owners = HashMap::new();
    for (pid, dir) in processes(proc_root) {
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            continue;
        };
        let comm = comm_of(&dir);
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let link = link.to_string_lossy();
            let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            owners.entry(inode).or_insert_with(|| Owner {
                pid,
                comm: comm.clone(),
            });
        }
    }
    owners
}

/// Every process directory of `proc_root`, by pid.
pub(crate) fn processes(proc_root: &Path) -> Vec<(u32, std::path::PathBuf)> {
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, std::path::PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect();
    found.sort();
    found
}

pub(crate) fn comm_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_listeners_and_addresses_in_host_order() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:2425 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 81234 1 0000000000000000 100 0 0 10 0\n\
           1: 0A14FEA9:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 81235 1 0000000000000000 100 0 0 10 0\n\
           2: 0100007F:2425 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 81236 1 0000000000000000 100 0 0 10 0\n";
        let l = parse_table(text, Proto::Tcp, TCP_LISTEN);
        if cfg!(target_endian = "little") {
            assert_eq!(l.len(), 2);
            assert_eq!(l[0].addr, "127.0.0.1:9253".parse().unwrap());
            assert_eq!(l[1].addr, "169.254.20.10:53".parse().unwrap());
            assert_eq!(l[1].inode, 81235);
        }
    }

    #[test]
    fn udp6_wildcard_and_a_v6_address() {
        let text = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
          10: 00000000000000000000000000000000:0035 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 555 2 0000000000000000 0\n\
          11: 000000FD000000000000000010000000:0035 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 556 2 0000000000000000 0\n";
        let l = parse_table(text, Proto::Udp, UDP_UNCONNECTED);
        assert_eq!(l[0].addr, "[::]:53".parse().unwrap());
        if cfg!(target_endian = "little") {
            assert_eq!(l[1].addr, "[fd00::10]:53".parse().unwrap());
        }
        assert!(l[0].covers("169.254.20.10:53".parse().unwrap()));
        assert!(!l[1].covers("[fd00::10]:54".parse().unwrap()));
    }
}
