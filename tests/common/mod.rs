//! Harness shared by the integration tests: real processes (nodens, CoreDNS,
//! dnsperf) behind guards that kill them on drop, a small DNS client, an HTTP
//! GET for the metrics endpoint, and the test zone.
//!
//! # Loopback address allocation
//!
//! Test binaries run one after the other, but the tests inside one binary run
//! in parallel, so every test function owns a block `127.0.N.0/24` (see
//! [`Net`]) and, on `::1`, the ports `20000 + 10*N ..= 20009 + 10*N`:
//!
//! | block reserved | file              | used now                  |
//! |----------------|-------------------|---------------------------|
//! | 10..=19        | forwarding.rs     | 10..=18                   |
//! | 20..=29        | negative.rs       | 20..=22                   |
//! | 30..=39        | truncation.rs     | 30..=33                   |
//! | 40..=49        | stale_prefetch.rs | 40..=42                   |
//! | 50..=59        | coalescing.rs     | 50                        |
//! | 60..=69        | tcp.rs            | 60..=62                   |
//! | 70..=79        | malformed.rs      | 70..=72                   |
//! | 80..=89        | lifecycle.rs      | 80..=83                   |
//! | 90..=99        | metrics.rs        | 90..=91                   |
//! | 100..=109      | node.rs           | 100..=102 (the netns test uses 127.0.0.1 inside its own namespace) |
//! | 110..=119      | upstream_pool.rs  | 110..=119                 |
//! | 120..=129      | upstream_faults.rs | 120..=128 (test-written servers on `.200` (silent) and `.10`) |
//! | 130..=139      | transport_fallback.rs | 130 (inside its own network namespace, with CoreDNS on 127.0.0.1:5300 there) |
//! | 140..=149      | udp_worker.rs     | 140..=141                 |
//! | 150..=159      | abuse.rs          | 150..=159 (test-written servers on `.10`, wildcard listener on port 30154) |
//! | 160..=169      | privileges.rs     | 160 (root: binds port 53 on reload) |
//!
//! A new test takes the next free N of its file's block.
//!
//! Inside a block: `.1` is nodens (DNS on port 1053, HTTP on 9253), `.2`, `.3`,
//! ... are CoreDNS upstreams on port 5300 ([`Net::upstream`]), `.200` and up
//! are sockets that never answer ([`Net::silent`]). All ports are >= 1024.
//!
//! Nothing here sends a packet outside 127.0.0.0/8 and ::1 (or a network
//! namespace a test made itself). Every wait has a deadline; no readiness
//! check is a fixed sleep.

#![allow(dead_code, unreachable_pub)] // shared by test binaries, each including it privately

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, Record, RecordType};

#[allow(unused_imports)]
pub use hickory_proto::rr::RecordType as Rt;

// ---------------------------------------------------------------------------
// Waiting
// ---------------------------------------------------------------------------

/// Polls `f` every 20 ms until it returns `Some`, panicking with `what` after
/// `timeout`. The one way tests wait for something to become true.
pub fn wait_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Sleeps until `start + offset`: for tests about time itself (TTL expiry,
/// prefetch windows), where the wait is the thing being tested.
pub fn sleep_until(start: Instant, offset: Duration) {
    let target = start + offset;
    let now = Instant::now();
    if target > now {
        thread::sleep(target - now);
    }
}

// ---------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------

/// One test's loopback block `127.0.N.0/24` (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Net(pub u8);

impl Net {
    pub fn ip(self, host: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, self.0, host))
    }
    /// nodens's DNS listener.
    pub fn nodens(self) -> SocketAddr {
        SocketAddr::new(self.ip(1), 1053)
    }
    /// nodens's HTTP listener (/metrics, /health, /ready).
    pub fn metrics(self) -> SocketAddr {
        SocketAddr::new(self.ip(1), 9253)
    }
    /// The k-th CoreDNS upstream (k = 0, 1, ...).
    pub fn upstream(self, k: u8) -> SocketAddr {
        SocketAddr::new(self.ip(2 + k), 5300)
    }
    /// The k-th never-answering upstream.
    pub fn silent(self, k: u8) -> SocketAddr {
        SocketAddr::new(self.ip(200 + k), 5300)
    }
    /// Another address in the block, for odd jobs (a spoofer, a second listener).
    pub fn other(self, host: u8, port: u16) -> SocketAddr {
        SocketAddr::new(self.ip(host), port)
    }
    /// The k-th port of this block on ::1 (k < 10).
    pub fn v6(self, k: u16) -> SocketAddr {
        assert!(k < 10);
        SocketAddr::new(
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            20000 + 10 * u16::from(self.0) + k,
        )
    }
}

// ---------------------------------------------------------------------------
// Tools and privileges
// ---------------------------------------------------------------------------

const INSTALL_HINT: &str = "run .ci/install-deps to install the test dependencies";

