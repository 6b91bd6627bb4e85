//! Negative caching (RFC 2308) against a real CoreDNS.
//!
//! The test zone's SOA has TTL 3600 and MINIMUM 3, so NXDOMAIN and NODATA
//! answers are cached for min(3600, 3) = 3 s: a repeat within that time does
//! not reach the upstream, a repeat after it does. A zone's negative_max_ttl
//! clamps that time further.

use std::time::{Duration, Instant};

use support::*;

/// Asks `name`/`t` three times: at once (must be cached), and after
/// `expire_after` (must reach the upstream again).
fn cached_then_expired(
    core: &CoreDns,
    nodens: &Nodens,
    name: &str,
    t: Rt,
    want_rcode: u16,
    max_soa_ttl: u32,
    expire_after: Duration,
) {
    let qtype = t.to_string();
    let start = Instant::now();
    let first = udp_query(nodens.dns, &Q::new(name, t));
    assert_eq!(first.rcode(), want_rcode, "{name} {qtype}");
    assert!(
        first.msg.answers().is_empty(),
        "{name} {qtype}: negative answer has no answer records"
    );
    let soa = first
        .msg
        .name_servers()
        .iter()
        .find(|r| r.record_type() == Rt::SOA)
        .expect("SOA in authority");
    assert!(
        soa.ttl() <= max_soa_ttl,
        "SOA TTL {} in a negative answer, expected <= {max_soa_ttl}",
        soa.ttl()
    );
    core.wait_queries(name, &qtype, 1, Duration::from_secs(5));

    let second = udp_query(nodens.dns, &Q::new(name, t));
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "test too slow to check caching"
    );
    assert_eq!(second.rcode(), want_rcode);
    assert!(
        second
            .msg
            .name_servers()
            .iter()
            .any(|r| r.record_type() == Rt::SOA),
        "cached negative answer keeps its SOA"
    );
    core.sync_log();
    assert_eq!(
        core.count_queries(name, &qtype),
        1,
        "{name} {qtype}: repeat within the negative TTL reached the upstream"
    );

    sleep_until(start, expire_after);
    let third = udp_query(nodens.dns, &Q::new(name, t));
    assert_eq!(third.rcode(), want_rcode);
    core.wait_queries(name, &qtype, 2, Duration::from_secs(5));
}

#[test]
fn nxdomain_cached_for_soa_minimum() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup();
    cached_then_expired(
        &core,
        &nodens,
        "nope.test.",
        Rt::A,
        rcode::NXDOMAIN,
        3,
        Duration::from_millis(4200),
    );
}

#[test]
fn nodata_cached_for_soa_minimum() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup();
    // www has A and AAAA only.
    cached_then_expired(
        &core,
        &nodens,
        "www.test.",
        Rt::TXT,
        rcode::NOERROR,
        3,
        Duration::from_millis(4200),
    );
    // The NODATA entry did not shadow the name's positive data.
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );
}

/// negative_max_ttl = 1s: the negative entry is gone after ~1 s, well
/// before the SOA's 3 s, and the SOA TTL handed out is at most 1.
#[test]
fn negative_max_ttl_clamps() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup_with(|c, z| c.zone(z.negative_max_ttl(secs(1))));
    cached_then_expired(
        &core,
        &nodens,
        "nope.test.",
        Rt::A,
        rcode::NXDOMAIN,
        1,
        Duration::from_millis(2000),
    );
    cached_then_expired(
        &core,
        &nodens,
        "www.test.",
        Rt::TXT,
        rcode::NOERROR,
        1,
        Duration::from_millis(2000),
    );
}
