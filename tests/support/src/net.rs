//! Loopback address blocks, allocated per test.
//!
//! A test takes a block `127.0.N.0/24` with [`Net::alloc`] and, with it, the
//! ports `20000 + 10*N ..= 20009 + 10*N` on `::1`. The block is held by an
//! exclusive `flock(2)` on `/tmp/nodens-tests/net-N.lock` until the [`Net`]
//! is dropped, so tests running in parallel threads of one binary and test
//! binaries running at the same time never share a block. Blocks are tried
//! from a starting point that moves with the process ID and every
//! allocation, so a block just released is not the next one handed out.
//!
//! Inside a block: `.1` is nodens (DNS on port 1053, HTTP on 9253), `.2`,
//! `.3`, ... are CoreDNS upstreams on port 5300 ([`Net::upstream`]), `.200`
//! and up are sockets that never answer ([`Net::silent`]). All ports are
//! >= 1024.
//!
//! Declare the `Net` before the processes that use it, so it is dropped
//! (and the block released) after they are killed.

use std::fs::{File, OpenOptions};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::wait::wait_until;

/// Where the lock files live.
const LOCK_DIR: &str = "/tmp/nodens-tests";
/// The blocks handed out: `127.0.FIRST.0` ..= `127.0.LAST.0`.
const FIRST: u8 = 10;
const LAST: u8 = 250;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// One test's loopback block `127.0.N.0/24` (see the module docs).
#[derive(Debug)]
pub struct Net {
    n: u8,
    /// The open lock file; closing it releases the block. None for a fixed block.
    _lock: Option<File>,
}

fn try_lock(n: u8) -> Option<File> {
    let path = Path::new(LOCK_DIR).join(format!("net-{n}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    // SAFETY: flock(2) on a descriptor we own. Each open() is its own open
    // file description, so two threads of one process exclude each other too.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    (rc == 0).then_some(file)
}

/// Whether nodens's addresses in block `n` can be bound. A block whose lock
/// is free should be, but a process a test leaked (or one outside the
/// tests) may still hold them; such a block is skipped, and said so, rather
/// than failing the next test with "Address already in use".
fn free(n: u8) -> bool {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, n, 1));
    let probes = [
        std::net::TcpListener::bind((ip, 1053)).map(drop),
        std::net::UdpSocket::bind((ip, 1053)).map(drop),
        std::net::TcpListener::bind((ip, 9253)).map(drop),
    ];
    match probes.into_iter().find_map(Result::err) {
        None => true,
        Some(e) => {
            eprintln!("loopback block 127.0.{n}.0/24 is unlocked but in use ({e}); skipping it");
            false
        }
    }
}

impl Net {
    /// A free block, held until the returned value is dropped. Waits (up to
    /// 60 s) if every block is taken.
    pub fn alloc() -> Net {
        std::fs::create_dir_all(LOCK_DIR).unwrap_or_else(|e| panic!("mkdir {LOCK_DIR}: {e}"));
        let count = u32::from(LAST - FIRST) + 1;
        let start = std::process::id()
            .wrapping_mul(7)
            .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        wait_until(Duration::from_secs(60), "a free loopback block", || {
            (0..count).find_map(|i| {
                let n = FIRST + ((start + i) % count) as u8;
                let lock = try_lock(n)?;
                free(n).then_some(Net {
                    n,
                    _lock: Some(lock),
                })
            })
        })
    }

    /// A block that is not allocated: only for addresses inside a network
    /// namespace the test made itself, where nothing else can be.
    pub fn fixed(n: u8) -> Net {
        Net { n, _lock: None }
    }

    /// N of `127.0.N.0/24`.
    pub fn n(&self) -> u8 {
        self.n
    }
    pub fn ip(&self, host: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, self.n, host))
    }
    /// nodens's DNS listener.
    pub fn nodens(&self) -> SocketAddr {
        SocketAddr::new(self.ip(1), 1053)
    }
    /// nodens's HTTP listener (/metrics, /health, /ready).
    pub fn metrics(&self) -> SocketAddr {
        SocketAddr::new(self.ip(1), 9253)
    }
    /// The k-th CoreDNS upstream (k = 0, 1, ...).
    pub fn upstream(&self, k: u8) -> SocketAddr {
        SocketAddr::new(self.ip(2 + k), 5300)
    }
    /// The k-th never-answering upstream.
    pub fn silent(&self, k: u8) -> SocketAddr {
        SocketAddr::new(self.ip(200 + k), 5300)
    }
    /// Another address in the block, for odd jobs (a spoofer, a second listener).
    pub fn other(&self, host: u8, port: u16) -> SocketAddr {
        SocketAddr::new(self.ip(host), port)
    }
    /// The k-th port of this block on ::1 (k < 10).
    pub fn v6(&self, k: u16) -> SocketAddr {
        assert!(k < 10);
        SocketAddr::new(
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            20000 + 10 * u16::from(self.n) + k,
        )
    }
    /// The whole block as a CIDR prefix `127.0.N.0/len`, for allow lists.
    pub fn cidr(&self, len: u8) -> String {
        format!("127.0.{}.0/{len}", self.n)
    }
}