/// Finds an executable on PATH, or panics saying how to install it.
pub fn tool(name: &str) -> PathBuf {
    find_on_path(name).unwrap_or_else(|| panic!("`{name}` not found on PATH: {INSTALL_HINT}"))
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/sbin:/usr/bin:/sbin:/bin"));
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The CoreDNS binary: $COREDNS, then PATH, then `$(go env GOPATH)/bin/coredns`.
pub fn coredns_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("COREDNS") {
        let p = PathBuf::from(p);
        assert!(
            is_executable(&p),
            "COREDNS={} is not an executable: {INSTALL_HINT}",
            p.display()
        );
        return p;
    }
    if let Some(p) = find_on_path("coredns") {
        return p;
    }
    let gopath = Command::new("go")
        .args(["env", "GOPATH"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOME").ok().map(|h| format!("{h}/go")));
    if let Some(gopath) = gopath {
        let p = PathBuf::from(gopath).join("bin/coredns");
        if is_executable(&p) {
            return p;
        }
    }
    panic!("coredns not found ($COREDNS, PATH, $(go env GOPATH)/bin): {INSTALL_HINT}")
}

pub fn nodens_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nodens"))
}

pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// For tests that need root (network namespaces, cgroups): true to go on,
/// false to skip (only when NODENS_ALLOW_SKIP_ROOT=1), else panics.
pub fn require_root(what: &str) -> bool {
    if euid() == 0 {
        return true;
    }
    if std::env::var("NODENS_ALLOW_SKIP_ROOT").as_deref() == Ok("1") {
        eprintln!("SKIPPED {what}: needs root, and NODENS_ALLOW_SKIP_ROOT=1");
        return false;
    }
    panic!(
        "{what} needs root (network namespaces / cgroups); run as root, or set NODENS_ALLOW_SKIP_ROOT=1 to skip it"
    )
}

/// Runs `f` on a new thread that has joined the network namespace `name`
/// (one made with `ip netns add NAME`, i.e. `/var/run/netns/NAME`) and
/// returns its result; a panic in `f` is the caller's panic. Only that
/// thread changes namespace, and the sockets it opens belong to the
/// namespace, so the harness's clients ([`udp_query`], [`tcp_query`],
/// [`http_get`], [`Nodens::metric`], [`CoreDns::wait_ready`], ...) reach
/// servers running inside it. Needs root (CAP_SYS_ADMIN).
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    use std::os::fd::AsRawFd;
    let path = Path::new("/var/run/netns").join(name);
    let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    thread::scope(|s| {
        let worker = s.spawn(move || {
            // SAFETY: setns(2) on a namespace fd we hold open; CLONE_NEWNET
            // moves only the calling thread, which runs nothing else.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "setns({}): {}",
                path.display(),
                std::io::Error::last_os_error()
            );
            f()
        });
        worker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A random-enough u64 without a dependency: std's per-process hash keys.
pub fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

/// A child process that is killed and reaped when dropped, with its stdout and
/// stderr captured line by line (and echoed, prefixed, to the test's output so
/// a failing test shows them).
pub struct Proc {
    pub name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        for pipe in [out, err] {
            let lines = Arc::clone(&lines);
            let name = name.to_string();
            // Ends at EOF, i.e. when the process (and anything holding its pipes) exits.
            thread::spawn(move || {
                let mut reader = BufReader::new(pipe);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                            eprintln!("[{name}] {line}");
                            lines.lock().unwrap().push(line);
                        }
                    }
                }
            });
        }
        Proc {
            name: name.to_string(),
            child,
            lines,
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every line printed so far, stdout and stderr interleaved.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn line_count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// The first line from index `from` on that matches, waiting up to `timeout`.
    pub fn wait_for_line(
        &mut self,
        from: usize,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .skip(from)
                .find(|l| pred(l))
            {
                return l.clone();
            }
            if let Some(st) = self.try_status() {
                // Give the reader threads a moment to drain the pipes, then look once more.
                thread::sleep(Duration::from_millis(100));
                if let Some(l) = self
                    .lines
                    .lock()
                    .unwrap()
                    .iter()
                    .skip(from)
                    .find(|l| pred(l))
                {
                    return l.clone();
                }
                panic!(
                    "{} exited ({st}) before printing {what}; output:\n{}",
                    self.name,
                    self.lines().join("\n")
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} did not print {what} within {timeout:?}; output:\n{}",
                    self.name,
                    self.lines().join("\n")
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: libc::c_int) {
        if self.status.is_some() {
            return;
        }
        // SAFETY: plain kill(2) on our own child, which we have not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(
            rc,
            0,
            "kill({}, {sig}) failed: {}",
            self.child.id(),
            std::io::Error::last_os_error()
        );
    }

    /// The exit status if the process has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    pub fn is_alive(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// Zone files
// ---------------------------------------------------------------------------

/// A zone file for `origin` ("test."): SOA with TTL 3600 and MINIMUM 3 (so
/// negative answers are cached 3 s), NS, then `records` (relative names).
pub fn zone_file(origin: &str, records: &str) -> String {
    format!(
        "$ORIGIN {origin}\n$TTL 3600\n\
         @ 3600 IN SOA ns.{origin} hostmaster.{origin} 1 7200 3600 1209600 3\n\
         @ 3600 IN NS ns.{origin}\n\
         ns 3600 IN A 192.0.2.53\n\
         {records}\n"
    )
}

/// Number of records in the `big.test.` TXT RRset.
pub const BIG_TXT_COUNT: usize = 45;
/// Number of records in the `mid.test.` TXT RRset.
pub const MID_TXT_COUNT: usize = 8;

/// The records of the standard `test.` zone. Addresses are documentation
/// addresses (192.0.2.0/24, 2001:db8::/32): data only, never contacted.
///
/// - `www` A 192.0.2.1 and AAAA 2001:db8::1, TTL 300
/// - `short` / `short2` A 192.0.2.2 / .4, TTL 2 (expire during a test)
/// - `pf` / `pf2` A 192.0.2.5 / .6, TTL 8 (prefetch window tests)
/// - `mail` MX 10 mx, `mx` A 192.0.2.3
/// - `alias` CNAME `alias2` CNAME `www` (a chain)
/// - `x.slow` A 192.0.2.30 (tests route `slow.test.` through a silent upstream first)
/// - `mid` TXT: 8 x ~100 bytes (~900 bytes: over 512, under 1232)
/// - `big` TXT: 45 x ~100 bytes (~5 KB: over 4096 too, so CoreDNS truncates
///   it over UDP whatever EDNS size nodens advertises up to 4096)
/// - `nothere`, `nope`, `poison`: absent (NXDOMAIN)
pub fn test_records() -> String {
    let mut s = String::from(
        "www 300 IN A 192.0.2.1\n\
         www 300 IN AAAA 2001:db8::1\n\
         short 2 IN A 192.0.2.2\n\
         short2 2 IN A 192.0.2.4\n\
         pf 8 IN A 192.0.2.5\n\
         pf2 8 IN A 192.0.2.6\n\
         mail 300 IN MX 10 mx\n\
         mx 300 IN A 192.0.2.3\n\
         alias 300 IN CNAME alias2\n\
         alias2 300 IN CNAME www\n\
         x.slow 300 IN A 192.0.2.30\n",
    );
    for i in 0..MID_TXT_COUNT {
        writeln!(s, "mid 300 IN TXT \"{i:02}{}\"", "m".repeat(98)).unwrap();
    }
    for i in 0..BIG_TXT_COUNT {
        writeln!(s, "big 300 IN TXT \"{i:02}{}\"", "b".repeat(98)).unwrap();
    }
    s
}

/// The standard `test.` zone plus `extra` records.
pub fn test_zone(extra: &str) -> String {
    zone_file("test.", &format!("{}{extra}\n", test_records()))
}

// ---------------------------------------------------------------------------
// CoreDNS
// ---------------------------------------------------------------------------

/// A real CoreDNS serving zone files with the `file` plugin and logging every
/// query with the `log` plugin, so tests can count what reached the upstream.
pub struct CoreDns {
    pub proc: Proc,
    pub addr: SocketAddr,
    origins: Vec<String>,
    sync_seq: AtomicU32,
    _dir: tempfile::TempDir,
}

/// One line of the CoreDNS query log.
#[derive(Debug, Clone)]
pub struct LoggedQuery {
    pub remote: String,
    pub id: u16,
    pub qtype: String,
    pub name: String,
    pub proto: String,
    pub line: String,
}

impl LoggedQuery {
    /// Parses `[INFO] 127.0.0.1:39913 - 2911 "A IN www.test. udp 41 false 1232" NOERROR ...`.
    pub fn parse(line: &str) -> Option<LoggedQuery> {
        let rest = line.split_once("[INFO] ")?.1;
        let (head, quoted) = rest.split_once('"')?;
        let quoted = quoted.split('"').next()?;
        let mut head = head.split_whitespace();
        let remote = head.next()?.to_string();
        let _dash = head.next()?;
        let id = head.next()?.parse().ok()?;
        let f: Vec<&str> = quoted.split_whitespace().collect();
        if f.len() < 4 {
            return None;
        }
        Some(LoggedQuery {
            remote,
            id,
            qtype: f[0].to_string(),
            name: f[2].to_string(),
            proto: f[3].to_string(),
            line: line.to_string(),
        })
    }
}

fn fqdn_lower(name: &str) -> String {
    let n = name.to_ascii_lowercase();
    if n.ends_with('.') { n } else { format!("{n}.") }
}

impl CoreDns {
    /// Starts CoreDNS on `addr` serving each `(origin, zone file text)` and
    /// waits until it answers.
    pub fn start(addr: SocketAddr, zones: &[(&str, String)]) -> CoreDns {
        let c = CoreDns::launch(&[], addr, zones);
        c.wait_ready();
        c
    }

    /// Starts CoreDNS serving the standard `test.` zone plus `extra` records.
    pub fn test_zone(addr: SocketAddr, extra: &str) -> CoreDns {
        CoreDns::start(addr, &[("test.", test_zone(extra))])
    }

    /// Starts CoreDNS, prefixed by `wrapper` (e.g. `ip netns exec NAME`),
    /// without waiting for it.
    pub fn launch(wrapper: &[&str], addr: SocketAddr, zones: &[(&str, String)]) -> CoreDns {
        CoreDns::launch_with_blocks(wrapper, addr, zones, &[])
    }

    /// Waits until CoreDNS answers a probe query (a name no test asks for).
    pub fn wait_ready(&self) {
        let probe = Q::new(&format!("_ready.{}", self.origins[0]), RecordType::TXT).to_bytes();
        wait_until(
            Duration::from_secs(15),
            &format!("CoreDNS on {} to answer", self.addr),
            || udp_exchange(self.addr, &probe, Duration::from_millis(200)).map(|_| ()),
        );
    }

    /// Every query CoreDNS logged so far.
    pub fn queries(&self) -> Vec<LoggedQuery> {
        self.proc
            .lines()
            .iter()
            .filter_map(|l| LoggedQuery::parse(l))
            .collect()
    }

    fn count(&self, name: &str, qtype: &str, proto: Option<&str>) -> usize {
        let name = fqdn_lower(name);
        self.queries()
            .iter()
            .filter(|q| {
                fqdn_lower(&q.name) == name
                    && q.qtype.eq_ignore_ascii_case(qtype)
                    && proto.is_none_or(|p| q.proto == p)
            })
            .count()
    }

    /// How many queries for `name`/`qtype` ("A", "TXT", ...) reached CoreDNS.
    pub fn count_queries(&self, name: &str, qtype: &str) -> usize {
        self.count(name, qtype, None)
    }

    /// How many of them came over TCP.
    pub fn count_tcp_queries(&self, name: &str, qtype: &str) -> usize {
        self.count(name, qtype, Some("tcp"))
    }

    /// Waits until at least `n` queries for `name`/`qtype` were logged; returns the count.
    pub fn wait_queries(&self, name: &str, qtype: &str, n: usize, timeout: Duration) -> usize {
        wait_until(
            timeout,
            &format!("{n} queries for {name} {qtype} at {}", self.addr),
            || {
                let c = self.count_queries(name, qtype);
                (c >= n).then_some(c)
            },
        )
    }

    /// A barrier on the query log: asks CoreDNS directly for a unique name and
    /// waits for its log line, so every query answered before this call has
    /// had time to be logged too. Use before asserting that a count did NOT grow.
    pub fn sync_log(&self) {
        let addr = self.addr;
        self.sync_log_via(|name| {
            let _ = udp_query_timeout(addr, &Q::new(name, RecordType::TXT), Duration::from_secs(2));
        });
    }

    /// [`CoreDns::sync_log`] for a CoreDNS the test cannot reach directly
    /// (in a network namespace): `send` must ask CoreDNS for `name` TXT.
    pub fn sync_log_via(&self, send: impl FnOnce(&str)) {
        let n = self.sync_seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("_sync{n}.{}", self.origins[0]);
        send(&name);
        self.wait_queries(&name, "TXT", 1, Duration::from_secs(5));
    }

    /// Kills CoreDNS: the upstream goes away (its port is then closed).
    pub fn stop(&mut self) {
        self.proc.kill();
    }
}

// ---------------------------------------------------------------------------
// Silent upstream
// ---------------------------------------------------------------------------

/// An upstream that never answers: a real UDP socket the test binds and does
/// not read until it wants to see what nodens sent it.
pub struct Silent {
    pub sock: UdpSocket,
    pub addr: SocketAddr,
}

impl Silent {
    pub fn bind(addr: SocketAddr) -> Silent {
        let sock = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        Silent { sock, addr }
    }

    /// The next datagram that arrived, waiting up to `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<(SocketAddr, Vec<u8>)> {
        self.sock.set_nonblocking(false).unwrap();
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = vec![0u8; 65535];
        match self.sock.recv_from(&mut buf) {
            Ok((n, from)) => Some((from, buf[..n].to_vec())),
            Err(_) => None,
        }
    }

    /// Every datagram queued so far, without waiting.
    pub fn drain(&self) -> Vec<(SocketAddr, Vec<u8>)> {
        self.sock.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65535];
        for _ in 0..100_000 {
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) => out.push((from, buf[..n].to_vec())),
                Err(_) => break,
            }
        }
        self.sock.set_nonblocking(false).unwrap();
        out
    }
}

