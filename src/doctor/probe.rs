//! Live probes of the nameservers: latency over UDP and TCP, the search
//! expansions' answers, negative caching, a TCP concurrency ramp, TC and
//! the server's identity. Bounded in count and time, and sent only to the
//! servers of resolv.conf or those given with `--server`.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

use super::client::{self, Question, Reply, Transport, ask, ask_on};
use super::resolver::{ResolvConf, Sample};
use super::{Finding, Severity};
use crate::stub::{Stub, walk};
use crate::wire::{class, rtype};

mod checks;

use checks::{negative_caching, tcp_ramp, truncation};

const UDP_PROBES: usize = 20;
const TCP_PROBES: usize = 10;
/// How long one probe waits: far above any healthy answer, far below the
/// 5 s a pod waits.
const DEADLINE: Duration = Duration::from_secs(1);
/// Between two identical negative queries: long enough for a cached TTL
/// to count down by one second.
const NEGATIVE_GAP: Duration = Duration::from_millis(1100);
/// Above this median the server is slow for a cache.
const SLOW_MEDIAN: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub servers: Vec<SocketAddr>,
    /// A name whose answer is over 512 bytes (for the TC check).
    pub tc_name: Option<String>,
    /// Most TCP connections the ramp holds open.
    pub tcp_max: usize,
}

/// The servers to probe: those given (`IP` or `IP:PORT`, `[v6]:PORT`),
/// else resolv.conf's first three.
pub fn servers(given: &[String], resolv: &ResolvConf) -> Result<Vec<SocketAddr>, BadServer> {
    if given.is_empty() {
        return Ok(resolv.nameservers.iter().take(3).copied().collect());
    }
    given
        .iter()
        .map(|s| {
            s.parse::<SocketAddr>()
                .or_else(|_| s.parse().map(|ip| SocketAddr::new(ip, 53)))
                .map_err(|_| BadServer(s.clone()))
        })
        .collect()
}

/// A `--server` that is no address.
#[derive(Debug, thiserror::Error)]
#[error("--server {0}: not an IP or IP:PORT")]
pub struct BadServer(pub String);

/// What the probes found.
pub(crate) struct Probed {
    pub lines: Vec<String>,
    pub findings: Vec<Finding>,
    /// A server answered the search expansions by autopath.
    pub autopath: bool,
}

/// Runs every probe against every server, one server after the other.
pub(crate) fn run(options: &ProbeOptions, resolv: &ResolvConf, samples: &[Sample]) -> Probed {
    let runtime = client::runtime();
    let mut probed = Probed {
        lines: Vec::new(),
        findings: Vec::new(),
        autopath: false,
    };
    for &server in &options.servers {
        runtime.block_on(probe_server(server, options, resolv, samples, &mut probed));
    }
    if options.servers.is_empty() {
        probed.lines.push("no server to probe".into());
    }
    probed
}

/// The name the latency probes ask: one that exists, so that a cache
/// answers it from memory after the first time.
fn probe_name(resolv: &ResolvConf, samples: &[Sample]) -> String {
    match resolv.cluster() {
        Some((_, zone)) => format!("kubernetes.default.svc.{zone}"),
        None => samples
            .first()
            .map_or("example.com".into(), |s| s.exists_as.clone()),
    }
}

async fn probe_server(
    server: SocketAddr,
    options: &ProbeOptions,
    resolv: &ResolvConf,
    samples: &[Sample],
    probed: &mut Probed,
) {
    let lines = &mut probed.lines;
    let findings = &mut probed.findings;
    lines.push(format!("server {server}"));
    identity(server, lines).await;

    let name = probe_name(resolv, samples);
    let question = match Question::new(&name, rtype::A) {
        Ok(q) => q,
        Err(e) => {
            lines.push(format!("  cannot probe: {e}"));
            return;
        }
    };
    let udp = latency(server, &question, Transport::Udp, UDP_PROBES).await;
    lines.push(format!("  UDP {}", udp.summary(&name)));
    let tcp = latency(server, &question, Transport::Tcp, TCP_PROBES).await;
    lines.push(format!("  TCP {}", tcp.summary(&name)));
    findings.extend(udp.findings(server, "UDP", resolv));
    findings.extend(tcp.findings(server, "TCP", resolv));
    if udp.answered() == 0 && tcp.answered() == 0 {
        findings.push(
            Finding::new(
                "server-unreachable",
                Severity::Critical,
                format!("{server} answers neither UDP nor TCP"),
            )
            .evidence(format!("{UDP_PROBES} UDP and {TCP_PROBES} TCP queries for {name}: {}", udp.first_error()))
            .fix("Check that the server runs and listens on this address (for a node cache: its interface and rules, `nodens node status`)."),
        );
        return;
    }

    if let Some(sample) = samples.iter().find(|s| s.kind == super::resolver::EXTERNAL) {
        findings.extend(expansions(server, resolv, sample, lines, &mut probed.autopath).await);
    }
    findings.extend(negative_caching(server, resolv, samples, lines).await);
    findings.extend(tcp_ramp(server, &question, options.tcp_max, lines).await);
    if let Some(tc_name) = &options.tc_name {
        findings.extend(truncation(server, tc_name, lines).await);
    } else {
        lines.push(
            "  TC: not checked (--tc-name NAME with an answer over 512 bytes checks it)".into(),
        );
    }
}

