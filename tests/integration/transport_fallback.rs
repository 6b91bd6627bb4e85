//! `transport = "tcp_fallback_on_timeout"` against a real lost datagram.
//!
//! Inside a network namespace of its own (lo up, deleted on drop, panic or
//! not) the test runs CoreDNS serving the test zone on 127.0.0.1:5300 and
//! nodens with the zone `test.` -> 127.0.0.1:5300, `upstream_timeout = "2s"`
//! and `query_timeout = "3s"`. A real iptables rule in the namespace's INPUT
//! chain drops every UDP datagram to port 5300 — nodens's UDP query to the
//! upstream is lost on the way in, as one lost to a conntrack race would be
//! (INPUT, not OUTPUT: a DROP on OUTPUT makes the sender's send() fail with
//! EPERM, an error nodens sees at once instead of a loss). TCP to the same
//! port goes through.
//!
//! The test's own queries, scrapes and probes run on a thread that entered
//! the namespace ([`in_netns`]), with the harness's DNS client and HTTP GET.
//!
//! Proves, each with a fresh nodens:
//! 1. `tcp_fallback_on_timeout` with UDP dropped: the right answer arrives
//!    after about half the upstream timeout (0.8 s to 1.8 s with 2 s); the
//!    rule dropped a datagram, CoreDNS logged the query over TCP only, and
//!    nodens counts a UDP try, a fresh TCP connection
//!    (`coredns_proxy_conn_cache_misses_total{proto="tcp"}`) and no upstream
//!    error at all — the UDP half-try running out is not a failed exchange.
//! 2. `prefer_udp`, same setup: SERVFAIL once the whole upstream try (2 s)
//!    has gone by, nothing reached CoreDNS, no TCP, one upstream timeout
//!    counted — so the fallback is what made case 1 work.
//! 3. Rule removed, `tcp_fallback_on_timeout` again: the answer comes over
//!    UDP at once (< 0.5 s); CoreDNS logged it over UDP, nodens opened no
//!    TCP connection.
//!
//! Needs root (`needs!(Need::Root)`: fails without it, unless NODENS_ALLOW_SKIP=1).
//! No packet leaves the namespace's loopback.

use std::time::Duration;

use support::*;

/// The block nodens listens on inside the namespace: fixed, not allocated,
/// since the namespace is the test's own and nothing else can be there.
fn net() -> Net {
    Net::fixed(130)
}
/// The upstream inside the namespace.
const UPSTREAM: &str = "127.0.0.1:5300";
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

const ERRORS: &str = "nodens_upstream_errors_total";
const CONN_MISSES: &str = "coredns_proxy_conn_cache_misses_total";
const CONN_HITS: &str = "coredns_proxy_conn_cache_hits_total";

// ---- the namespace and its firewall -----------------------------------------

/// The test's firewall in its namespace (the namespace, with its rules, is
/// deleted on drop, so also when the test panics).
trait Firewall {
    fn iptables(&self, args: &[&str]) -> String;
    fn rule(&self, op: &str);
    fn dropped(&self) -> u64;
}

impl Firewall for Netns {
    /// `iptables -w 5 ARGS` inside the namespace (the lock wait is bounded).
    fn iptables(&self, args: &[&str]) -> String {
        self.run(&[&["iptables", "-w", "5"], args].concat())
    }

    /// `op` ("-I" inserts, "-D" deletes) the rule dropping UDP to port 5300 on input.
    fn rule(&self, op: &str) {
        self.iptables(&[op, "INPUT", "-p", "udp", "--dport", "5300", "-j", "DROP"]);
    }

    /// Datagrams the rule has dropped so far (from `iptables -nvxL INPUT`).
    fn dropped(&self) -> u64 {
        let out = self.iptables(&["-nvxL", "INPUT"]);
        let line = out
            .lines()
            .find(|l| l.contains("DROP") && l.contains("udp dpt:5300"))
            .unwrap_or_else(|| panic!("no DROP udp dpt:5300 rule in INPUT:\n{out}"));
        let packets = line.split_whitespace().next().and_then(|n| n.parse().ok());
        packets.unwrap_or_else(|| panic!("packet count in {line:?}"))
    }
}

// ---- nodens and CoreDNS inside it ---------------------------------------------

/// Starts nodens in the namespace with the zone `test.` -> the upstream over
/// `transport`, and waits (from inside) for /ready.
fn nodens_in(ns: &Netns, transport: Transport) -> Nodens {
    let cfg = Cfg::new(&net()).query_timeout(secs(3)).zone(
        Zone::new("test.", &[UPSTREAM.parse().unwrap()])
            .upstream_timeout(secs(2))
            .transport(transport),
    );
    let mut nodens = Nodens::launch(&cfg.to_toml(), &ns.exec());
    in_netns(&ns.name, || nodens.wait_ready());
    nodens
}

