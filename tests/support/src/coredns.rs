//! A real CoreDNS as the upstream: started from generated zone files and a
//! Corefile, with its query log parsed so tests can count what reached it.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::dns::{Q, Rt, udp_exchange, udp_query_timeout};
use super::proc::Proc;
use super::tools::{coredns_bin, wrapped_command};
use super::wait::wait_until;
use super::zone::test_zone;

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
    /// Every query a CoreDNS process with the `log` plugin logged so far.
    pub fn all_of(proc: &Proc) -> Vec<LoggedQuery> {
        proc.lines()
            .iter()
            .filter_map(|l| LoggedQuery::parse(l))
            .collect()
    }

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
        let probe = Q::new(&format!("_ready.{}", self.origins[0]), Rt::TXT).to_bytes();
        wait_until(
            Duration::from_secs(15),
            &format!("CoreDNS on {} to answer", self.addr),
            || udp_exchange(self.addr, &probe, Duration::from_millis(200)).map(|_| ()),
        );
    }

    /// Every query CoreDNS logged so far.
    pub fn queries(&self) -> Vec<LoggedQuery> {
        LoggedQuery::all_of(&self.proc)
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
    /// waits for its log line, and [`LOG_SETTLE`] more, so every query
    /// answered before this call has had time to be logged too.
    pub fn sync_log(&self) {
        let addr = self.addr;
        self.sync_log_via(|name| {
            let _ = udp_query_timeout(addr, &Q::new(name, Rt::TXT), Duration::from_secs(2));
        });
    }

    /// [`CoreDns::sync_log`] for a CoreDNS the test cannot reach directly
    /// (in a network namespace): `send` must ask CoreDNS for `name` TXT.
    pub fn sync_log_via(&self, send: impl FnOnce(&str)) {
        let n = self.sync_seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("_sync{n}.{}", self.origins[0]);
        send(&name);
        self.wait_queries(&name, "TXT", 1, Duration::from_secs(5));
        std::thread::sleep(LOG_SETTLE);
    }

    /// Kills CoreDNS: the upstream goes away (its port is then closed).
    pub fn stop(&mut self) {
        self.proc.kill();
    }
}

pub const ERRATIC_A: &str = "192.0.2.53";

/// CoreDNS logs a query from the goroutine that answered it, after the
/// answer left: on a busy machine the line of a query answered just before
/// a barrier's own can come just after it (its goroutine descheduled in
/// between). A log barrier waits this long after its own line.
pub const LOG_SETTLE: Duration = Duration::from_millis(100);

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
        let mut cmd = wrapped_command(wrapper, &bin);
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