// ---------------------------------------------------------------------------
// nodens
// ---------------------------------------------------------------------------

/// A configuration for nodens, built key by key so tests state only what they
/// care about. Defaults: listen on `net.nodens()`, one worker, metrics on
/// `net.metrics()`, debug logs, and prefetch OFF (so upstream query counts
/// are exact unless a test turns it on).
#[derive(Clone, Debug)]
pub struct Cfg {
    server: Vec<(String, String)>,
    cache: Vec<(String, String)>,
    metrics: Vec<(String, String)>,
    log: Vec<(String, String)>,
    zones: Vec<String>,
}

fn toml_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn set_kv(v: &mut Vec<(String, String)>, k: &str, val: String) {
    v.retain(|(key, _)| key != k);
    v.push((k.to_string(), val));
}

impl Cfg {
    pub fn new(net: Net) -> Cfg {
        Cfg {
            server: vec![
                (
                    "listen".into(),
                    format!("[{}]", toml_str(&net.nodens().to_string())),
                ),
                ("workers".into(), "1".into()),
            ],
            cache: vec![("prefetch_min_hits".into(), "0".into())],
            metrics: vec![("listen".into(), toml_str(&net.metrics().to_string()))],
            log: vec![("level".into(), toml_str("debug"))],
            zones: Vec::new(),
        }
    }

