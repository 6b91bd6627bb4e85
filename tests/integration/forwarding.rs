//! Forwarding and the positive cache, against real CoreDNS upstreams.
//!
//! Proves that nodens returns the upstream's RRsets unchanged, answers a
//! repeated query from its cache (the upstream sees one query, the hit
//! counter moves), counts TTLs down, keeps the client's ID and question
//! case, routes by longest zone suffix, works over IPv6 on both sides, moves
//! to the next upstream after upstream_timeout, and answers SERVFAIL within
//! query_timeout when no upstream answers.

use std::time::{Duration, Instant};

use support::*;

/// Every answer (RRsets, rcode, the authority of a negative answer) is the
/// one CoreDNS gives when asked directly.
#[test]
fn answers_match_upstream() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup();

    let cases = [
        ("www.test.", Rt::A),
        ("www.test.", Rt::AAAA),
        ("mail.test.", Rt::MX),
        ("alias.test.", Rt::A), // CNAME chain to www
        ("test.", Rt::NS),
        ("test.", Rt::SOA),
        ("mid.test.", Rt::TXT),
        ("nope.test.", Rt::A),  // NXDOMAIN
        ("www.test.", Rt::TXT), // NODATA
    ];
    for (name, t) in cases {
        let direct = udp_query(core.addr, &Q::new(name, t));
        // Twice: the miss and the hit must both match.
        for round in ["miss", "hit"] {
            let via = udp_query(nodens.dns, &Q::new(name, t));
            assert_eq!(via.rcode(), direct.rcode(), "{name} {t} ({round}): rcode");
            assert_eq!(
                via.answer_set(),
                direct.answer_set(),
                "{name} {t} ({round}): answer RRsets"
            );
            assert!(!via.tc(), "{name} {t} ({round}): unexpected TC");
            if direct.msg.answers().is_empty() {
                assert_eq!(
                    via.authority_set(),
                    direct.authority_set(),
                    "{name} {t} ({round}): authority (SOA)"
                );
            }
        }
    }
    let chain = udp_query(nodens.dns, &Q::new("alias.test.", Rt::A));
    assert_eq!(
        chain.answers_of(Rt::CNAME).len(),
        2,
        "CNAME chain kept: {:?}",
        chain.msg.answers()
    );
    assert_eq!(chain.a(), vec![ipv4("192.0.2.1")]);
}

/// The second identical query is a cache hit: coredns_cache_hits_total goes
/// up by one and the upstream logged exactly one query.
#[test]
fn second_query_is_a_cache_hit() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup();

    let first = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(first.a(), vec![ipv4("192.0.2.1")]);
    core.wait_queries("www.test.", "A", 1, Duration::from_secs(5));
    let hits_before = nodens.metric("coredns_cache_hits_total", &[]);

    let second = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(second.a(), vec![ipv4("192.0.2.1")]);
    let hits_after = nodens.wait_metric("coredns_cache_hits_total", &[], hits_before + 1.0);
    assert_eq!(hits_after, hits_before + 1.0, "exactly one more cache hit");

    core.sync_log();
    assert_eq!(
        core.count_queries("www.test.", "A"),
        1,
        "upstream saw only the miss"
    );
}

/// TTLs of a cached answer count down with time.
#[test]
fn ttls_count_down() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup();

    let first = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    let t1 = first.ttls()[0];
    assert!((298..=300).contains(&t1), "first TTL {t1}");
    let start = Instant::now();
    // The wait is what is tested: the cached entry ages.
    sleep_until(start, Duration::from_millis(2300));
    let second = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    let t2 = second.ttls()[0];
    assert!(t2 < t1, "TTL did not decrease: {t1} then {t2}");
    assert!(
        (1..=4).contains(&(t1 - t2)),
        "TTL went from {t1} to {t2} in ~2.3 s"
    );
    core.sync_log();
    assert_eq!(
        core.count_queries("www.test.", "A"),
        1,
        "second answer came from the cache"
    );
}

/// The client's ID and the exact bytes (case) of its question come back,
/// on the miss and on a hit asked with another case, over UDP and TCP.
#[test]
fn client_id_and_question_case_preserved() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup();

    let cases = [
        ("WwW.TeSt.", 0xBEEF),
        ("wWW.tEST.", 0x0001),
        ("WWW.TEST.", 0xFFFF),
    ];
    for (name, id) in cases {
        let q = Q::new(name, Rt::A).id(id);
        let sent = question_bytes(&q.to_bytes());
        for (proto, r) in [
            ("udp", udp_query(nodens.dns, &q)),
            ("tcp", tcp_query(nodens.dns, &q)),
        ] {
            assert_eq!(r.id(), id, "{proto} {name}: ID");
            assert_eq!(
                r.question_bytes(),
                sent,
                "{proto} {name}: question bytes (case) changed"
            );
            assert_eq!(r.a(), vec![ipv4("192.0.2.1")], "{proto} {name}");
        }
    }
    core.sync_log();
    assert_eq!(
        core.count_queries("www.test.", "A"),
        1,
        "the case-variants share one cache entry"
    );
}

