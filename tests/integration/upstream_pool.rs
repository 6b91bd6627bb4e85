//! The bounded TCP connection pool to upstreams, against real servers.
//!
//! Upstreams are real CoreDNS (the `file` plugin for `test.`; for queries
//! that must be slow, `delay.test.` answered by CoreDNS's own `erratic`
//! plugin after a fixed delay) and a real dnsmasq. What reached the upstream
//! is read from the CoreDNS query log (which shows udp/tcp and the client
//! port, i.e. the connection), from `ss` on the upstream's side of the
//! connections, and from nodens's metrics.
//!
//! Proves: `force_tcp` sends every query over TCP with unchanged answers; at
//! most `max_connections` connections exist at any moment while a burst
//! waits in the queue; a full queue fails at once and a queue wait longer
//! than `max_queue_wait` fails; sequential queries reuse one connection; an
//! idle connection is closed `idle_timeout` after its last answer (measured,
//! not just "eventually"); `max_queries_per_connection` retires connections;
//! `max_in_flight` > 1 pipelines queries on one connection; `prefer_udp`
//! uses TCP only after TC and reuses that connection; dnsmasq (which needs
//! one query at a time per connection) is served correctly and within the
//! connection bound. After each test the pool gauges are back at idle.
//!
//! CoreDNS 1.13 reads the next query on a TCP connection only after it has
//! answered the previous one (miekg/dns `serveTCPConn`), so it answers a
//! connection's queries in order; out-of-order answers are tested against a
//! test-written server in upstream_faults.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use support::*;

// ---- configuration and metrics ---------------------------------------------

const CONNS: &str = "nodens_upstream_tcp_connections";
const DIALS: &str = "nodens_upstream_tcp_dials_total";
const CLOSED: &str = "nodens_upstream_tcp_closed_total";
const QUEUE_LEN: &str = "nodens_upstream_queue_length";
const QUEUE_CAP: &str = "nodens_upstream_queue_capacity";
const QUEUE_WAIT: &str = "nodens_upstream_queue_wait_seconds";
const QUEUE_REJECTED: &str = "nodens_upstream_queue_rejected_total";
const INFLIGHT: &str = "nodens_upstream_inflight";
const ERRORS: &str = "nodens_upstream_errors_total";
const CONN_HITS: &str = "coredns_proxy_conn_cache_hits_total";
const CONN_MISSES: &str = "coredns_proxy_conn_cache_misses_total";

/// One scrape of the pool gauges of one upstream.
#[derive(Clone, Copy, Debug, Default)]
struct PoolGauges {
    /// idle + busy connections
    conns: f64,
    busy: f64,
    queue: f64,
    inflight: f64,
}

fn pool_gauges(nodens: &Nodens, to: &str) -> PoolGauges {
    let m = parse_metrics(&nodens.metrics_text());
    PoolGauges {
        conns: sum_metric(&m, CONNS, &[("to", to)]),
        busy: sum_metric(&m, CONNS, &[("to", to), ("state", "busy")]),
        queue: sum_metric(&m, QUEUE_LEN, &[("to", to)]),
        inflight: sum_metric(&m, INFLIGHT, &[("to", to)]),
    }
}

/// The largest value of `f` over the samples.
fn peak<T>(samples: &[(Duration, T)], f: impl Fn(&T) -> f64) -> f64 {
    samples.iter().map(|(_, s)| f(s)).fold(0.0, f64::max)
}

/// The CoreDNS log lines of the queries a test sent through nodens (the
/// harness's own `_ready` and `_sync` probes left out).
fn logged(core: &CoreDns) -> Vec<LoggedQuery> {
    core.queries()
        .into_iter()
        .filter(|q| !q.name.starts_with("_ready.") && !q.name.starts_with("_sync"))
        .collect()
}

/// The distinct client ends (IP:port, i.e. TCP connections) of these log lines.
fn remotes(qs: &[&LoggedQuery]) -> BTreeSet<String> {
    qs.iter().map(|q| q.remote.clone()).collect()
}

// ---- tests -------------------------------------------------------------------