    pub fn listen(mut self, addrs: &[SocketAddr]) -> Cfg {
        let list: Vec<String> = addrs.iter().map(|a| toml_str(&a.to_string())).collect();
        set_kv(&mut self.server, "listen", format!("[{}]", list.join(", ")));
        self
    }
    /// `[server] key = value`, value in TOML syntax (`"1s"` with the quotes, `2`).
    pub fn server(mut self, key: &str, value: &str) -> Cfg {
        set_kv(&mut self.server, key, value.to_string());
        self
    }
    pub fn unset_server(mut self, key: &str) -> Cfg {
        self.server.retain(|(k, _)| k != key);
        self
    }
    pub fn cache(mut self, key: &str, value: &str) -> Cfg {
        set_kv(&mut self.cache, key, value.to_string());
        self
    }
    pub fn metrics_listen(mut self, addr: &str) -> Cfg {
        set_kv(&mut self.metrics, "listen", toml_str(addr));
        self
    }
    pub fn log_level(mut self, level: &str) -> Cfg {
        set_kv(&mut self.log, "level", toml_str(level));
        self
    }
    /// A `[[zone]]`; `extra` are more `key = value` lines (TOML syntax).
    pub fn zone(mut self, name: &str, upstreams: &[SocketAddr], extra: &[(&str, &str)]) -> Cfg {
        let ups: Vec<String> = upstreams.iter().map(|a| toml_str(&a.to_string())).collect();
        let mut z = format!(
            "[[zone]]\nname = {}\nupstreams = [{}]\n",
            toml_str(name),
            ups.join(", ")
        );
        for (k, v) in extra {
            writeln!(z, "{k} = {v}").unwrap();
        }
        self.zones.push(z);
        self
    }

    pub fn to_toml(&self) -> String {
        let mut s = String::new();
        for (section, kvs) in [
            ("server", &self.server),
            ("cache", &self.cache),
            ("metrics", &self.metrics),
            ("log", &self.log),
        ] {
            writeln!(s, "[{section}]").unwrap();
            for (k, v) in kvs {
                writeln!(s, "{k} = {v}").unwrap();
            }
            s.push('\n');
        }
        for z in &self.zones {
            s.push_str(z);
            s.push('\n');
        }
        s
    }
}

/// A running `nodens serve`, killed on drop.
pub struct Nodens {
    pub proc: Proc,
    pub config_path: PathBuf,
    /// The first listen address: where the DNS helpers send.
    pub dns: SocketAddr,
    /// The HTTP address, if metrics.listen is set.
    pub http: Option<SocketAddr>,
    _dir: tempfile::TempDir,
}

/// The first `server.listen` address and `metrics.listen` of a config text.
fn addresses_of(toml_text: &str) -> (SocketAddr, Option<SocketAddr>) {
    let table: toml::Table = toml_text.parse().expect("test config is valid TOML");
    let server = table.get("server").and_then(|s| s.as_table());
    let dns = server
        .and_then(|s| s.get("listen"))
        .and_then(|l| l.as_array())
        .and_then(|a| a.first())
        .and_then(|v| v.as_str())
        .map(|s| s.parse().expect("listen address with a port"))
        .unwrap_or_else(|| "127.0.0.1:1053".parse().unwrap());
    let http = match table
        .get("metrics")
        .and_then(|m| m.get("listen"))
        .and_then(|v| v.as_str())
    {
        Some("") => None,
        Some(s) => Some(s.parse().expect("metrics.listen")),
        None => Some("127.0.0.1:9253".parse().unwrap()),
    };
    (dns, http)
}

impl Nodens {
    /// Starts nodens with this configuration and waits for /ready.
    pub fn start(cfg: &Cfg) -> Nodens {
        Nodens::start_toml(&cfg.to_toml())
    }

    pub fn start_toml(toml_text: &str) -> Nodens {
        let mut n = Nodens::launch(toml_text, &[]);
        n.wait_ready();
        n
    }

