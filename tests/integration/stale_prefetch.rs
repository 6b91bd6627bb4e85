//! Serve-stale (RFC 8767) and prefetch, against a real CoreDNS.
//!
//! Serve-stale: once the upstream is gone, an expired entry still within
//! stale_max_age is answered with TTL stale_ttl (30) and, for EDNS clients,
//! an Extended DNS Error (option 15) with INFO-CODE 3 "Stale Answer";
//! coredns_cache_served_stale_total counts them; a name never cached gets
//! SERVFAIL within query_timeout; past stale_max_age there is no stale answer.
//!
//! With max_misses_in_flight reached (misses waiting on a silent upstream),
//! an expired name gets its stale answer at once instead of being dropped,
//! and coredns_cache_served_stale_total counts it like any other.
//!
//! The stale answer does not wait out the upstream: a frozen upstream's
//! expired names are answered stale after stale_answer_timeout, and at once
//! once the upstream is marked down; with stale_answer_timeout 0
//! (immediate), at once while the refresh goes on behind, and the next
//! query gets the refreshed answer.
//!
//! Prefetch: an entry hit at least prefetch_min_hits times is refreshed from
//! the upstream when a hit finds at most prefetch_percent of its TTL left, so
//! it is still cached after its original expiry; an entry with fewer hits is
//! not refreshed.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use support::*;

fn stale_setup(stale_max_age: Duration) -> (Net, CoreDns, Nodens) {
    setup_with(|c, z| {
        c.query_timeout(secs(2))
            .stale_max_age(stale_max_age)
            .stale_ttl(secs(30))
            .zone(z.upstream_timeout(ms(500)))
    })
}

#[test]
fn serves_stale_when_upstream_is_down() {
    needs!(Need::CoreDns);
    let (_net, mut core, nodens) = stale_setup(secs(3600));

    let t0 = Instant::now();
    // short and short2 have TTL 2.
    assert_eq!(
        udp_query(nodens.dns, &Q::new("short.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.2")]
    );
    assert_eq!(
        udp_query(nodens.dns, &Q::new("short2.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.4")]
    );
    let stale_before = nodens.metric("coredns_cache_served_stale_total", &[]);
    core.stop();
    sleep_until(t0, Duration::from_millis(3200)); // both expired

    // No EDNS: stale data, TTL 30, no OPT.
    let r = udp_query(nodens.dns, &Q::new("short.test.", Rt::A).no_edns());
    assert_eq!(r.rcode(), rcode::NOERROR, "expired entry not served stale");
    assert_eq!(r.a(), vec![ipv4("192.0.2.2")]);
    assert!(
        r.ttls().iter().all(|&t| t == 30),
        "stale TTLs {:?}, expected 30",
        r.ttls()
    );
    assert!(r.opt().is_none(), "OPT in a reply to a query without one");
    assert!(
        r.elapsed <= Duration::from_millis(3000),
        "stale answer after {:?}",
        r.elapsed
    );

    // EDNS: also an EDE "Stale Answer".
    let r = udp_query(nodens.dns, &Q::new("short2.test.", Rt::A));
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert_eq!(r.a(), vec![ipv4("192.0.2.4")]);
    assert!(
        r.ttls().iter().all(|&t| t == 30),
        "stale TTLs {:?}, expected 30",
        r.ttls()
    );
    let opt = r.opt().expect("OPT in the reply to an EDNS query");
    assert!(
        opt.ede_codes().contains(&3),
        "no EDE INFO-CODE 3 (Stale Answer): options {:?}",
        opt.options()
    );

    nodens.wait_metric("coredns_cache_served_stale_total", &[], stale_before + 2.0);

    // Never cached: nothing stale to give.
    let r = udp_query_timeout(
        nodens.dns,
        &Q::new("www.test.", Rt::A),
        Duration::from_secs(6),
    )
    .expect("SERVFAIL, not silence");
    assert_eq!(r.rcode(), rcode::SERVFAIL);
    assert!(
        r.elapsed <= Duration::from_millis(3000),
        "SERVFAIL after {:?}, query_timeout is 2 s",
        r.elapsed
    );
}