/// `transport = "force_tcp"`: every query nodens sends reaches CoreDNS over
/// TCP (its log says tcp; no UDP exchange is counted), and the answers are
/// the ones CoreDNS gives when asked directly.
#[test]
fn force_tcp_sends_every_query_over_tcp() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup_with(|c, z| c.zone(z.transport(Transport::ForceTcp)));
    let to = core.addr.to_string();

    let cases = [
        ("www.test.", Rt::A),
        ("www.test.", Rt::AAAA),
        ("mail.test.", Rt::MX),
        ("alias.test.", Rt::A),
        ("nope.test.", Rt::A),  // NXDOMAIN
        ("www.test.", Rt::TXT), // NODATA
        ("mid.test.", Rt::TXT),
        ("big.test.", Rt::TXT), // ~5 KB: asked over TCP by the client too
    ];
    let ask = |server, name: &str, t| {
        if name == "big.test." {
            tcp_query(server, &Q::new(name, t))
        } else {
            udp_query(server, &Q::new(name, t))
        }
    };
    let via: Vec<Reply> = cases
        .iter()
        .map(|(name, t)| ask(nodens.dns, name, *t))
        .collect();

    // The log first, before the test's own direct queries add UDP lines.
    core.sync_log();
    let log = logged(&core);
    let udp: Vec<&LoggedQuery> = log.iter().filter(|q| q.proto != "tcp").collect();
    assert!(
        udp.is_empty(),
        "force_tcp, yet CoreDNS got these over UDP: {udp:#?}"
    );
    for (name, t) in &cases {
        assert_eq!(
            core.count_tcp_queries(name, &t.to_string()),
            1,
            "{name} {t}: TCP queries at the upstream"
        );
    }
    assert_eq!(log.len(), cases.len(), "queries at the upstream: {log:#?}");

    for ((name, t), r) in cases.iter().zip(&via) {
        let direct = ask(core.addr, name, *t);
        assert_eq!(r.rcode(), direct.rcode(), "{name} {t}: rcode");
        assert_eq!(
            r.answer_set(),
            direct.answer_set(),
            "{name} {t}: answer RRsets"
        );
        if direct.msg.answers().is_empty() {
            assert_eq!(
                r.authority_set(),
                direct.authority_set(),
                "{name} {t}: authority"
            );
        }
    }
    assert_eq!(via[7].answers_of(Rt::TXT).len(), BIG_TXT_COUNT);

    let m = parse_metrics(&nodens.metrics_text());
    let udp_exchanges = sum_metric(&m, CONN_MISSES, &[("to", &to), ("proto", "udp")])
        + sum_metric(&m, CONN_HITS, &[("to", &to), ("proto", "udp")]);
    assert_eq!(
        udp_exchanges, 0.0,
        "force_tcp, yet {udp_exchanges} UDP exchanges counted"
    );
    let tcp_exchanges = sum_metric(&m, CONN_MISSES, &[("to", &to), ("proto", "tcp")])
        + sum_metric(&m, CONN_HITS, &[("to", &to), ("proto", "tcp")]);
    assert_eq!(
        tcp_exchanges,
        cases.len() as f64,
        "TCP exchanges (conn cache hits + misses)"
    );
    assert!(
        sum_metric(&m, DIALS, &[("to", &to)]) >= 1.0,
        "{DIALS}{{to={to}}} not counted"
    );
    nodens.wait_pool_idle(&[&to]);
}