/// An upstream that writes owner names out in full, in the case it was
/// asked (CoreDNS's `whoami`, like its `kubernetes` plugin), would hand
/// 0x20's random case on to clients: owners come back in the client's
/// spelling instead, whole (the A record) or as a tail (`_udp.<name>`).
#[test]
fn random_case_never_reaches_answer_owner_names() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::start_with_blocks(
        net.upstream(0),
        &[("test.", test_zone(""))],
        &[("who.test.", "whoami")],
    );
    let nodens = Nodens::start(&Cfg::new(&net).zone(Zone::new("test.", &[core.addr])));
    for name in [
        "a-long-name-with-many-letters.who.test.",
        "A-Long-Name-With-Many-Letters.Who.Test.",
        "a-long-name-with-many-letters.who.test.",
    ] {
        let r = udp_query(nodens.dns, &Q::new(name, Rt::A));
        // whoami puts both records in the additional section.
        let owners: Vec<String> = r
            .msg
            .additionals()
            .iter()
            .map(|rr| rr.name().to_string())
            .collect();
        // Spelled as asked, or (from the cache) as the first client asked.
        let first = "a-long-name-with-many-letters.who.test.";
        assert!(
            [name, first]
                .iter()
                .any(|n| owners == vec![n.to_string(), format!("_udp.{n}")]),
            "owners spelled as a client asked, not in a random case: {owners:?}"
        );
    }
}

/// `x.sub.test.` goes to the `sub.test.` zone's upstream (longest suffix),
/// everything else under `test.` to the other one.
#[test]
fn routes_by_longest_zone_suffix() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let parent = CoreDns::test_zone(net.upstream(0), "x.sub 300 IN A 192.0.2.10");
    let child = CoreDns::start(
        net.upstream(1),
        &[("sub.test.", zone_file("sub.test.", "x 300 IN A 192.0.2.20"))],
    );
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .zone(Zone::new("test.", &[parent.addr]))
            .zone(Zone::new("sub.test.", &[child.addr])),
    );

    assert_eq!(
        udp_query(nodens.dns, &Q::new("x.sub.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.20")]
    );
    assert_eq!(
        udp_query(nodens.dns, &Q::new("X.Sub.Test.", Rt::AAAA)).rcode(),
        rcode::NOERROR
    );
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );

    parent.sync_log();
    child.sync_log();
    assert_eq!(child.count_queries("x.sub.test.", "A"), 1);
    assert_eq!(child.count_queries("x.sub.test.", "AAAA"), 1);
    assert_eq!(child.count_queries("www.test.", "A"), 0);
    assert_eq!(parent.count_queries("www.test.", "A"), 1);
    assert_eq!(
        parent.count_queries("x.sub.test.", "A"),
        0,
        "parent zone's upstream must not get sub.test. names"
    );
}

/// nodens listens on ::1 and forwards to an upstream on ::1.
#[test]
fn ipv6_listener_and_upstream() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.v6(1), "");
    let listen6 = net.v6(0);
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .listen(&[net.nodens(), listen6])
            .zone(Zone::new("test.", &[core.addr])),
    );

    let r = udp_query(listen6, &Q::new("www.test.", Rt::AAAA));
    assert_eq!(
        r.answer_set(),
        udp_query(core.addr, &Q::new("www.test.", Rt::AAAA)).answer_set()
    );
    let r = tcp_query(listen6, &Q::new("www.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    // The IPv4 listener shares the cache.
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );

    core.sync_log();
    // AAAA: the test's own direct query plus nodens's miss; A: nodens's miss.
    assert_eq!(core.count_queries("www.test.", "AAAA"), 2);
    assert_eq!(core.count_queries("www.test.", "A"), 1);
    let www: Vec<_> = core
        .queries()
        .into_iter()
        .filter(|q| q.name == "www.test.")
        .collect();
    assert!(
        www.iter().all(|q| q.remote.contains("::1")),
        "queries came over IPv6: {www:?}"
    );
}