    /// Writes the config and starts `[wrapper...] nodens serve --config FILE`
    /// without waiting for anything.
    pub fn launch(toml_text: &str, wrapper: &[&str]) -> Nodens {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("nodens.toml");
        std::fs::write(&config_path, toml_text).unwrap();
        let (dns, http) = addresses_of(toml_text);
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(nodens_bin());
                c
            }
            None => Command::new(nodens_bin()),
        };
        cmd.arg("serve").arg("--config").arg(&config_path);
        let proc = Proc::spawn(&format!("nodens {dns}"), cmd);
        Nodens {
            proc,
            config_path,
            dns,
            http,
            _dir: dir,
        }
    }

    fn http_addr(&self) -> SocketAddr {
        self.http.expect("this nodens has no metrics.listen")
    }

    /// Waits until GET /ready answers 200 (panics early if nodens exits).
    pub fn wait_ready(&mut self) {
        let addr = self.http_addr();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok((200, _)) = http_get(addr, "/ready") {
                return;
            }
            if let Some(st) = self.proc.try_status() {
                thread::sleep(Duration::from_millis(100));
                panic!(
                    "nodens exited ({st}) before /ready; output:\n{}",
                    self.proc.lines().join("\n")
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "nodens not ready on {addr} after 20 s; output:\n{}",
                    self.proc.lines().join("\n")
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Rewrites the config file (atomically, by rename) and sends SIGHUP.
    pub fn reload(&self, toml_text: &str) {
        let tmp = self.config_path.with_extension("toml.new");
        std::fs::write(&tmp, toml_text).unwrap();
        std::fs::rename(&tmp, &self.config_path).unwrap();
        self.proc.signal(libc::SIGHUP);
    }

    /// Sends SIGTERM and waits (up to 20 s) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.proc.signal(libc::SIGTERM);
        self.proc
            .wait_exit(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("nodens still running 20 s after SIGTERM"))
    }

    pub fn assert_alive(&mut self) {
        if let Some(st) = self.proc.try_status() {
            panic!(
                "nodens died ({st}); output:\n{}",
                self.proc.lines().join("\n")
            );
        }
    }

    /// The `server` label of this instance's DNS metrics: `dns://IP:PORT`.
    pub fn server_label(&self) -> String {
        format!("dns://{}", self.dns)
    }

    pub fn metrics_text(&self) -> String {
        let (code, body) = http_get(self.http_addr(), "/metrics").expect("GET /metrics");
        assert_eq!(code, 200, "GET /metrics: {body}");
        body
    }

    /// The sum of every series of `name` whose labels include `labels`.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        sum_metric(&parse_metrics(&self.metrics_text()), name, labels)
    }

    /// Waits until `metric(name, labels) >= at_least`; returns the value.
    pub fn wait_metric(&self, name: &str, labels: &[(&str, &str)], at_least: f64) -> f64 {
        wait_until(
            Duration::from_secs(5),
            &format!("{name}{labels:?} >= {at_least}"),
            || {
                let v = self.metric(name, labels);
                (v >= at_least).then_some(v)
            },
        )
    }

    /// The worker count from the `workers=N` startup line.
    pub fn wait_workers(&mut self, timeout: Duration) -> usize {
        let line = self
            .proc
            .wait_for_line(0, timeout, "a workers=N line", |l| l.contains("workers="));
        let digits: String = line
            .split("workers=")
            .nth(1)
            .unwrap()
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("no number after workers= in {line:?}"))
    }
}

// ---------------------------------------------------------------------------
// HTTP and metrics
// ---------------------------------------------------------------------------