/// The bound: max_connections = 2, max_in_flight = 1, a burst of 40 distinct
/// misses that CoreDNS answers after 100 ms each. The upstream never sees
/// more than 2 established connections (ss, polled every 20 ms) and nodens
/// never reports more; the rest wait in the queue (its gauge rises above 0);
/// every query is answered. With 2 connections carrying one 100 ms query at
/// a time the burst cannot take less than 2 s: a faster burst means more
/// connections than allowed.
#[test]
fn connections_never_exceed_max_connections() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = delayed_force_tcp(
        "100ms",
        secs(15),
        secs(12),
        Pool::new()
            .max_connections(2)
            .max_in_flight(1)
            .max_queue(256)
            .max_queue_wait(secs(12)),
    );
    let to = core.addr.to_string();

    const N: usize = 40;
    let start = Instant::now();
    let (replies, samples) = sample_during(
        Duration::from_millis(20),
        || (ss_established(core.addr).len(), pool_gauges(&nodens, &to)),
        || {
            in_parallel(N, |i| {
                udp_query_timeout(
                    nodens.dns,
                    &Q::new(&format!("b{i}.delay.test."), Rt::A),
                    Duration::from_secs(20),
                )
            })
        },
    );
    let took = start.elapsed();

    let unanswered: Vec<usize> = (0..N).filter(|&i| replies[i].is_none()).collect();
    assert!(
        unanswered.is_empty(),
        "queries without an answer: {unanswered:?}"
    );
    for (i, r) in replies.iter().enumerate() {
        let r = r.as_ref().unwrap();
        assert_eq!(
            r.rcode(),
            rcode::NOERROR,
            "b{i}: rcode after {:?}",
            r.elapsed
        );
        assert_eq!(r.a(), vec![ipv4(ERRATIC_A)], "b{i}");
    }
    let slowest = replies
        .iter()
        .map(|r| r.as_ref().unwrap().elapsed)
        .max()
        .unwrap();

    let max_ss = samples.iter().map(|(_, (n, _))| *n).max().unwrap_or(0);
    let max_conns = peak(&samples, |(_, g)| g.conns);
    let max_busy = peak(&samples, |(_, g)| g.busy);
    let max_queue = peak(&samples, |(_, g)| g.queue);
    let max_inflight = peak(&samples, |(_, g)| g.inflight);
    eprintln!(
        "burst of {N}: {took:?} (slowest answer {slowest:?}); peaks over {} samples: established at the upstream {max_ss}, \
         pool connections {max_conns} (busy {max_busy}), queue {max_queue}, in flight {max_inflight}",
        samples.len()
    );
    assert!(
        max_ss >= 1,
        "ss never saw a connection at the upstream: the sampling is broken"
    );
    assert!(
        max_ss <= 2,
        "the upstream saw {max_ss} established connections at once (max_connections = 2)"
    );
    assert!(
        max_conns <= 2.0,
        "{CONNS}{{to={to}}} reached {max_conns} (max_connections = 2)"
    );
    assert!(
        max_busy >= 1.0,
        "{CONNS}{{state=busy}} never rose above 0 during the burst"
    );
    assert!(
        max_queue > 0.0,
        "{QUEUE_LEN} never rose above 0 while 40 queries shared 2 connections"
    );
    assert!(
        took >= Duration::from_millis(1900),
        "40 x 100 ms over 2 one-at-a-time connections took only {took:?}"
    );
    assert!(
        slowest <= Duration::from_secs(8),
        "slowest answer after {slowest:?}"
    );

    core.sync_log();
    let burst: Vec<LoggedQuery> = logged(&core)
        .into_iter()
        .filter(|q| q.name.ends_with(".delay.test."))
        .collect();
    let refs: Vec<&LoggedQuery> = burst.iter().collect();
    assert_eq!(burst.len(), N, "queries at the upstream");
    assert!(
        burst.iter().all(|q| q.proto == "tcp"),
        "force_tcp, yet some went over UDP"
    );
    let conns = remotes(&refs);
    assert!(
        conns.len() <= 2,
        "the burst used {} connections: {conns:?}",
        conns.len()
    );

    let m = parse_metrics(&nodens.metrics_text());
    let dials = sum_metric(&m, DIALS, &[("to", &to)]);
    assert!((1.0..=2.0).contains(&dials), "{DIALS} = {dials}");
    assert_eq!(
        sum_metric(&m, QUEUE_REJECTED, &[("to", &to)]),
        0.0,
        "queries rejected by a 256-slot queue"
    );
    assert!(
        has_series(&m, &format!("{QUEUE_WAIT}_count"), &[("to", &to)]),
        "{QUEUE_WAIT} not exported"
    );
    let waited = sum_metric(&m, &format!("{QUEUE_WAIT}_sum"), &[("to", &to)]);
    assert!(
        waited >= 1.0,
        "{QUEUE_WAIT}_sum = {waited} s although 38 queries waited up to ~2 s each"
    );
    nodens.wait_pool_idle(&[&to]);
    // "In flight" = sent on a connection and not yet answered; the queued
    // ones are nodens_upstream_queue_length. At most 2 x max_in_flight 1.
    assert!(
        max_inflight <= 2.0,
        "{INFLIGHT} reached {max_inflight} with 2 connections x max_in_flight 1 (queue peak {max_queue}): queued queries counted as in flight"
    );
}

/// max_queue = 2 with one (warm) connection and a 1.5 s upstream: of 8
/// concurrent misses, 1 is in flight, 2 wait, and the other 5 fail at once (SERVFAIL
/// long before upstream_timeout, the zone has no other upstream) without
/// reaching the upstream; queue_rejected_total{reason="full"} and
/// errors_total{error="queue_full"} count them; the gauges go back to 0.
#[test]
fn full_queue_fails_at_once() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = delayed_force_tcp(
        "1500ms",
        secs(10),
        secs(8),
        Pool::new()
            .max_connections(1)
            .max_in_flight(1)
            .max_queue(2)
            .max_queue_wait(secs(5)),
    );
    let to = core.addr.to_string();
    // Warm: one idle connection, so the burst's first query takes it and
    // only the next two wait (how a cold pool counts the query that waits
    // for the dial is not what this test is about).
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );
    assert_eq!(
        pool_gauges(&nodens, &to).conns,
        1.0,
        "the warm-up left no idle connection"
    );
    let before = parse_metrics(&nodens.metrics_text());

    const N: usize = 8;
    let (replies, samples) = sample_during(
        Duration::from_millis(20),
        || pool_gauges(&nodens, &to),
        || {
            in_parallel(N, |i| {
                udp_query_timeout(
                    nodens.dns,
                    &Q::new(&format!("f{i}.delay.test."), Rt::A),
                    Duration::from_secs(12),
                )
            })
        },
    );
    let replies: Vec<Reply> = replies
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|| panic!("f{i}: no answer")))
        .collect();
    let mut summary: Vec<(u16, Duration)> =
        replies.iter().map(|r| (r.rcode(), r.elapsed)).collect();
    summary.sort_by_key(|s| s.1);
    eprintln!("(rcode, elapsed) by time: {summary:?}");

    let failed: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.rcode() == rcode::SERVFAIL)
        .collect();
    let answered: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.rcode() == rcode::NOERROR)
        .collect();
    assert_eq!(
        failed.len(),
        N - 3,
        "SERVFAILs: 1 in flight + 2 queued, the rest rejected: {summary:?}"
    );
    assert_eq!(answered.len(), 3, "answers: {summary:?}");
    for r in &failed {
        assert!(
            r.elapsed < Duration::from_millis(1000),
            "rejected query failed only after {:?}",
            r.elapsed
        );
    }
    for r in &answered {
        assert_eq!(r.a(), vec![ipv4(ERRATIC_A)]);
    }
    let max_queue = peak(&samples, |g| g.queue);
    assert!(
        max_queue <= 2.0,
        "{QUEUE_LEN} reached {max_queue} with max_queue = 2"
    );
    assert!(max_queue >= 1.0, "{QUEUE_LEN} never rose above 0");

    let after = parse_metrics(&nodens.metrics_text());
    assert_eq!(
        sum_metric(&after, QUEUE_CAP, &[("to", &to)]),
        2.0,
        "{QUEUE_CAP}{{to={to}}} = max_queue"
    );
    let delta = |name: &str, labels: &[(&str, &str)]| {
        sum_metric(&after, name, labels) - sum_metric(&before, name, labels)
    };
    assert_eq!(
        delta(QUEUE_REJECTED, &[("to", &to), ("reason", "full")]),
        5.0,
        "{QUEUE_REJECTED}{{reason=full}}"
    );
    assert_eq!(
        delta(QUEUE_REJECTED, &[("to", &to), ("reason", "timeout")]),
        0.0,
        "{QUEUE_REJECTED}{{reason=timeout}}"
    );
    assert_eq!(
        delta(ERRORS, &[("to", &to), ("error", "queue_full")]),
        5.0,
        "{ERRORS}{{error=queue_full}}"
    );

    core.sync_log();
    let upstream = logged(&core)
        .iter()
        .filter(|q| q.name.starts_with('f'))
        .count();
    assert_eq!(upstream, 3, "rejected queries reached the upstream anyway");
    nodens.wait_pool_idle(&[&to]);
}