/// CHAOS TXT `id.server` and `version.bind`: who answers.
async fn identity(server: SocketAddr, lines: &mut Vec<String>) {
    let mut said = Vec::new();
    for what in ["id.server", "version.bind"] {
        let mut q = Question::new(what, rtype::TXT).expect("a valid name");
        q.qclass = class::CH;
        if let Ok(reply) = ask(server, &q, Transport::Udp, DEADLINE).await
            && reply.rcode == 0
            && let Some(text) = reply.texts.first()
        {
            said.push(format!("{what} \"{text}\""));
        }
    }
    let node_cache = said.iter().any(|s| s.contains("\"nodens"));
    lines.push(match (said.is_empty(), node_cache) {
        (true, _) => "  identity: no answer to CHAOS id.server or version.bind".into(),
        (false, true) => format!("  identity: {} (a nodens node cache)", said.join(", ")),
        (false, false) => format!("  identity: {}", said.join(", ")),
    });
}

/// Latencies of `count` queries of one name, one after the other.
struct Latency {
    transport: Transport,
    count: usize,
    times: Vec<Duration>,
    errors: Vec<String>,
    timeouts: usize,
}

async fn latency(server: SocketAddr, q: &Question, transport: Transport, count: usize) -> Latency {
    let mut l = Latency {
        transport,
        count,
        times: Vec::new(),
        errors: Vec::new(),
        timeouts: 0,
    };
    for _ in 0..count {
        match ask(server, q, transport, DEADLINE).await {
            Ok(reply) => l.times.push(reply.latency),
            Err(client::QueryError::Timeout(_)) => l.timeouts += 1,
            Err(e) => l.errors.push(e.to_string()),
        }
    }
    l.times.sort();
    l
}

impl Latency {
    fn answered(&self) -> usize {
        self.times.len()
    }

    fn percentile(&self, p: usize) -> Duration {
        let i = (self.times.len() * p).div_ceil(100).saturating_sub(1);
        self.times[i.min(self.times.len() - 1)]
    }

    fn first_error(&self) -> String {
        self.errors
            .first()
            .cloned()
            .unwrap_or_else(|| format!("no answer within {DEADLINE:?}"))
    }

    fn summary(&self, name: &str) -> String {
        if self.times.is_empty() {
            return format!(
                "{} queries for {name}: none answered ({})",
                self.count,
                self.first_error()
            );
        }
        format!(
            "{} queries for {name}: p50 {} p90 {} p99 {} max {}, {} timeout{}{}",
            self.count,
            ms(self.percentile(50)),
            ms(self.percentile(90)),
            ms(self.percentile(99)),
            ms(*self.times.last().unwrap()),
            self.timeouts,
            if self.timeouts == 1 { "" } else { "s" },
            if self.errors.is_empty() {
                String::new()
            } else {
                format!(", {} errors ({})", self.errors.len(), self.errors[0])
            },
        )
    }

    fn findings(&self, server: SocketAddr, transport: &str, resolv: &ResolvConf) -> Vec<Finding> {
        let mut findings = Vec::new();
        let failed = self.timeouts + self.errors.len();
        if failed > 0 && self.answered() > 0 {
            findings.push(
                Finding::new(
                    if self.transport == Transport::Udp { "udp-loss" } else { "tcp-loss" },
                    Severity::Critical,
                    format!("{server} left {failed} of {} {transport} queries unanswered", self.count),
                )
                .evidence(format!(
                    "{} timed out after {DEADLINE:?}, {} failed{}",
                    self.timeouts,
                    self.errors.len(),
                    self.errors.first().map(|e| format!(" ({e})")).unwrap_or_default()
                ))
                .evidence(format!(
                    "a pod's resolver waits timeout:{} s before it asks again: each lost query is a {}-second lookup",
                    resolv.stub.timeout, resolv.stub.timeout
                ))
                .fix("Look for conntrack insert failures (node checks below), a saturated server (CPU throttling), or a full socket buffer. A node cache with NOTRACK rules removes the conntrack races."),
            );
        }
        if self.answered() > 0 && self.percentile(50) > SLOW_MEDIAN {
            findings.push(
                Finding::new(
                    "slow-server",
                    Severity::Warning,
                    format!("{server} answers {transport} in {} (median) for a name asked again and again", ms(self.percentile(50))),
                )
                .evidence(format!("{} queries: p50 {} p99 {}", self.count, ms(self.percentile(50)), ms(self.percentile(99))))
                .fix("A cache answers a repeated name in well under a millisecond: check that the server caches, and its CPU limit."),
            );
        }
        findings
    }
}

