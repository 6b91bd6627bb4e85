//! A UDP worker's replayed replies (decision 94), against a real CoreDNS
//! upstream: a query repeated with the same bytes but its ID is answered
//! as the cache stage would answer it, its TTLs counted down with the
//! entry's age, and counted as the cache hit it is. (A flush seen by the
//! next query on every worker while the same name streams in:
//! `control::a_flush_under_load_is_seen_by_the_next_query_on_every_worker`.)

use std::time::{Duration, Instant};

use support::*;

/// One miss, then the same query every 100 ms for 2.5 s: the first hit
/// is the cache's, the rest are replayed. Each reply carries its own ID,
/// the TTL falls by one for each second of the entry's age, upstream sees
/// one query, and every reply is counted.
#[test]
fn a_repeated_query_counts_its_ttl_down_and_is_counted() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup();
    let asked = |id: u16| Q::new("www.test.", Rt::A).id(id);
    let stored = Instant::now();
    let first = udp_query(nodens.dns, &asked(1));
    let t1 = first.ttls()[0];
    assert!((298..=300).contains(&t1), "first TTL {t1}");
    let mut last = t1;
    for n in 0..25u16 {
        // The waits are what is tested: the entry ages under the replays.
        sleep_until(stored, Duration::from_millis(100 * u64::from(n + 1)));
        let reply = udp_query(nodens.dns, &asked(100 + n));
        assert_eq!(reply.id(), 100 + n, "the asker's ID");
        assert_eq!(reply.a(), vec![ipv4("192.0.2.1")]);
        let ttl = reply.ttls()[0];
        let aged = stored.elapsed().as_secs_f64();
        assert!(ttl <= last, "the TTL went up: {last} then {ttl}");
        assert!(
            f64::from(t1 - ttl) <= aged.ceil() + 1.0,
            "TTL {ttl} after {aged:.1} s from {t1}"
        );
        last = ttl;
    }
    assert!(
        (2..=4).contains(&(t1 - last)),
        "the TTL went from {t1} to {last} in 2.5 s"
    );
    core.sync_log();
    assert_eq!(core.count_queries("www.test.", "A"), 1, "one miss");
    let server = nodens.server_label();
    let server = [("server", server.as_str())];
    nodens.wait_metric("coredns_dns_responses_total", &server, 26.0);
    assert_eq!(nodens.metric("coredns_dns_requests_total", &server), 26.0);
    assert_eq!(nodens.metric("coredns_cache_hits_total", &server), 25.0);
    assert_eq!(
        nodens.metric("coredns_dns_request_duration_seconds_count", &server),
        26.0
    );
}