/// Misses to a silent upstream take every place among the misses in
/// flight (5); an expired name asked then is answered stale at once (the
/// cap's path, not a miss job), and each of those answers is counted in
/// coredns_cache_served_stale_total.
#[test]
fn stale_answers_at_the_misses_in_flight_cap_are_counted() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let silent = Silent::bind(net.silent(0));
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .max_misses_in_flight(5)
            // No bulkhead: the server's own cap is what this fills
            // (tests/integration/bulkheads.rs has the zone's).
            .server_option("max_misses_in_flight_per_zone", "0")
            .query_timeout(secs(4))
            .stale_max_age(secs(3600))
            .stale_ttl(secs(30))
            .zone(Zone::new("test.", &[core.addr]))
            .zone(Zone::new("silent.", &[silent.addr]).upstream_timeout(secs(4))),
    );
    let t0 = Instant::now();
    // short and short2 have TTL 2.
    for (name, ip) in [("short.test.", "192.0.2.2"), ("short2.test.", "192.0.2.4")] {
        assert_eq!(
            udp_query(nodens.dns, &Q::new(name, Rt::A)).a(),
            vec![ipv4(ip)]
        );
    }
    sleep_until(t0, Duration::from_millis(2500)); // both expired

    let reason = [("reason", "too many misses in flight")];
    let rejected_before = nodens.metric("nodens_rejected_queries_total", &reason);
    let stale_before = nodens.metric("coredns_cache_served_stale_total", &[]);
    // Ten misses for the five places: the upstream never answers, so the
    // five taken stay taken past the queries below (query_timeout 4 s).
    let sock = UdpSocket::bind(SocketAddr::new(net.ip(30), 0)).unwrap();
    for i in 0..10 {
        sock.send_to(
            &Q::new(&format!("n{i}.silent."), Rt::A).to_bytes(),
            nodens.dns,
        )
        .unwrap();
    }
    nodens.wait_metric(
        "nodens_rejected_queries_total",
        &reason,
        rejected_before + 5.0,
    );

    let asked = 4;
    for i in 0..asked {
        let name = if i % 2 == 0 {
            "short.test."
        } else {
            "short2.test."
        };
        let r = udp_query(nodens.dns, &Q::new(name, Rt::A));
        assert_eq!(
            r.rcode(),
            rcode::NOERROR,
            "{name}: no stale answer at the cap"
        );
        assert!(
            r.ttls().iter().all(|&t| t == 30),
            "{name}: TTLs {:?}, a stale answer has 30",
            r.ttls()
        );
        let opt = r.opt().expect("OPT in the reply to an EDNS query");
        assert!(
            opt.ede_codes().contains(&3),
            "{name}: no EDE INFO-CODE 3 (Stale Answer): options {:?}",
            opt.options()
        );
        assert!(
            r.elapsed < ms(1000),
            "{name}: stale answer at the cap after {:?}",
            r.elapsed
        );
    }
    assert!(
        t0.elapsed() < secs(6),
        "the silent misses may have ended before the stale queries"
    );
    let rejected = nodens.metric("nodens_rejected_queries_total", &reason);
    assert!(
        rejected >= rejected_before + 5.0 + asked as f64,
        "the stale queries did not meet the cap: {rejected} rejected, {rejected_before} before"
    );
    assert_eq!(
        nodens.metric("coredns_cache_served_stale_total", &[]),
        stale_before + asked as f64,
        "stale answers served at the misses-in-flight cap not counted"
    );
    assert!(silent.drain().len() <= 5, "at most the cap went upstream");
}

/// stale_max_age = 2s: stale 0.8 s after expiry, SERVFAIL 3.5 s after.
#[test]
fn no_stale_answer_past_stale_max_age() {
    needs!(Need::CoreDns);
    let (_net, mut core, nodens) = stale_setup(secs(2));

    let t0 = Instant::now();
    assert_eq!(
        udp_query(nodens.dns, &Q::new("short.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.2")]
    );
    assert_eq!(
        udp_query(nodens.dns, &Q::new("short2.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.4")]
    );
    core.stop();

    sleep_until(t0, Duration::from_millis(2800));
    let r = udp_query(nodens.dns, &Q::new("short.test.", Rt::A));
    assert_eq!(
        r.rcode(),
        rcode::NOERROR,
        "within stale_max_age: stale answer expected"
    );
    assert_eq!(r.a(), vec![ipv4("192.0.2.2")]);

    sleep_until(t0, Duration::from_millis(5500));
    let r = udp_query_timeout(
        nodens.dns,
        &Q::new("short2.test.", Rt::A),
        Duration::from_secs(6),
    )
    .expect("SERVFAIL, not silence");
    assert_eq!(
        r.rcode(),
        rcode::SERVFAIL,
        "past stale_max_age: {:?}",
        r.msg.answers()
    );
}