/// max_queue_wait = 500 ms behind a 2 s query on the only connection: the
/// queued queries fail after about 500 ms (not at once, not after the
/// upstream's 2 s), queue_rejected_total{reason="timeout"} and
/// errors_total{error="queue_timeout"} count them, and they never reach
/// the upstream; the query in flight is still answered.
#[test]
fn queue_wait_expires() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = delayed_force_tcp(
        "2s",
        secs(8),
        secs(6),
        Pool::new()
            .max_connections(1)
            .max_in_flight(1)
            .max_queue(16)
            .max_queue_wait(ms(500)),
    );
    let to = core.addr.to_string();
    let before = parse_metrics(&nodens.metrics_text());

    let (first, waiters) = std::thread::scope(|s| {
        let first = s.spawn(|| {
            udp_query_timeout(
                nodens.dns,
                &Q::new("w0.delay.test.", Rt::A),
                Duration::from_secs(10),
            )
        });
        wait_until(
            Duration::from_secs(3),
            "the first query to be in flight upstream",
            || (pool_gauges(&nodens, &to).inflight >= 1.0).then_some(()),
        );
        let waiters = in_parallel(3, |i| {
            udp_query_timeout(
                nodens.dns,
                &Q::new(&format!("w{}.delay.test.", i + 1), Rt::A),
                Duration::from_secs(10),
            )
        });
        (first.join().unwrap(), waiters)
    });

    for (i, r) in waiters.iter().enumerate() {
        let r = r
            .as_ref()
            .unwrap_or_else(|| panic!("w{}: no answer", i + 1));
        assert_eq!(
            r.rcode(),
            rcode::SERVFAIL,
            "w{}: answered after {:?}",
            i + 1,
            r.elapsed
        );
        assert!(
            r.elapsed >= Duration::from_millis(400) && r.elapsed <= Duration::from_millis(1500),
            "w{}: failed after {:?}, max_queue_wait is 500 ms",
            i + 1,
            r.elapsed
        );
    }
    let first = first.expect("w0: no answer");
    assert_eq!(first.a(), vec![ipv4(ERRATIC_A)], "the query in flight");

    let after = parse_metrics(&nodens.metrics_text());
    let delta = |name: &str, labels: &[(&str, &str)]| {
        sum_metric(&after, name, labels) - sum_metric(&before, name, labels)
    };
    assert_eq!(
        delta(QUEUE_REJECTED, &[("to", &to), ("reason", "timeout")]),
        3.0,
        "{QUEUE_REJECTED}{{reason=timeout}}"
    );
    assert_eq!(
        delta(QUEUE_REJECTED, &[("to", &to), ("reason", "full")]),
        0.0,
        "{QUEUE_REJECTED}{{reason=full}}"
    );
    assert_eq!(
        delta(ERRORS, &[("to", &to), ("error", "queue_timeout")]),
        3.0,
        "{ERRORS}{{error=queue_timeout}}"
    );

    core.sync_log();
    let upstream: Vec<String> = logged(&core)
        .into_iter()
        .map(|q| q.name)
        .filter(|n| n.starts_with('w'))
        .collect();
    assert_eq!(
        upstream,
        vec!["w0.delay.test.".to_string()],
        "expired queries reached the upstream"
    );
    nodens.wait_pool_idle(&[&to]);
}