/// One query to nodens from inside the namespace; None if no answer within 5 s.
fn ask(ns: &Netns, nodens: &Nodens, name: &str, t: Rt) -> Option<Reply> {
    in_netns(&ns.name, || {
        udp_query_timeout(nodens.dns, &Q::new(name, t), Duration::from_secs(5))
    })
}

/// The upstream's metrics in nodens, scraped from inside the namespace.
struct UpstreamCounts {
    udp_tries: f64,
    tcp_fresh: f64,
    tcp_reused: f64,
    timeouts: f64,
    errors: f64,
}

fn counts(ns: &Netns, nodens: &Nodens) -> UpstreamCounts {
    let m = parse_metrics(&in_netns(&ns.name, || nodens.metrics_text()));
    let to = ("to", UPSTREAM);
    UpstreamCounts {
        udp_tries: sum_metric(&m, CONN_MISSES, &[to, ("proto", "udp")])
            + sum_metric(&m, CONN_HITS, &[to, ("proto", "udp")]),
        tcp_fresh: sum_metric(&m, CONN_MISSES, &[to, ("proto", "tcp")]),
        tcp_reused: sum_metric(&m, CONN_HITS, &[to, ("proto", "tcp")]),
        timeouts: sum_metric(&m, ERRORS, &[to, ("error", "timeout")]),
        errors: sum_metric(&m, ERRORS, &[to]),
    }
}

/// The protocols ("udp"/"tcp") of the logged queries for `name`/`qtype`,
/// after a log barrier sent over TCP (UDP may be dropped).
fn logged_protos(ns: &Netns, core: &CoreDns, name: &str, qtype: &str) -> Vec<String> {
    core.sync_log_via(|sync| {
        in_netns(&ns.name, || tcp_query(core.addr, &Q::new(sync, Rt::TXT)));
    });
    core.queries()
        .into_iter()
        .filter(|q| q.name.eq_ignore_ascii_case(name) && q.qtype == qtype)
        .map(|q| q.proto)
        .collect()
}

// ---- the test -------------------------------------------------------------------