/// A plain HTTP/1.0 GET (so the server closes the connection and needs no
/// chunking): (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                ErrorKind::InvalidData,
                format!("bad HTTP response: {head:?}"),
            )
        })?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((code, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    for _ in 0..100_000 {
        let Some((size, rest)) = s.split_once("\r\n") else {
            break;
        };
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One sample of the Prometheus text format.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
}

pub fn parse_metrics(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_sample)
        .collect()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (name, labels, rest) = match line.find('{') {
        Some(i) if line[..i].find(' ').is_none() => {
            let (labels, rest) = parse_labels(&line[i + 1..])?;
            (line[..i].to_string(), labels, rest)
        }
        _ => {
            let (n, rest) = line.split_once(' ')?;
            (n.to_string(), Vec::new(), rest)
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the labels and what follows the `}`.
fn parse_labels(s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    loop {
        while i < b.len() && (b[i] == b',' || b[i] == b' ') {
            i += 1;
        }
        if i < b.len() && b[i] == b'}' {
            return Some((labels, &s[i + 1..]));
        }
        let eq = s[i..].find('=')? + i;
        let key = s[i..eq].trim().to_string();
        i = eq + 1;
        if b.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        let mut val = String::new();
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' && i + 1 < b.len() {
                val.push(match b[i + 1] {
                    b'n' => '\n',
                    c => c as char,
                });
                i += 2;
            } else {
                let ch = s[i..].chars().next()?;
                val.push(ch);
                i += ch.len_utf8();
            }
        }
        i += 1;
        labels.push((key, val));
    }
}

/// The sum over every series of `name` whose labels include all of `labels`
/// (0 if there is none), so tests assert only the labels they care about.
pub fn sum_metric(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

// ---------------------------------------------------------------------------
// DNS client
// ---------------------------------------------------------------------------

/// A query to build: name (case kept as given), type, ID, EDNS.
#[derive(Clone, Debug)]
pub struct Q {
    pub id: u16,
    pub name: String,
    pub qtype: RecordType,
    /// EDNS UDP size; None sends no OPT record.
    pub edns: Option<u16>,
    pub dnssec_ok: bool,
    pub checking_disabled: bool,
}

impl Q {
    /// A query with a random ID, RD set and EDNS 1232.
    pub fn new(name: &str, qtype: RecordType) -> Q {
        Q {
            id: random_u64() as u16,
            name: name.to_string(),
            qtype,
            edns: Some(1232),
            dnssec_ok: false,
            checking_disabled: false,
        }
    }
    pub fn id(mut self, id: u16) -> Q {
        self.id = id;
        self
    }
    pub fn no_edns(mut self) -> Q {
        self.edns = None;
        self
    }
    pub fn edns(mut self, size: u16) -> Q {
        self.edns = Some(size);
        self
    }
    pub fn dnssec_ok(mut self) -> Q {
        self.dnssec_ok = true;
        self
    }
    pub fn cd(mut self) -> Q {
        self.checking_disabled = true;
        self
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(self.id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .set_checking_disabled(self.checking_disabled);
        m.add_query(Query::query(
            Name::from_ascii(&self.name).expect("query name"),
            self.qtype,
        ));
        if let Some(size) = self.edns {
            let mut e = Edns::new();
            e.set_max_payload(size);
            e.set_dnssec_ok(self.dnssec_ok);
            m.set_edns(e);
        }
        m.to_vec().expect("encode query")
    }
}

/// A parsed answer with its raw bytes (for what the parser would hide: exact
/// question bytes, the OPT record, sizes).
#[derive(Clone, Debug)]
pub struct Reply {
    pub raw: Vec<u8>,
    pub msg: Message,
    pub elapsed: Duration,
}

impl Reply {
    pub fn parse(raw: Vec<u8>, elapsed: Duration) -> Reply {
        let msg = Message::from_vec(&raw)
            .unwrap_or_else(|e| panic!("unparsable reply ({e}): {raw:02x?}"));
        Reply { raw, msg, elapsed }
    }
    pub fn id(&self) -> u16 {
        self.msg.id()
    }
    /// The full RCODE (extended bits from the OPT record included).
    pub fn rcode(&self) -> u16 {
        RawMsg::parse(&self.raw).expect("raw parse").rcode()
    }
    pub fn tc(&self) -> bool {
        self.msg.truncated()
    }
    pub fn opt(&self) -> Option<RawOpt> {
        RawMsg::parse(&self.raw).expect("raw parse").opt
    }
    /// The IPv4 addresses in the answer section.
    pub fn a(&self) -> Vec<Ipv4Addr> {
        self.msg
            .answers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect()
    }
    pub fn answers_of(&self, t: RecordType) -> Vec<&Record> {
        self.msg
            .answers()
            .iter()
            .filter(|r| r.record_type() == t)
            .collect()
    }
    pub fn ttls(&self) -> Vec<u32> {
        self.msg.answers().iter().map(|r| r.ttl()).collect()
    }
    /// The answer section as comparable text, TTLs left out.
    pub fn answer_set(&self) -> BTreeSet<String> {
        rrset_text(self.msg.answers())
    }
    pub fn authority_set(&self) -> BTreeSet<String> {
        rrset_text(self.msg.name_servers())
    }
    /// The question section exactly as sent on the wire.
    pub fn question_bytes(&self) -> Vec<u8> {
        question_bytes(&self.raw)
    }
}

fn rrset_text(records: &[Record]) -> BTreeSet<String> {
    records
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r.name().to_ascii().to_ascii_lowercase(),
                r.dns_class(),
                r.record_type(),
                r.data()
            )
        })
        .collect()
}

/// The bytes of the first question of a message (empty if none).
pub fn question_bytes(raw: &[u8]) -> Vec<u8> {
    if raw.len() < 12 || u16::from_be_bytes([raw[4], raw[5]]) == 0 {
        return Vec::new();
    }
    match skip_name(raw, 12) {
        Some(end) if end + 4 <= raw.len() => raw[12..end + 4].to_vec(),
        _ => Vec::new(),
    }
}

/// The first question of a message as (lower-cased name, type), e.g. of a
/// query nodens sent to a silent upstream.
pub fn question_of(raw: &[u8]) -> Option<(String, RecordType)> {
    let m = Message::from_vec(raw).ok()?;
    let q = m.queries().first()?;
    Some((q.name().to_ascii().to_ascii_lowercase(), q.query_type()))
}

fn client_socket(server: SocketAddr) -> UdpSocket {
    let local: SocketAddr = if server.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    }
    .parse()
    .unwrap();
    UdpSocket::bind(local).unwrap()
}

/// Sends one datagram from a fresh socket and returns the first datagram
/// back, or None after `timeout`.
pub fn udp_exchange(server: SocketAddr, packet: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let sock = client_socket(server);
    sock.send_to(packet, server).ok()?;
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 65535];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match sock.recv_from(&mut buf) {
            Ok((n, from)) if from == server => return Some(buf[..n].to_vec()),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(_) => return None, // e.g. ECONNREFUSED from an ICMP error
        }
    }
}

/// A query over UDP; None on timeout.
pub fn udp_query_timeout(server: SocketAddr, q: &Q, timeout: Duration) -> Option<Reply> {
    let start = Instant::now();
    udp_exchange(server, &q.to_bytes(), timeout).map(|raw| Reply::parse(raw, start.elapsed()))
}