/// Ten sequential queries use one connection: one dial, one conn-cache miss
/// and nine hits; CoreDNS saw them all from the same client port.
#[test]
fn sequential_queries_reuse_one_connection() {
    needs!(Need::CoreDns, Need::Tool("ss"));
    let (_net, core, nodens) = setup_with(|c, z| c.zone(z.transport(Transport::ForceTcp)));
    let to = core.addr.to_string();

    let names = [
        ("www.test.", Rt::A),
        ("www.test.", Rt::AAAA),
        ("mail.test.", Rt::MX),
        ("mx.test.", Rt::A),
        ("alias.test.", Rt::A),
        ("short.test.", Rt::A),
        ("short2.test.", Rt::A),
        ("pf.test.", Rt::A),
        ("pf2.test.", Rt::A),
        ("nope.test.", Rt::A),
    ];
    for (name, t) in names {
        let r = udp_query(nodens.dns, &Q::new(name, t));
        assert!(
            matches!(r.rcode(), rcode::NOERROR | rcode::NXDOMAIN),
            "{name} {t}: rcode {}",
            r.rcode()
        );
    }
    let established = ss_established(core.addr);
    assert_eq!(
        established.len(),
        1,
        "connections open at the upstream: {established:?}"
    );

    let m = parse_metrics(&nodens.metrics_text());
    assert_eq!(sum_metric(&m, DIALS, &[("to", &to)]), 1.0, "{DIALS}");
    assert_eq!(
        sum_metric(&m, CONN_MISSES, &[("to", &to), ("proto", "tcp")]),
        1.0,
        "{CONN_MISSES}{{proto=tcp}}"
    );
    assert_eq!(
        sum_metric(&m, CONN_HITS, &[("to", &to), ("proto", "tcp")]),
        9.0,
        "{CONN_HITS}{{proto=tcp}}"
    );
    assert_eq!(
        sum_metric(&m, CLOSED, &[("to", &to)]),
        0.0,
        "{CLOSED}: a connection was closed"
    );
    assert_eq!(
        sum_metric(&m, CONNS, &[("to", &to), ("state", "idle")]),
        1.0,
        "{CONNS}{{state=idle}}"
    );

    core.sync_log();
    let log = logged(&core);
    let refs: Vec<&LoggedQuery> = log.iter().collect();
    assert_eq!(log.len(), names.len());
    assert!(log.iter().all(|q| q.proto == "tcp"), "{log:#?}");
    assert_eq!(
        remotes(&refs).len(),
        1,
        "queries came over several connections: {:?}",
        remotes(&refs)
    );
    nodens.wait_pool_idle(&[&to]);
}

/// idle_timeout = 1 s is exact: a second query 600 ms after the first reuses
/// the connection (it was not closed early), and the upstream sees the
/// connection close between 0.9 s and 1.4 s after the last answer (ss
/// polled every 20 ms); closed_total{reason="idle"} counts it.
#[test]
fn idle_connection_closed_on_time() {
    needs!(Need::CoreDns, Need::Tool("ss"));
    let (_net, core, nodens) = setup_with(|c, z| {
        c.zone(
            z.transport(Transport::ForceTcp)
                .pool(Pool::new().idle_timeout(secs(1))),
        )
    });
    let to = core.addr.to_string();

    let first = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(first.a(), vec![ipv4("192.0.2.1")]);
    let t1 = Instant::now();
    assert_eq!(
        ss_established(core.addr).len(),
        1,
        "no connection at the upstream after the first answer"
    );
    // The wait is the test: well inside idle_timeout.
    sleep_until(t1, Duration::from_millis(600));
    let second = udp_query(nodens.dns, &Q::new("mx.test.", Rt::A));
    assert_eq!(second.a(), vec![ipv4("192.0.2.3")]);
    let last_answer = Instant::now();
    assert_eq!(
        nodens.metric(DIALS, &[("to", &to)]),
        1.0,
        "the connection was not reused 600 ms later"
    );

    let closed_after = wait_until(
        Duration::from_secs(4),
        "the upstream side of the connection to close",
        || {
            ss_established(core.addr)
                .is_empty()
                .then(|| last_answer.elapsed())
        },
    );
    eprintln!("idle connection closed {closed_after:?} after the last answer (idle_timeout 1 s)");
    assert!(
        closed_after >= Duration::from_millis(900),
        "closed {closed_after:?} after the last answer: early"
    );
    assert!(
        closed_after <= Duration::from_millis(1400),
        "closed {closed_after:?} after the last answer: late"
    );

    let idle = nodens.wait_metric(CLOSED, &[("to", &to), ("reason", "idle")], 1.0);
    assert_eq!(idle, 1.0, "{CLOSED}{{reason=idle}}");
    assert_eq!(
        nodens.metric(CLOSED, &[("to", &to)]),
        1.0,
        "{CLOSED}, all reasons"
    );
    wait_until(
        Duration::from_secs(1),
        &format!("{CONNS}{{to={to}}} to drop to 0 after the close"),
        || (nodens.metric(CONNS, &[("to", &to)]) == 0.0).then_some(()),
    );
    nodens.wait_pool_idle(&[&to]);
}