#[test]
fn tcp_fallback_answers_when_udp_to_the_upstream_is_lost() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // Declared first, dropped last: the processes die before the namespace goes.
    let ns = Netns::create("tf");
    let core = CoreDns::launch(
        &ns.exec(),
        UPSTREAM.parse().unwrap(),
        &[("test.", test_zone(""))],
    );
    in_netns(&ns.name, || core.wait_ready());

    // The loss: UDP to the upstream port vanishes, TCP still goes through.
    ns.rule("-I");
    let (udp, tcp) = in_netns(&ns.name, || {
        let udp = udp_query_timeout(
            core.addr,
            &Q::new("www.test.", Rt::A),
            Duration::from_millis(500),
        );
        (udp, tcp_query(core.addr, &Q::new("www.test.", Rt::A)))
    });
    assert!(
        udp.is_none(),
        "UDP to the upstream still answered with the DROP rule in place: {udp:?}"
    );
    assert_eq!(
        tcp.a(),
        vec![ipv4("192.0.2.1")],
        "CoreDNS over TCP with UDP dropped"
    );
    assert!(ns.dropped() >= 1, "the DROP rule counted nothing");

    // 1. tcp_fallback_on_timeout: UDP gets half the try, then the TCP pool.
    {
        let mut nodens = nodens_in(&ns, Transport::TcpFallbackOnTimeout);
        let dropped_before = ns.dropped();
        let r = ask(&ns, &nodens, "mx.test.", Rt::A)
            .expect("tcp_fallback_on_timeout: no answer from nodens");
        eprintln!(
            "case 1. tcp_fallback_on_timeout, UDP dropped: rcode {} after {:?}",
            r.rcode(),
            r.elapsed
        );
        assert_eq!(
            r.rcode(),
            rcode::NOERROR,
            "tcp_fallback_on_timeout: rcode after {:?}",
            r.elapsed
        );
        assert_eq!(
            r.a(),
            vec![ipv4("192.0.2.3")],
            "tcp_fallback_on_timeout: answer"
        );
        let half = UPSTREAM_TIMEOUT / 2;
        assert!(
            r.elapsed >= Duration::from_millis(800) && r.elapsed <= Duration::from_millis(1800),
            "tcp_fallback_on_timeout answered after {:?}; expected about half the upstream timeout ({half:?})",
            r.elapsed
        );
        assert!(
            ns.dropped() > dropped_before,
            "nodens's UDP query never hit the DROP rule"
        );
        let protos = logged_protos(&ns, &core, "mx.test.", "A");
        assert_eq!(
            protos,
            vec!["tcp"],
            "CoreDNS's log of mx.test. A (the UDP query was dropped before it)"
        );
        let c = counts(&ns, &nodens);
        assert!(
            c.udp_tries >= 1.0,
            "{CONN_MISSES}{{proto=udp}} = {}: UDP was not tried first",
            c.udp_tries
        );
        assert!(
            c.tcp_fresh >= 1.0,
            "{CONN_MISSES}{{proto=tcp}} = {}: no TCP connection was opened",
            c.tcp_fresh
        );
        assert_eq!(
            c.timeouts, 0.0,
            "{ERRORS}{{error=timeout}}: the UDP half-try counted as an upstream failure"
        );
        assert_eq!(c.errors, 0.0, "{ERRORS}: the exchange succeeded over TCP");
        nodens.assert_alive();
    }

    // 2. prefer_udp, same loss: nothing answers, so the fallback made case 1 work.
    {
        let mut nodens = nodens_in(&ns, Transport::PreferUdp);
        let dropped_before = ns.dropped();
        let r = ask(&ns, &nodens, "mail.test.", Rt::MX)
            .expect("prefer_udp: no reply at all from nodens");
        eprintln!(
            "case 2. prefer_udp, UDP dropped: rcode {} after {:?}",
            r.rcode(),
            r.elapsed
        );
        assert_eq!(
            r.rcode(),
            rcode::SERVFAIL,
            "prefer_udp with UDP dropped: rcode after {:?}",
            r.elapsed
        );
        assert!(
            r.msg.answers().is_empty(),
            "prefer_udp with UDP dropped: answers {:?}",
            r.answer_set()
        );
        assert!(
            r.elapsed >= Duration::from_millis(1800) && r.elapsed <= Duration::from_millis(3500),
            "prefer_udp SERVFAIL after {:?}; expected once the whole upstream try ({UPSTREAM_TIMEOUT:?}) went by",
            r.elapsed
        );
        assert!(
            ns.dropped() > dropped_before,
            "nodens's UDP query never hit the DROP rule"
        );
        let protos = logged_protos(&ns, &core, "mail.test.", "MX");
        assert!(
            protos.is_empty(),
            "prefer_udp: CoreDNS logged mail.test. MX over {protos:?}"
        );
        let c = counts(&ns, &nodens);
        assert!(
            c.udp_tries >= 1.0,
            "{CONN_MISSES}{{proto=udp}} = {}",
            c.udp_tries
        );
        assert_eq!(
            c.tcp_fresh + c.tcp_reused,
            0.0,
            "prefer_udp went to TCP without a truncated answer"
        );
        assert_eq!(
            c.timeouts, 1.0,
            "{ERRORS}{{error=timeout}}: the one UDP try timing out"
        );
        nodens.assert_alive();
    }

    // 3. No loss: tcp_fallback_on_timeout answers over UDP at once.
    ns.rule("-D");
    {
        let mut nodens = nodens_in(&ns, Transport::TcpFallbackOnTimeout);
        let r = ask(&ns, &nodens, "www.test.", Rt::AAAA).expect("no loss: no answer from nodens");
        eprintln!(
            "case 3. tcp_fallback_on_timeout, nothing dropped: rcode {} after {:?}",
            r.rcode(),
            r.elapsed
        );
        assert_eq!(
            r.rcode(),
            rcode::NOERROR,
            "no loss: rcode after {:?}",
            r.elapsed
        );
        assert_eq!(
            r.answers_of(Rt::AAAA).len(),
            1,
            "no loss: answer {:?}",
            r.answer_set()
        );
        assert!(
            r.elapsed < Duration::from_millis(500),
            "no loss, yet the answer took {:?}",
            r.elapsed
        );
        let protos = logged_protos(&ns, &core, "www.test.", "AAAA");
        assert_eq!(
            protos,
            vec!["udp"],
            "CoreDNS's log of www.test. AAAA with nothing dropped"
        );
        let c = counts(&ns, &nodens);
        assert!(
            c.udp_tries >= 1.0,
            "{CONN_MISSES}{{proto=udp}} = {}",
            c.udp_tries
        );
        assert_eq!(
            c.tcp_fresh + c.tcp_reused,
            0.0,
            "no loss, yet nodens used TCP"
        );
        assert_eq!(c.errors, 0.0, "{ERRORS} with nothing dropped");
        nodens.assert_alive();
    }
}