/// pf and pf2 have TTL 8; with prefetch_percent = 40 the window opens when
/// <= 3.2 s remain (at 4.8 s). pf is hit twice early and once at 5.5 s:
/// refreshed, so at 9 s (after its original expiry) it is still a hit.
/// pf2 is hit only at 5.5 s (1 < prefetch_min_hits): not refreshed.
#[test]
fn prefetch_refreshes_popular_entries_only() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) =
        setup_with(|c, z| c.prefetch_min_hits(2).prefetch_percent(40).zone(z));

    let t0 = Instant::now();
    for _ in 0..3 {
        assert_eq!(
            udp_query(nodens.dns, &Q::new("pf.test.", Rt::A)).a(),
            vec![ipv4("192.0.2.5")]
        );
    }
    assert_eq!(
        udp_query(nodens.dns, &Q::new("pf2.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.6")]
    );
    core.sync_log();
    assert_eq!(core.count_queries("pf.test.", "A"), 1);
    let prefetch_before = nodens.metric("coredns_cache_prefetch_total", &[]);

    sleep_until(t0, Duration::from_millis(5500));
    let r = udp_query(nodens.dns, &Q::new("pf.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.5")]);
    assert!(
        r.ttls()[0] <= 3,
        "TTL {} at 5.5 s of 8: not the cached entry",
        r.ttls()[0]
    );
    assert_eq!(
        udp_query(nodens.dns, &Q::new("pf2.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.6")]
    );

    core.wait_queries("pf.test.", "A", 2, Duration::from_secs(3));
    nodens.wait_metric("coredns_cache_prefetch_total", &[], prefetch_before + 1.0);

    sleep_until(t0, Duration::from_millis(9000));
    let r = udp_query(nodens.dns, &Q::new("pf.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.5")]);
    assert!(r.ttls()[0] >= 3, "TTL {} after the refresh", r.ttls()[0]);
    core.sync_log();
    assert_eq!(
        core.count_queries("pf.test.", "A"),
        2,
        "pf: the 9 s query was not served from the prefetched entry"
    );
    assert_eq!(
        core.count_queries("pf2.test.", "A"),
        1,
        "pf2 (one hit) was prefetched"
    );
}

/// A frozen upstream (SIGSTOP): an expired name waits stale_answer_timeout
/// (300 ms) for it, then gets its stale answer; once the upstream is marked
/// down, stale answers come at once. Thawed, the fetch behind a stale answer
/// refreshes the entry and marks the upstream up.
#[test]
fn stale_answers_do_not_wait_out_a_frozen_upstream() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup_with(|c, z| {
        c.query_timeout(secs(4))
            .stale_answer_timeout(ms(300))
            .zone(z.upstream_timeout(secs(2)).max_fails(2))
    });
    let to = core.addr.to_string();
    let t0 = Instant::now();
    for name in ["short.test.", "short2.test.", "pf.test."] {
        assert_eq!(
            udp_query(nodens.dns, &Q::new(name, Rt::A)).rcode(),
            rcode::NOERROR
        );
    }
    core.proc.signal(libc::SIGSTOP);
    sleep_until(t0, Duration::from_millis(2500)); // short and short2 expired (TTL 2)

    // The upstream is up as far as nodens knows: the timer answers.
    let r = udp_query(nodens.dns, &Q::new("short.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.2")]);
    assert!(
        r.ttls().iter().all(|&t| t == 30),
        "stale TTLs {:?}",
        r.ttls()
    );
    assert!(
        r.elapsed >= ms(250) && r.elapsed < ms(1500),
        "stale answer after {:?}, stale_answer_timeout is 300 ms",
        r.elapsed
    );
    // Two queries time out upstream (the refresh behind the answer above and
    // a miss of a new name): the upstream is marked down.
    let _ = udp_query_timeout(nodens.dns, &Q::new("nothere.test.", Rt::A), secs(6));
    wait_until(secs(6), "the frozen upstream to be marked down", || {
        (nodens.metric("nodens_upstream_healthy", &[("to", &to)]) == 0.0).then_some(())
    });
    let r = udp_query(nodens.dns, &Q::new("short2.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.4")]);
    assert!(
        r.elapsed < ms(100),
        "stale answer with the upstream down after {:?}",
        r.elapsed
    );

    // Thawed: the fetch behind the next stale answer is answered, which
    // marks the upstream up and refreshes the entry.
    core.proc.signal(libc::SIGCONT);
    let refreshed = wait_until(secs(5), "a refreshed answer for short.test.", || {
        let r = udp_query(nodens.dns, &Q::new("short.test.", Rt::A));
        r.ttls().iter().all(|&t| t <= 2).then_some(r)
    });
    assert_eq!(refreshed.a(), vec![ipv4("192.0.2.2")]);
    assert_eq!(
        nodens.metric("nodens_upstream_healthy", &[("to", &to)]),
        1.0
    );
}