/// max_queries_per_connection = 3: nine sequential queries take three
/// connections of three queries each, all three retired with
/// reason="max_queries", none left open at the upstream.
#[test]
fn max_queries_per_connection_retires_connections() {
    needs!(Need::CoreDns, Need::Tool("ss"));
    let (_net, core, nodens) = setup_with(|c, z| {
        c.zone(
            z.transport(Transport::ForceTcp)
                .pool(Pool::new().max_queries_per_connection(3)),
        )
    });
    let to = core.addr.to_string();

    let names: Vec<String> = (0..9).map(|i| format!("n{i}.test.")).collect();
    for n in &names {
        assert_eq!(
            udp_query(nodens.dns, &Q::new(n, Rt::A)).rcode(),
            rcode::NXDOMAIN,
            "{n}"
        );
    }
    let retired = nodens.wait_metric(CLOSED, &[("to", &to), ("reason", "max_queries")], 3.0);
    assert_eq!(retired, 3.0, "{CLOSED}{{reason=max_queries}}");
    let m = parse_metrics(&nodens.metrics_text());
    assert_eq!(sum_metric(&m, DIALS, &[("to", &to)]), 3.0, "{DIALS}");
    assert_eq!(
        sum_metric(&m, CONN_MISSES, &[("to", &to), ("proto", "tcp")]),
        3.0,
        "{CONN_MISSES}{{proto=tcp}}"
    );
    assert_eq!(
        sum_metric(&m, CONN_HITS, &[("to", &to), ("proto", "tcp")]),
        6.0,
        "{CONN_HITS}{{proto=tcp}}"
    );
    wait_until(
        Duration::from_secs(3),
        "the upstream to see every connection closed",
        || ss_established(core.addr).is_empty().then_some(()),
    );

    core.sync_log();
    let log = logged(&core);
    assert_eq!(log.len(), 9, "{log:#?}");
    assert!(log.iter().all(|q| q.proto == "tcp"));
    // In order: n0..n2 on one connection, n3..n5 on the next, n6..n8 on the last.
    let mut by_conn: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for q in &log {
        by_conn
            .entry(q.remote.clone())
            .or_default()
            .push(q.name.clone());
    }
    let mut groups: Vec<Vec<String>> = by_conn.into_values().collect();
    groups.sort();
    let want: Vec<Vec<String>> = names.chunks(3).map(|c| c.to_vec()).collect();
    assert_eq!(groups, want, "queries per connection");
    nodens.wait_pool_idle(&[&to]);
}

/// max_in_flight = 4 on max_connections = 1: four concurrent slow misses go
/// out together on one connection. CoreDNS (one query at a time per
/// connection, 300 ms each) has the later queries waiting unread in its
/// socket (Recv-Q > 0 at the upstream: only pipelining puts them there),
/// nodens counts 4 in flight and queues none, and all four are answered.
/// The connection is opened by one query before (one dial in all).
#[test]
fn pipelining_on_one_connection() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = delayed_force_tcp(
        "300ms",
        secs(6),
        secs(5),
        Pool::new().max_connections(1).max_in_flight(4),
    );
    let to = core.addr.to_string();
    // The connection first: queries that arrive while it is being dialled
    // wait in the queue for it, and how long the dial takes is the machine's
    // business, not pipelining's.
    let warm = udp_query_timeout(
        nodens.dns,
        &Q::new("warm.delay.test.", Rt::A),
        Duration::from_secs(8),
    );
    assert!(
        warm.is_some(),
        "no answer to the query that opens the connection"
    );

    let (replies, samples) = sample_during(
        Duration::from_millis(20),
        || (ss_established(core.addr), pool_gauges(&nodens, &to)),
        || {
            in_parallel(4, |i| {
                udp_query_timeout(
                    nodens.dns,
                    &Q::new(&format!("p{i}.delay.test."), Rt::A),
                    Duration::from_secs(8),
                )
            })
        },
    );
    for (i, r) in replies.iter().enumerate() {
        let r = r.as_ref().unwrap_or_else(|| panic!("p{i}: no answer"));
        assert_eq!(r.a(), vec![ipv4(ERRATIC_A)], "p{i}");
        assert!(
            r.elapsed <= Duration::from_secs(3),
            "p{i} answered after {:?}",
            r.elapsed
        );
    }
    let max_conns_ss = samples.iter().map(|(_, (c, _))| c.len()).max().unwrap_or(0);
    let max_recv_q = samples
        .iter()
        .flat_map(|(_, (c, _))| c.iter().map(|c| c.recv_q))
        .max()
        .unwrap_or(0);
    let max_inflight = peak(&samples, |(_, g)| g.inflight);
    let max_queue = peak(&samples, |(_, g)| g.queue);
    eprintln!(
        "peaks: established at the upstream {max_conns_ss}, Recv-Q there {max_recv_q} bytes, in flight {max_inflight}, queue {max_queue}"
    );
    assert_eq!(
        max_conns_ss, 1,
        "connections at the upstream (max_connections = 1)"
    );
    assert!(
        max_recv_q > 0,
        "no query ever waited in CoreDNS's socket: the queries were not pipelined"
    );
    assert_eq!(max_inflight, 4.0, "{INFLIGHT} peak (max_in_flight = 4)");
    assert_eq!(
        max_queue, 0.0,
        "{QUEUE_LEN}: queries queued although the connection had free slots"
    );

    let m = parse_metrics(&nodens.metrics_text());
    assert_eq!(sum_metric(&m, DIALS, &[("to", &to)]), 1.0, "{DIALS}");
    core.sync_log();
    let log: Vec<LoggedQuery> = logged(&core)
        .into_iter()
        .filter(|q| q.name.starts_with('p'))
        .collect();
    let refs: Vec<&LoggedQuery> = log.iter().collect();
    assert_eq!(log.len(), 4);
    assert!(log.iter().all(|q| q.proto == "tcp"));
    assert_eq!(
        remotes(&refs).len(),
        1,
        "pipelined queries on several connections: {:?}",
        remotes(&refs)
    );
    nodens.wait_pool_idle(&[&to]);
}