/// With a silent first upstream, the answer comes from the second one after
/// about upstream_timeout; the silent one did get the query first, with a
/// fresh ID and not from the listening port.
#[test]
fn timeout_then_next_upstream() {
    needs!(Need::CoreDns);
    let (_net, silent, core, nodens) = silent_first();

    let q = Q::new("www.test.", Rt::A).id(0x5151);
    let r = udp_query(nodens.dns, &q);
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    assert!(
        r.elapsed >= Duration::from_millis(800),
        "answered in {:?}: the silent upstream was not waited for",
        r.elapsed
    );
    assert!(
        r.elapsed <= Duration::from_millis(3000),
        "answered in {:?}: far beyond upstream_timeout",
        r.elapsed
    );

    let got = silent.drain();
    assert_eq!(
        got.len(),
        1,
        "the silent upstream got exactly one query: {got:?}"
    );
    let (from, pkt) = &got[0];
    let m = Reply::parse(pkt.clone(), Duration::ZERO);
    assert_ne!(m.id(), 0x5151, "upstream query reuses the client's ID");
    assert_eq!(
        question_of(pkt),
        Some(("www.test.".to_string(), Rt::A)),
        "question forwarded"
    );
    assert_ne!(
        from.port(),
        nodens.dns.port(),
        "upstream query sent from the listening port"
    );
    core.sync_log();
    assert_eq!(core.count_queries("www.test.", "A"), 1);
}

/// All upstreams silent: SERVFAIL after each was tried, within query_timeout.
#[test]
fn servfail_when_all_upstreams_fail() {
    let net = Net::alloc();
    let s0 = Silent::bind(net.silent(0));
    let s1 = Silent::bind(net.silent(1));
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .query_timeout(secs(4))
            .zone(Zone::new("test.", &[s0.addr, s1.addr]).upstream_timeout(secs(1))),
    );

    let r = udp_query_timeout(
        nodens.dns,
        &Q::new("www.test.", Rt::A),
        Duration::from_secs(8),
    )
    .expect("an answer, not silence");
    assert_eq!(r.rcode(), rcode::SERVFAIL);
    assert!(
        r.elapsed >= Duration::from_millis(1500),
        "SERVFAIL after {:?}: both upstreams should have been tried",
        r.elapsed
    );
    assert!(
        r.elapsed <= Duration::from_millis(4500),
        "SERVFAIL after {:?}: beyond query_timeout",
        r.elapsed
    );
    assert_eq!(s0.drain().len(), 1, "first upstream tried once");
    assert_eq!(s1.drain().len(), 1, "second upstream tried once");
}

/// query_timeout bounds the whole miss even when the upstreams' own
/// timeouts add up to more.
#[test]
fn servfail_within_query_timeout() {
    let net = Net::alloc();
    let s0 = Silent::bind(net.silent(0));
    let s1 = Silent::bind(net.silent(1));
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .query_timeout(secs(1))
            .zone(Zone::new("test.", &[s0.addr, s1.addr]).upstream_timeout(secs(3))),
    );

    let r = udp_query_timeout(
        nodens.dns,
        &Q::new("www.test.", Rt::A),
        Duration::from_secs(8),
    )
    .expect("an answer, not silence");
    assert_eq!(r.rcode(), rcode::SERVFAIL);
    assert!(
        r.elapsed >= Duration::from_millis(700),
        "SERVFAIL after only {:?}",
        r.elapsed
    );
    assert!(
        r.elapsed <= Duration::from_millis(1800),
        "SERVFAIL after {:?}, query_timeout is 1 s",
        r.elapsed
    );
    assert_eq!(s0.drain().len(), 1);
}

/// A burst of slow misses leaves a socket per concurrent miss free for
/// reuse, on the UDP worker (UDP clients) and on the main runtime (TCP
/// clients); with no query after it, every one is closed within their
/// 5 s age and the 1 s sweep, not kept until the next miss.
#[test]
fn a_bursts_upstream_sockets_close_when_idle() {
    needs!(Need::CoreDns, Need::Tool("ss"));
    let (_net, core, nodens) = setup_custom(
        |net| CoreDns::test_zone_delayed(net.upstream(0), "200ms"),
        |c, z| c.zone(z),
    );
    let before = udp_connected_to(core.addr);
    let t0 = Instant::now();
    let answered = in_parallel(48, |i| {
        let q = Q::new(&format!("burst-{i}.delay.test."), Rt::A);
        let r = if i % 2 == 0 {
            udp_query(nodens.dns, &q)
        } else {
            tcp_query(nodens.dns, &q)
        };
        r.a() == vec![ipv4(ERRATIC_A)]
    });
    assert!(answered.iter().all(|&a| a), "every burst query answered");
    let after_burst = udp_connected_to(core.addr);
    assert!(
        after_burst >= before + 8,
        "the burst's sockets are kept for reuse: {before} before, {after_burst} after"
    );
    let closed_at = wait_until(secs(10), "the burst's sockets to close", || {
        (udp_connected_to(core.addr) <= before).then(Instant::now)
    });
    assert!(
        closed_at - t0 >= Duration::from_secs(4),
        "closed after {:?}, before their age",
        closed_at - t0
    );
}
