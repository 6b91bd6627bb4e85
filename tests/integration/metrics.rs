//! The Prometheus endpoint: CoreDNS-compatible names, labels and values.
//!
//! After a known sequence of queries (UDP and TCP, hits and misses, NOERROR
//! and NXDOMAIN), /metrics has every documented family with its documented
//! labels, and the counters equal what was sent. Prefetch, serve-stale and
//! eviction counters are driven by making those events happen.

use std::time::{Duration, Instant};

use support::*;

/// Asserts that some series of `name` exists and has all of `keys` as labels.
fn assert_labels(samples: &[Sample], name: &str, keys: &[&str]) {
    let series: Vec<&Sample> = samples.iter().filter(|s| s.name == name).collect();
    assert!(!series.is_empty(), "no series named {name} in /metrics");
    for s in &series {
        for k in keys {
            assert!(
                s.label(k).is_some(),
                "{name} series without label `{k}`: {:?}",
                s.labels
            );
        }
    }
}

#[test]
fn metrics_match_the_traffic() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let up = core.addr.to_string();
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .query_timeout(secs(2))
            .prefetch_min_hits(4)
            .prefetch_percent(100)
            .zone(Zone::new("test.", &[core.addr]).upstream_timeout(ms(500))),
    );
    let server = nodens.server_label();

    // 3 x www A over UDP (1 miss, 2 hits), 1 x www AAAA over TCP (miss),
    // 2 x nope A over UDP (NXDOMAIN: 1 miss, 1 denial hit).
    for _ in 0..3 {
        assert_eq!(
            udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
            vec![ipv4("192.0.2.1")]
        );
    }
    assert_eq!(
        tcp_query(nodens.dns, &Q::new("www.test.", Rt::AAAA)).rcode(),
        rcode::NOERROR
    );
    for _ in 0..2 {
        assert_eq!(
            udp_query(nodens.dns, &Q::new("nope.test.", Rt::A)).rcode(),
            rcode::NXDOMAIN
        );
    }
    let s = server.as_str();
    nodens.wait_metric("coredns_dns_responses_total", &[("server", s)], 6.0);
    nodens.wait_metric(
        "coredns_dns_request_duration_seconds_count",
        &[("server", s)],
        6.0,
    );
    let text = nodens.metrics_text();
    let m = parse_metrics(&text);
    let v = |name: &str, labels: &[(&str, &str)]| sum_metric(&m, name, labels);

    // Labels.
    assert_labels(
        &m,
        "coredns_dns_requests_total",
        &["server", "zone", "view", "proto", "family", "type"],
    );
    assert_labels(
        &m,
        "coredns_dns_responses_total",
        &["server", "zone", "view", "rcode", "plugin"],
    );
    // As CoreDNS 1.12 exports it: no `type` label on the duration histogram.
    assert_labels(
        &m,
        "coredns_dns_request_duration_seconds_count",
        &["server", "zone", "view"],
    );
    assert_labels(
        &m,
        "coredns_dns_request_duration_seconds_bucket",
        &["server", "zone", "view", "le"],
    );
    assert_labels(
        &m,
        "coredns_dns_request_duration_seconds_sum",
        &["server", "zone", "view"],
    );
    assert_labels(
        &m,
        "coredns_cache_entries",
        &["server", "type", "zones", "view"],
    );
    assert_labels(
        &m,
        "coredns_cache_hits_total",
        &["server", "type", "zones", "view"],
    );
    assert_labels(
        &m,
        "coredns_cache_misses_total",
        &["server", "zones", "view"],
    );
    assert_labels(
        &m,
        "coredns_cache_requests_total",
        &["server", "zones", "view"],
    );
    assert_labels(
        &m,
        "coredns_proxy_request_duration_seconds_count",
        &["proxy_name", "to", "rcode"],
    );
    assert_labels(
        &m,
        "coredns_proxy_conn_cache_misses_total",
        &["proxy_name", "to", "proto"],
    );
    for name in ["coredns_dns_requests_total", "coredns_dns_responses_total"] {
        assert!(
            text.contains(&format!("# TYPE {name} counter")),
            "{name} is not declared a counter"
        );
    }
    assert!(text.contains("# TYPE coredns_dns_request_duration_seconds histogram"));
    assert!(text.contains("# TYPE coredns_cache_entries gauge"));
    assert!(text.contains("# TYPE coredns_proxy_request_duration_seconds histogram"));

    // Requests: by proto, family (1 = IPv4) and type.
    let z = ("zone", "test.");
    assert_eq!(
        v(
            "coredns_dns_requests_total",
            &[
                ("server", s),
                z,
                ("proto", "udp"),
                ("family", "1"),
                ("type", "A")
            ]
        ),
        5.0
    );
    assert_eq!(
        v(
            "coredns_dns_requests_total",
            &[
                ("server", s),
                z,
                ("proto", "tcp"),
                ("family", "1"),
                ("type", "AAAA")
            ]
        ),
        1.0
    );
    assert_eq!(v("coredns_dns_requests_total", &[("server", s)]), 6.0);
    // Responses by rcode.
    assert_eq!(
        v(
            "coredns_dns_responses_total",
            &[("server", s), z, ("rcode", "NOERROR")]
        ),
        4.0
    );
    assert_eq!(
        v(
            "coredns_dns_responses_total",
            &[("server", s), z, ("rcode", "NXDOMAIN")]
        ),
        2.0
    );
    // Durations: one observation per request.
    assert_eq!(
        v(
            "coredns_dns_request_duration_seconds_count",
            &[("server", s), z]
        ),
        6.0
    );
    assert_eq!(
        v(
            "coredns_dns_request_duration_seconds_bucket",
            &[("server", s), z, ("le", "+Inf")]
        ),
        6.0
    );
    assert!(
        v(
            "coredns_dns_request_duration_seconds_sum",
            &[("server", s), z]
        ) > 0.0
    );
    // Cache.
    assert_eq!(
        v(
            "coredns_cache_hits_total",
            &[("server", s), ("type", "success")]
        ),
        2.0
    );
    assert_eq!(
        v(
            "coredns_cache_hits_total",
            &[("server", s), ("type", "denial")]
        ),
        1.0
    );
    assert_eq!(v("coredns_cache_misses_total", &[("server", s)]), 3.0);
    assert_eq!(v("coredns_cache_requests_total", &[("server", s)]), 6.0);
    assert_eq!(
        v(
            "coredns_cache_entries",
            &[("server", s), ("type", "success")]
        ),
        2.0
    );
    assert_eq!(
        v(
            "coredns_cache_entries",
            &[("server", s), ("type", "denial")]
        ),
        1.0
    );
    // Upstream: what CoreDNS logged.
    core.sync_log();
    let fwd = [("proxy_name", "forward"), ("to", up.as_str())];
    assert_eq!(
        v(
            "coredns_proxy_request_duration_seconds_count",
            &[fwd[0], fwd[1], ("rcode", "NOERROR")]
        ),
        2.0
    );
    assert_eq!(
        v(
            "coredns_proxy_request_duration_seconds_count",
            &[fwd[0], fwd[1], ("rcode", "NXDOMAIN")]
        ),
        1.0
    );
    let upstream_queries = core.count_queries("www.test.", "A")
        + core.count_queries("www.test.", "AAAA")
        + core.count_queries("nope.test.", "A");
    assert_eq!(upstream_queries, 3);
    let conn = v(
        "coredns_proxy_conn_cache_hits_total",
        &[fwd[0], fwd[1], ("proto", "udp")],
    ) + v(
        "coredns_proxy_conn_cache_misses_total",
        &[fwd[0], fwd[1], ("proto", "udp")],
    );
    assert_eq!(
        conn, 3.0,
        "conn cache hits + misses should count the 3 UDP exchanges"
    );
    // Sockets are kept per thread: the UDP worker opened one for www A and
    // reused it for nope A; the TCP client's miss (www AAAA) was resolved on
    // the main runtime, which opened its own.
    assert_eq!(
        v(
            "coredns_proxy_conn_cache_misses_total",
            &[fwd[0], fwd[1], ("proto", "udp")]
        ),
        2.0
    );

    // Prefetch: prefetch_percent = 100 means any hit of an entry with >= 4
    // hits refreshes it (www above had at most 3, counting the miss).
    for _ in 0..7 {
        udp_query(nodens.dns, &Q::new("mail.test.", Rt::MX));
    }
    nodens.wait_metric("coredns_cache_prefetch_total", &[], 1.0);
    core.wait_queries("mail.test.", "MX", 2, Duration::from_secs(3));
    assert_labels(
        &parse_metrics(&nodens.metrics_text()),
        "coredns_cache_prefetch_total",
        &["server"],
    );

    // Serve-stale: short has TTL 2; the upstream goes away.
    let t0 = Instant::now();
    udp_query(nodens.dns, &Q::new("short.test.", Rt::A));
    let mut core = core;
    core.stop();
    sleep_until(t0, Duration::from_millis(3000));
    let r = udp_query(nodens.dns, &Q::new("short.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.2")], "not served stale");
    nodens.wait_metric("coredns_cache_served_stale_total", &[("server", s)], 1.0);
    assert_labels(
        &parse_metrics(&nodens.metrics_text()),
        "coredns_cache_served_stale_total",
        &["server"],
    );
}