/// prefer_udp (the default): UDP first; TCP only for the truncated answers
/// (big and big2, ~5 KB each), and the second truncated answer reuses the
/// connection the first one opened.
#[test]
fn prefer_udp_uses_tcp_only_after_truncation_and_reuses_it() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let mut big2 = String::new();
    for i in 0..BIG_TXT_COUNT {
        big2.push_str(&format!("big2 300 IN TXT \"{i:02}{}\"\n", "c".repeat(98)));
    }
    let core = CoreDns::test_zone(net.upstream(0), &big2);
    let to = core.addr.to_string();
    let nodens = Nodens::start(
        &Cfg::new(&net).zone(Zone::new("test.", &[core.addr]).transport(Transport::PreferUdp)),
    );

    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );
    let mid = udp_query(nodens.dns, &Q::new("mid.test.", Rt::TXT));
    assert_eq!(mid.answers_of(Rt::TXT).len(), MID_TXT_COUNT);
    for name in ["big.test.", "big2.test."] {
        let r = tcp_query(nodens.dns, &Q::new(name, Rt::TXT));
        assert_eq!(
            r.answers_of(Rt::TXT).len(),
            BIG_TXT_COUNT,
            "{name}: the whole RRset"
        );
    }

    core.sync_log();
    for (name, t, udp, tcp) in [
        ("www.test.", "A", 1, 0),
        ("mid.test.", "TXT", 1, 0),
        ("big.test.", "TXT", 1, 1),
        ("big2.test.", "TXT", 1, 1),
    ] {
        assert_eq!(
            core.count_queries(name, t) - core.count_tcp_queries(name, t),
            udp,
            "{name} {t}: UDP queries"
        );
        assert_eq!(
            core.count_tcp_queries(name, t),
            tcp,
            "{name} {t}: TCP queries"
        );
    }
    let log = logged(&core);
    let tcp: Vec<&LoggedQuery> = log.iter().filter(|q| q.proto == "tcp").collect();
    assert_eq!(
        remotes(&tcp).len(),
        1,
        "the second truncated answer opened a new connection: {tcp:#?}"
    );

    let m = parse_metrics(&nodens.metrics_text());
    assert_eq!(sum_metric(&m, DIALS, &[("to", &to)]), 1.0, "{DIALS}");
    assert_eq!(
        sum_metric(&m, CONN_MISSES, &[("to", &to), ("proto", "tcp")]),
        1.0,
        "{CONN_MISSES}{{proto=tcp}}"
    );
    assert_eq!(
        sum_metric(&m, CONN_HITS, &[("to", &to), ("proto", "tcp")]),
        1.0,
        "{CONN_HITS}{{proto=tcp}}"
    );
    // Every UDP exchange is counted once: on a socket opened for it (a
    // miss) or on one that carried an earlier query (a hit).
    assert_eq!(
        sum_metric(&m, CONN_MISSES, &[("to", &to), ("proto", "udp")])
            + sum_metric(&m, CONN_HITS, &[("to", &to), ("proto", "udp")]),
        4.0,
        "{CONN_MISSES} + {CONN_HITS}{{proto=udp}}"
    );
    nodens.wait_pool_idle(&[&to]);
}

// ---- dnsmasq -------------------------------------------------------------------

/// A real dnsmasq forwarding to `server`, in the foreground, logging queries
/// to stderr. Its TCP connections are served by forked children, so the PID
/// in a log line tells which connection (or UDP: the main PID) carried it.
struct Dnsmasq {
    proc: Proc,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    fn start(addr: std::net::SocketAddr, server: std::net::SocketAddr) -> Dnsmasq {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = std::process::Command::new(tool("dnsmasq"));
        cmd.args([
            "--keep-in-foreground",
            "-C",
            "/dev/null",
            "--no-hosts",
            "--no-resolv",
            "--bind-interfaces",
        ])
        .arg(format!("--port={}", addr.port()))
        .arg(format!("--listen-address={}", addr.ip()))
        .arg(format!("--server={}#{}", server.ip(), server.port()))
        .arg(format!(
            "--pid-file={}",
            dir.path().join("dnsmasq.pid").display()
        ))
        .args(["--log-queries", "--log-facility=-"]);
        let d = Dnsmasq {
            proc: Proc::spawn(&format!("dnsmasq {addr}"), cmd),
            addr,
            _dir: dir,
        };
        let probe = Q::new("_ready.test.", Rt::TXT).to_bytes();
        wait_until(
            Duration::from_secs(10),
            &format!("dnsmasq on {addr} to answer"),
            || udp_exchange(addr, &probe, Duration::from_millis(200)).map(|_| ()),
        );
        d
    }