/// A query over UDP, answered within 5 s or the test fails.
pub fn udp_query(server: SocketAddr, q: &Q) -> Reply {
    udp_query_timeout(server, q, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no UDP answer from {server} to {q:?}"))
}

/// A single query over a fresh TCP connection.
pub fn tcp_query(server: SocketAddr, q: &Q) -> Reply {
    let start = Instant::now();
    let mut c = Tcp::connect(server);
    c.send(&q.to_bytes()).expect("TCP send");
    match c.recv(Duration::from_secs(5)) {
        TcpRead::Msg(raw) => Reply::parse(raw, start.elapsed()),
        other => panic!("no TCP answer from {server} to {q:?}: {other:?}"),
    }
}

/// What reading a TCP DNS connection gave.
#[derive(Debug)]
pub enum TcpRead {
    Msg(Vec<u8>),
    /// EOF or reset: the server closed the connection.
    Closed,
    Timeout,
}

/// A client TCP connection with RFC 1035 two-byte length framing.
pub struct Tcp {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Tcp {
    pub fn connect(server: SocketAddr) -> Tcp {
        let stream = TcpStream::connect_timeout(&server, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("connect {server}: {e}"));
        stream.set_nodelay(true).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Tcp {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends one framed message.
    pub fn send(&mut self, msg: &[u8]) -> std::io::Result<()> {
        let mut framed = (msg.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(msg);
        self.stream.write_all(&framed)
    }

    /// Sends bytes as they are (several frames in one write, broken frames).
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// The next framed message, waiting up to `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> TcpRead {
        let deadline = Instant::now() + timeout;
        let mut chunk = [0u8; 65536];
        loop {
            if self.buf.len() >= 2 {
                let len = u16::from_be_bytes([self.buf[0], self.buf[1]]) as usize;
                if self.buf.len() >= 2 + len {
                    let msg = self.buf[2..2 + len].to_vec();
                    self.buf.drain(..2 + len);
                    return TcpRead::Msg(msg);
                }
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return TcpRead::Timeout;
            };
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match self.stream.read(&mut chunk) {
                Ok(0) => return TcpRead::Closed,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return TcpRead::Timeout;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return TcpRead::Closed,
            }
        }
    }

    /// Waits for the server to close the connection; returns how long it took,
    /// or None if it is still open after `timeout`. Messages are discarded.
    pub fn wait_closed(&mut self, timeout: Duration) -> Option<Duration> {
        let start = Instant::now();
        loop {
            let left = timeout.checked_sub(start.elapsed())?;
            match self.recv(left) {
                TcpRead::Closed => return Some(start.elapsed()),
                TcpRead::Timeout => return None,
                TcpRead::Msg(_) => continue,
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Raw wire parsing (for replies to malformed queries, and the OPT record)
// ---------------------------------------------------------------------------

/// The OPT pseudo-record of a message.
#[derive(Clone, Debug)]
pub struct RawOpt {
    pub udp_size: u16,
    pub ext_rcode: u8,
    pub version: u8,
    pub flags: u16,
    /// (option code, data)
    pub options: Vec<(u16, Vec<u8>)>,
}

impl RawOpt {
    /// The INFO-CODEs of the Extended DNS Error options (RFC 8914, option code 15).
    pub fn ede_codes(&self) -> Vec<u16> {
        self.options
            .iter()
            .filter(|(code, data)| *code == 15 && data.len() >= 2)
            .map(|(_, data)| u16::from_be_bytes([data[0], data[1]]))
            .collect()
    }
}

/// A message parsed by hand: the header, and the OPT record if any.
#[derive(Clone, Debug)]
pub struct RawMsg {
    pub id: u16,
    pub flags: u16,
    pub qdcount: u16,
    pub ancount: u16,
    pub nscount: u16,
    pub arcount: u16,
    pub opt: Option<RawOpt>,
}

impl RawMsg {
    pub fn parse(raw: &[u8]) -> Option<RawMsg> {
        if raw.len() < 12 {
            return None;
        }
        let u16_at = |i: usize| u16::from_be_bytes([raw[i], raw[i + 1]]);
        let mut m = RawMsg {
            id: u16_at(0),
            flags: u16_at(2),
            qdcount: u16_at(4),
            ancount: u16_at(6),
            nscount: u16_at(8),
            arcount: u16_at(10),
            opt: None,
        };
        let mut pos = 12;
        for _ in 0..m.qdcount {
            pos = skip_name(raw, pos)? + 4;
        }
        let records = m.ancount as usize + m.nscount as usize + m.arcount as usize;
        for i in 0..records {
            let name_start = pos;
            pos = skip_name(raw, pos)?;
            if pos + 10 > raw.len() {
                return None;
            }
            let rtype = u16::from_be_bytes([raw[pos], raw[pos + 1]]);
            let class = u16::from_be_bytes([raw[pos + 2], raw[pos + 3]]);
            let ttl = u32::from_be_bytes([raw[pos + 4], raw[pos + 5], raw[pos + 6], raw[pos + 7]]);
            let rdlen = u16::from_be_bytes([raw[pos + 8], raw[pos + 9]]) as usize;
            let rdata = raw.get(pos + 10..pos + 10 + rdlen)?;
            pos += 10 + rdlen;
            let in_additional = i >= m.ancount as usize + m.nscount as usize;
            if in_additional && rtype == 41 {
                if m.opt.is_some() || raw[name_start] != 0 {
                    return None; // not a well-formed reply
                }
                let mut options = Vec::new();
                let mut o = 0;
                while o + 4 <= rdata.len() {
                    let code = u16::from_be_bytes([rdata[o], rdata[o + 1]]);
                    let len = u16::from_be_bytes([rdata[o + 2], rdata[o + 3]]) as usize;
                    options.push((code, rdata.get(o + 4..o + 4 + len)?.to_vec()));
                    o += 4 + len;
                }
                m.opt = Some(RawOpt {
                    udp_size: class,
                    ext_rcode: (ttl >> 24) as u8,
                    version: (ttl >> 16) as u8,
                    flags: ttl as u16,
                    options,
                });
            }
        }
        Some(m)
    }
    pub fn qr(&self) -> bool {
        self.flags & 0x8000 != 0
    }
    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xf) as u8
    }
    pub fn tc(&self) -> bool {
        self.flags & 0x0200 != 0
    }
    /// The full RCODE, with the OPT record's upper 8 bits.
    pub fn rcode(&self) -> u16 {
        let high = self.opt.as_ref().map_or(0, |o| u16::from(o.ext_rcode));
        (high << 4) | (self.flags & 0xf)
    }
}

/// The offset just past the name at `pos` (a pointer ends the name).
fn skip_name(raw: &[u8], mut pos: usize) -> Option<usize> {
    for _ in 0..128 {
        let len = *raw.get(pos)?;
        match len & 0xc0 {
            0x00 if len == 0 => return Some(pos + 1),
            0x00 => pos += 1 + len as usize,
            0xc0 => {
                raw.get(pos + 1)?;
                return Some(pos + 2);
            }
            _ => return None,
        }
    }
    None
}

/// RCODE values used by the tests.
pub mod rcode {
    pub const NOERROR: u16 = 0;
    pub const FORMERR: u16 = 1;
    pub const SERVFAIL: u16 = 2;
    pub const NXDOMAIN: u16 = 3;
    pub const NOTIMP: u16 = 4;
    pub const REFUSED: u16 = 5;
    pub const BADVERS: u16 = 16;
}

pub fn ipv4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

// ---------------------------------------------------------------------------
// Upstream TCP pool helpers (upstream_pool.rs, upstream_faults.rs)
// ---------------------------------------------------------------------------

/// The address CoreDNS's `erratic` plugin answers every A query with (TTL 0).
pub const ERRATIC_A: &str = "192.0.2.53";

impl CoreDns {
    /// [`CoreDns::launch`] plus more server blocks on the same address, each
    /// `(origin, directives)`; every block also gets `bind`, `log` and
    /// `errors`. For plugins that are not zone files: `erratic`, `whoami`.
    /// The first of `zones` is used for the readiness probe and sync_log.
    pub fn launch_with_blocks(
        wrapper: &[&str],
        addr: SocketAddr,
        zones: &[(&str, String)],
        blocks: &[(&str, &str)],
    ) -> CoreDns {
        let dir = tempfile::tempdir().unwrap();
        let mut corefile = String::new();
        for (i, (origin, text)) in zones.iter().enumerate() {
            let path = dir.path().join(format!("db.{i}"));
            std::fs::write(&path, text).unwrap();
            writeln!(
                corefile,
                "{origin}:{port} {{\n  bind {ip}\n  file {path}\n  log\n  errors\n}}",
                port = addr.port(),
                ip = addr.ip(),
                path = path.display(),
            )
            .unwrap();
        }
        for (origin, directives) in blocks {
            writeln!(
                corefile,
                "{origin}:{port} {{\n  bind {ip}\n  {directives}\n  log\n  errors\n}}",
                port = addr.port(),
                ip = addr.ip(),
            )
            .unwrap();
        }
        let conf = dir.path().join("Corefile");
        std::fs::write(&conf, &corefile).unwrap();
        let bin = coredns_bin();
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        cmd.arg("-conf").arg(&conf).current_dir(dir.path());
        let proc = Proc::spawn(&format!("coredns {addr}"), cmd);
        CoreDns {
            proc,
            addr,
            origins: zones.iter().map(|(o, _)| fqdn_lower(o)).collect(),
            sync_seq: AtomicU32::new(0),
            _dir: dir,
        }
    }

    /// [`CoreDns::launch_with_blocks`], waiting until it answers.
    pub fn start_with_blocks(
        addr: SocketAddr,
        zones: &[(&str, String)],
        blocks: &[(&str, &str)],
    ) -> CoreDns {
        let c = CoreDns::launch_with_blocks(&[], addr, zones, blocks);
        c.wait_ready();
        c
    }

    /// The standard `test.` zone plus `delay.test.`, served by the `erratic`
    /// plugin: every A query under it is answered with [`ERRATIC_A`] (TTL 0,
    /// so nothing is cached) after sleeping `delay` ("100ms") in the handler.
    /// CoreDNS serves one query at a time per TCP connection (miekg/dns
    /// reads the next query only after answering the previous one), so a
    /// TCP connection to it carries at most one query per `delay`.
    pub fn test_zone_delayed(addr: SocketAddr, delay: &str) -> CoreDns {
        let erratic = format!("erratic {{\n    delay 1 {delay}\n  }}");
        CoreDns::start_with_blocks(
            addr,
            &[("test.", test_zone(""))],
            &[("delay.test.", &erratic)],
        )
    }
}

/// One TCP connection as `ss -tn` shows it.
#[derive(Clone, Debug)]
pub struct SsConn {
    /// Bytes received and not yet read by the owning process.
    pub recv_q: u64,
    pub send_q: u64,
    pub local: String,
    pub peer: String,
}

/// The ESTABLISHED TCP connections whose local end is `local` (for a server,
/// the connections it has accepted), from `ss -Htn state established src
/// LOCAL`. `wrapper` runs ss elsewhere (`ip netns exec NAME`).
pub fn ss_established_via(wrapper: &[&str], local: SocketAddr) -> Vec<SsConn> {
    let ss = tool("ss");
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&ss);
            c
        }
        None => Command::new(&ss),
    };
    cmd.args(["-Htn", "state", "established", "src", &local.to_string()]);
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4).then(|| SsConn {
                recv_q: f[0].parse().unwrap_or(0),
                send_q: f[1].parse().unwrap_or(0),
                local: f[2].to_string(),
                peer: f[3].to_string(),
            })
        })
        .collect()
}