/// stale_answer_timeout 0 (immediate): an expired name is answered stale at
/// once although the upstream answers, and the refresh behind it puts the
/// fresh answer in the cache for the next query.
#[test]
fn immediate_stale_answers_and_refreshes_behind() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = setup_with(|c, z| c.stale_answer_timeout(ms(0)).zone(z));
    let first = udp_query(nodens.dns, &Q::new("short.test.", Rt::A));
    assert_eq!(first.a(), vec![ipv4("192.0.2.2")]);
    // Counted from the answer, not the question: the entry was cached
    // before it arrived, so 2.5 s after it the TTL (2) has run out however
    // long a loaded machine took to answer.
    let t0 = Instant::now();
    sleep_until(t0, Duration::from_millis(2500));
    let r = udp_query(nodens.dns, &Q::new("short.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.2")]);
    assert!(
        r.ttls().iter().all(|&t| t == 30),
        "stale TTLs {:?}",
        r.ttls()
    );
    let refreshed = wait_until(secs(10), "the refreshed answer in the cache", || {
        let r = udp_query(nodens.dns, &Q::new("short.test.", Rt::A));
        r.ttls().iter().all(|&t| t <= 2).then_some(r)
    });
    assert_eq!(refreshed.a(), vec![ipv4("192.0.2.2")]);
    // Asked upstream twice in all: the first query and the refresh.
    core.sync_log();
    assert_eq!(core.count_queries("short.test.", "A"), 2);
}

/// Behind a caching upstream (a CoreDNS with `cache 8` in front of the
/// zone's CoreDNS, as kubeadm's cluster DNS is), a prefetch brings back the
/// seconds that cache has left, not a new TTL: nodens counts two such
/// futile prefetches, stops prefetching in that zone, and from then on asks
/// the caching upstream about once per time the cache itself refetches.
/// Prefetch on (2 hits, the last half of the TTL), 10 queries a second for
/// `pf.test.` (TTL 8) over 24 s: three lives of the front cache's entry.
#[test]
fn prefetch_gives_up_behind_a_caching_upstream() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let zone = CoreDns::test_zone(net.upstream(1), "");
    let cache = format!("forward . {}\n  cache 8", zone.addr);
    let front = CoreDns::start_with_blocks(
        net.upstream(0),
        &[("ready.", zone_file("ready.", ""))],
        &[("test.", &cache)],
    );
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .prefetch_min_hits(2)
            .prefetch_percent(50)
            .zone(Zone::new("test.", &[front.addr])),
    );
    let t0 = Instant::now();
    for i in 0..240u32 {
        sleep_until(t0, Duration::from_millis(100) * i);
        let r = udp_query(nodens.dns, &Q::new("pf.test.", Rt::A));
        assert_eq!(r.a(), vec![ipv4("192.0.2.5")], "query {i}");
    }
    front.sync_log();
    zone.sync_log();
    let asked = front.count_queries("pf.test.", "A");
    let refetched = zone.count_queries("pf.test.", "A");
    let futile = nodens.metric("nodens_cache_prefetch_futile_total", &[]);
    let skipped = nodens.metric("nodens_cache_prefetch_skipped_total", &[]);
    println!(
        "caching upstream asked {asked} times, it refetched {refetched} times; \
         futile prefetches {futile}, skipped {skipped}"
    );
    assert_eq!(futile, 2.0, "two futile prefetches give up");
    assert!(skipped >= 2.0, "a prefetch skipped in each later life");
    // Each life of the cache's entry: the miss at its end, and at most one
    // more for the second of rounding between the two caches; plus the two
    // futile prefetches that taught nodens.
    assert!(
        asked <= 2 * refetched + 2,
        "asked the caching upstream {asked} times for its {refetched} refetches"
    );
}