/// A small cache: many distinct names cause evictions, counted, and the
/// entry count stays below the number of names.
#[test]
fn evictions_counted_when_the_cache_is_full() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup_with(|c, z| c.capacity_kib(16).zone(z));
    let names = 400;
    for i in 0..names {
        let r = udp_query(nodens.dns, &Q::new(&format!("n{i}.test."), Rt::A));
        assert_eq!(r.rcode(), rcode::NXDOMAIN);
    }
    let s = nodens.server_label();
    nodens.wait_metric("coredns_cache_evictions_total", &[], 1.0);
    let m = parse_metrics(&nodens.metrics_text());
    assert_labels(&m, "coredns_cache_evictions_total", &["server"]);
    let entries = sum_metric(&m, "coredns_cache_entries", &[("server", s.as_str())]);
    assert!(
        entries > 0.0 && entries < names as f64,
        "{entries} entries in a 16 KiB cache after {names} names"
    );
    // The cache still works.
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    core.sync_log();
    assert_eq!(core.count_queries("www.test.", "A"), 1);
}

/// Hits that arrive together are read in batches and counted in the
/// worker's own tally, added to the shared metrics at each batch's end,
/// before its replies are sent: once the last answer is in, every one of
/// them is counted (no wait), as requests, hits, responses, sizes and
/// durations, exactly once.
#[test]
fn a_burst_of_hits_is_counted_exactly_once_answered() {
    needs!(Need::CoreDns);
    let (_net, _core, nodens) = setup_with(|c, z| c.zone(z));
    let s = nodens.server_label();
    let labels = [("server", s.as_str()), ("zone", "test.")];
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    let before = |name: &str| nodens.metric(name, &labels);
    let names = [
        "coredns_dns_requests_total",
        "coredns_dns_responses_total",
        "coredns_dns_request_duration_seconds_count",
        "coredns_dns_request_size_bytes_count",
        "coredns_dns_response_size_bytes_count",
    ];
    let start: Vec<f64> = names.iter().map(|n| before(n)).collect();
    let hits_before = nodens.metric(
        "coredns_cache_hits_total",
        &[("server", s.as_str()), ("zones", "test.")],
    );

    let burst = 150u16;
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(nodens.dns).unwrap();
    for id in 0..burst {
        sock.send(&Q::new("www.test.", Rt::A).id(id).to_bytes())
            .unwrap();
    }
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answered = std::collections::HashSet::new();
    let mut buf = [0u8; 1500];
    while answered.len() < usize::from(burst) {
        let n = sock
            .recv(&mut buf)
            .expect("every query of the burst answered");
        assert!(n >= 12);
        answered.insert(u16::from_be_bytes([buf[0], buf[1]]));
    }

    // No wait: what was answered is counted.
    for (name, was) in names.iter().zip(&start) {
        assert_eq!(before(name) - was, f64::from(burst), "{name}");
    }
    let hits = nodens.metric(
        "coredns_cache_hits_total",
        &[("server", s.as_str()), ("zones", "test.")],
    );
    assert_eq!(
        hits - hits_before,
        f64::from(burst),
        "coredns_cache_hits_total"
    );
}