/// [`ss_established_via`] in this network namespace.
pub fn ss_established(local: SocketAddr) -> Vec<SsConn> {
    ss_established_via(&[], local)
}

/// Runs `work` while another thread calls `sample` every `every` (and once
/// more after `work` returns); returns work's result and the samples with
/// their time since the start. Sampling stops after 120 s whatever happens.
pub fn sample_during<T: Send, R>(
    every: Duration,
    mut sample: impl FnMut() -> T + Send,
    work: impl FnOnce() -> R,
) -> (R, Vec<(Duration, T)>) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let start = Instant::now();
    thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut v = Vec::new();
            loop {
                let done = stop.load(Ordering::SeqCst);
                v.push((start.elapsed(), sample()));
                if done || start.elapsed() > Duration::from_secs(120) {
                    return v;
                }
                thread::sleep(every);
            }
        });
        let r = work();
        stop.store(true, Ordering::SeqCst);
        (r, sampler.join().expect("sampler thread"))
    })
}

/// Calls `f(0..n)` on `n` threads at once; the results in index order.
pub fn in_parallel<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let f = &f;
    thread::scope(|s| {
        let handles: Vec<_> = (0..n).map(|i| s.spawn(move || f(i))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("query thread"))
            .collect()
    })
}

/// True if `/metrics` has a series `name` with all of `labels`.
pub fn has_series(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> bool {
    samples
        .iter()
        .any(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
}

impl Nodens {
    /// Waits (up to 5 s) until the pool of every upstream in `tos` ("IP:port")
    /// is idle: `nodens_upstream_tcp_connections{state="busy"}`,
    /// `nodens_upstream_queue_length` and `nodens_upstream_inflight` all 0.
    /// Each of the three must be exported for that upstream: a missing
    /// series fails, it does not count as 0.
    pub fn wait_pool_idle(&self, tos: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let m = parse_metrics(&self.metrics_text());
            let mut bad = Vec::new();
            for to in tos {
                for (name, extra) in [
                    ("nodens_upstream_tcp_connections", Some(("state", "busy"))),
                    ("nodens_upstream_queue_length", None),
                    ("nodens_upstream_inflight", None),
                ] {
                    if !has_series(&m, name, &[("to", to)]) {
                        bad.push(format!("{name}{{to=\"{to}\"}} is not exported"));
                        continue;
                    }
                    let mut labels = vec![("to", *to)];
                    labels.extend(extra);
                    let v = sum_metric(&m, name, &labels);
                    if v != 0.0 {
                        bad.push(format!("{name}{labels:?} = {v}"));
                    }
                }
            }
            if bad.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "upstream pool not idle 5 s after the traffic: {}",
                    bad.join("; ")
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}