/// The search expansions of an external name, as glibc sends them: each
/// must come back NXDOMAIN, or the lookup ends early with a wrong answer
/// (a wildcard in a search domain) or fails for musl (which stops at
/// anything but NXDOMAIN).
///
/// An expansion answered by a CNAME to a later name of the walk is
/// autopath (nodens's, or CoreDNS's): the lookup ends there, in one round
/// trip, with the right answer.
async fn expansions(
    server: SocketAddr,
    resolv: &ResolvConf,
    sample: &Sample,
    lines: &mut Vec<String>,
    autopath: &mut bool,
) -> Vec<Finding> {
    let names = walk(Stub::Glibc, &resolv.stub, &sample.name, |n| {
        n == sample.exists_as
    });
    let expanded: Vec<_> = names.iter().filter(|n| **n != sample.exists_as).collect();
    if expanded.is_empty() {
        return Vec::new();
    }
    let mut findings = Vec::new();
    let mut times = Vec::new();
    for (i, name) in expanded.iter().enumerate() {
        let Ok(q) = Question::new(name, rtype::A) else {
            continue;
        };
        match ask(server, &q, Transport::Udp, DEADLINE).await {
            Ok(reply) if reply.rcode == 3 => times.push(reply.latency),
            Ok(reply) if is_autopath(&reply, &names[i + 1..]) => {
                lines.push(format!(
                    "  search expansions of {}: {name} answered by autopath (CNAME {}) in {}: one round trip",
                    sample.name,
                    reply.cnames[0],
                    ms(reply.latency)
                ));
                *autopath = true;
                break;
            }
            Ok(reply) => findings.push(expansion_finding(server, name, &sample.name, Some(&reply))),
            Err(_) => findings.push(expansion_finding(server, name, &sample.name, None)),
        }
    }
    times.sort();
    if !times.is_empty() {
        lines.push(format!(
            "  search expansions of {}: {} NXDOMAIN, median {}, slowest {}",
            sample.name,
            times.len(),
            ms(times[times.len() / 2]),
            ms(*times.last().unwrap())
        ));
    }
    findings
}

/// A CNAME from an expansion to a name the walk would ask later.
fn is_autopath(reply: &Reply, later: &[String]) -> bool {
    reply.rcode == 0
        && reply.cnames.first().is_some_and(|target| {
            let target = target.trim_end_matches('.');
            later.iter().any(|n| n.eq_ignore_ascii_case(target))
        })
}

fn expansion_finding(
    server: SocketAddr,
    expanded: &str,
    name: &str,
    reply: Option<&Reply>,
) -> Finding {
    let (severity, title, what) = match reply {
        Some(r) if r.rcode == 0 && !r.addresses.is_empty() => (
            Severity::Critical,
            format!(
                "the search expansion {expanded} exists: pods asking for {name} get its address"
            ),
            format!("{expanded} A: NOERROR {:?}", r.addresses),
        ),
        Some(r) => (
            Severity::Critical,
            format!(
                "the search expansion {expanded} answers {} instead of NXDOMAIN",
                describe(r)
            ),
            format!("{expanded} A: {}", describe(r)),
        ),
        None => (
            Severity::Critical,
            format!("the search expansion {expanded} gets no answer"),
            format!("{expanded} A: no answer within {DEADLINE:?} from {server}"),
        ),
    };
    Finding::new("search-expansion-not-nxdomain", severity, title)
        .evidence(what)
        .evidence("glibc goes on to the next name after NODATA or SERVFAIL, musl stops at anything but NXDOMAIN: the lookup fails or ends at the wrong name")
        .fix(format!("Find who answers under that search domain (a wildcard record, a split-horizon zone, a failing forwarder) or remove the domain from the search list; `{name}.` with a trailing dot skips the list."))
}

fn describe(r: &Reply) -> String {
    r.result_name().into()
}

pub(crate) fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}