    /// The PIDs that logged `query[..] NAME` for names matching `pred`.
    fn pids_for(&self, pred: impl Fn(&str) -> bool) -> BTreeSet<String> {
        self.proc
            .lines()
            .iter()
            .filter_map(|l| {
                let pid = l.split_once("dnsmasq[")?.1.split_once(']')?.0.to_string();
                let rest = l.split_once("query[")?.1.split_once("] ")?.1;
                let name = rest.split_whitespace().next()?;
                pred(name).then_some(pid)
            })
            .collect()
    }
}

/// dnsmasq as the upstream, force_tcp, max_in_flight = 1 (it answers one
/// query at a time per connection) and max_connections = 2: answers equal
/// CoreDNS's own; a burst of 12 slow misses never has more than 2
/// connections at dnsmasq (ss) and is served by at most 2 dnsmasq TCP
/// children, none of it by the UDP main process.
#[test]
fn dnsmasq_upstream_force_tcp() {
    needs!(Need::CoreDns, Need::Tool("dnsmasq"));
    let net = Net::alloc();
    let core = CoreDns::test_zone_delayed(net.upstream(0), "100ms");
    let dnsmasq = Dnsmasq::start(net.upstream(1), core.addr);
    let to = dnsmasq.addr.to_string();
    let main_pid = dnsmasq.proc.pid().to_string();
    let nodens = Nodens::start(
        &Cfg::new(&net).query_timeout(secs(10)).zone(
            Zone::new("test.", &[dnsmasq.addr])
                .transport(Transport::ForceTcp)
                .upstream_timeout(secs(8))
                .pool(
                    Pool::new()
                        .max_connections(2)
                        .max_in_flight(1)
                        .max_queue_wait(secs(8)),
                ),
        ),
    );

    let cases = [
        ("www.test.", Rt::A),
        ("www.test.", Rt::AAAA),
        ("mail.test.", Rt::MX),
        ("alias.test.", Rt::A),
        ("nope.test.", Rt::A),
        ("big.test.", Rt::TXT),
    ];
    for (name, t) in cases {
        let via = if t == Rt::TXT {
            tcp_query(nodens.dns, &Q::new(name, t))
        } else {
            udp_query(nodens.dns, &Q::new(name, t))
        };
        let direct = if t == Rt::TXT {
            tcp_query(core.addr, &Q::new(name, t))
        } else {
            udp_query(core.addr, &Q::new(name, t))
        };
        assert_eq!(via.rcode(), direct.rcode(), "{name} {t}: rcode");
        assert_eq!(
            via.answer_set(),
            direct.answer_set(),
            "{name} {t}: answer RRsets"
        );
    }

    const N: usize = 12;
    let (replies, samples) = sample_during(
        Duration::from_millis(20),
        || ss_established(dnsmasq.addr).len(),
        || {
            in_parallel(N, |i| {
                udp_query_timeout(
                    nodens.dns,
                    &Q::new(&format!("d{i}.delay.test."), Rt::A),
                    Duration::from_secs(12),
                )
            })
        },
    );
    for (i, r) in replies.iter().enumerate() {
        let r = r.as_ref().unwrap_or_else(|| panic!("d{i}: no answer"));
        assert_eq!(r.a(), vec![ipv4(ERRATIC_A)], "d{i}");
    }
    let max_ss = samples.iter().map(|(_, n)| *n).max().unwrap_or(0);
    eprintln!("peak established connections at dnsmasq: {max_ss}");
    assert!(max_ss >= 1, "ss never saw a connection at dnsmasq");
    assert!(
        max_ss <= 2,
        "dnsmasq saw {max_ss} connections at once (max_connections = 2)"
    );

    let pids = dnsmasq.pids_for(|n| n.ends_with(".delay.test") || n.ends_with(".delay.test."));
    assert!(!pids.is_empty(), "dnsmasq logged none of the burst");
    assert!(
        !pids.contains(&main_pid),
        "force_tcp, yet dnsmasq's main process (UDP) got burst queries"
    );
    assert!(
        pids.len() <= 2,
        "the burst was served by {} dnsmasq TCP children: {pids:?}",
        pids.len()
    );
    let dials = nodens.metric(DIALS, &[("to", &to)]);
    assert!((1.0..=2.0).contains(&dials), "{DIALS} = {dials}");
    nodens.wait_pool_idle(&[&to]);
}
