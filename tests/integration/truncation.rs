//! Large answers and UDP size limits, against a real CoreDNS.
//!
//! `big.test.` TXT is ~5.5 KB: CoreDNS truncates it over UDP, so nodens must
//! retry over TCP (the CoreDNS log shows a tcp query) and cache the full
//! RRset. Clients then get: over TCP, the full answer; over UDP, at most
//! their EDNS size (512 without EDNS, never above max_udp_payload = 1232 by
//! default) with TC set, and an OPT record only if they sent one.
//! `mid.test.` TXT (~900 bytes) sits between 512 and 1232.

use std::time::Duration;

use support::*;

/// The standard set-up, `cfg` applied to its configuration.
fn start(cfg: impl FnOnce(Cfg) -> Cfg) -> (Net, CoreDns, Nodens) {
    setup_with(|c, z| cfg(c.zone(z)))
}

/// A TCP client gets all records; nodens got them from CoreDNS over TCP
/// after a truncated UDP answer.
#[test]
fn big_answer_fetched_over_tcp_and_served_whole() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = start(|c| c);

    let r = tcp_query(nodens.dns, &Q::new("big.test.", Rt::TXT));
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert!(!r.tc(), "TC over TCP");
    assert_eq!(
        r.answers_of(Rt::TXT).len(),
        BIG_TXT_COUNT,
        "all TXT records"
    );
    let direct = tcp_query(core.addr, &Q::new("big.test.", Rt::TXT));
    assert_eq!(r.answer_set(), direct.answer_set());

    // CoreDNS logs a query after answering it, and the sync query below may
    // overtake a TCP one: wait for the three (nodens's truncated UDP try,
    // its TCP retry, the direct query) before counting.
    core.wait_queries("big.test.", "TXT", 3, Duration::from_secs(5));
    core.sync_log();
    assert!(
        core.count_tcp_queries("big.test.", "TXT") >= 1,
        "nodens never asked the upstream over TCP"
    );
    // Only the TCP exchange made by the test itself (`direct`) plus nodens's.
    assert_eq!(core.count_tcp_queries("big.test.", "TXT"), 2);

    // Cached whole: a second TCP client is served without the upstream.
    let again = tcp_query(nodens.dns, &Q::new("big.test.", Rt::TXT));
    assert_eq!(again.answers_of(Rt::TXT).len(), BIG_TXT_COUNT);
    core.sync_log();
    assert_eq!(
        core.count_tcp_queries("big.test.", "TXT"),
        2,
        "second TCP client went upstream"
    );
}

/// No EDNS: answers over 512 bytes come back truncated (TC, <= 512 bytes)
/// and without an OPT record; the full answer is still fetched (over TCP)
/// and cached, so the client's TCP retry is a hit.
#[test]
fn udp_without_edns_truncated_at_512_without_opt() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = start(|c| c);

    let small = udp_query(nodens.dns, &Q::new("www.test.", Rt::A).no_edns());
    assert!(!small.tc());
    assert!(
        small.opt().is_none(),
        "OPT in a reply to a query without one"
    );

    for (name, count) in [("big.test.", BIG_TXT_COUNT), ("mid.test.", MID_TXT_COUNT)] {
        let r = udp_query(nodens.dns, &Q::new(name, Rt::TXT).no_edns());
        assert!(r.tc(), "{name}: TC not set on an answer over 512 bytes");
        assert!(
            r.raw.len() <= 512,
            "{name}: {} bytes over UDP without EDNS",
            r.raw.len()
        );
        assert!(
            r.opt().is_none(),
            "{name}: OPT in a reply to a query without one"
        );
        assert!(
            r.answers_of(Rt::TXT).len() < count,
            "{name}: TC but all records present?"
        );

        let full = tcp_query(nodens.dns, &Q::new(name, Rt::TXT));
        assert_eq!(full.answers_of(Rt::TXT).len(), count, "{name} over TCP");
    }
    core.sync_log();
    assert!(
        core.count_tcp_queries("big.test.", "TXT") >= 1,
        "nodens never fetched big.test. over TCP"
    );
    assert_eq!(
        core.count_queries("mid.test.", "TXT"),
        1,
        "mid.test.: the client's TCP retry was not a cache hit"
    );
}

/// EDNS 4096 is capped at max_udp_payload (1232): big gets TC within 1232
/// bytes, with an OPT; mid fits whole. A client's smaller EDNS size (700)
/// bounds the answer too.
#[test]
fn udp_edns_size_capped_at_max_udp_payload() {
    needs!(Need::CoreDns);
    let (_net, _core, nodens) = start(|c| c);

    let big = udp_query(nodens.dns, &Q::new("big.test.", Rt::TXT).edns(4096));
    assert!(big.tc(), "TC not set on a ~5 KB answer");
    assert!(
        big.raw.len() <= 1232,
        "{} bytes over UDP: above max_udp_payload",
        big.raw.len()
    );
    assert!(big.opt().is_some(), "no OPT in the reply to an EDNS query");

    let mid = udp_query(nodens.dns, &Q::new("mid.test.", Rt::TXT).edns(4096));
    assert!(!mid.tc(), "mid.test. fits in 1232 bytes");
    assert_eq!(mid.answers_of(Rt::TXT).len(), MID_TXT_COUNT);
    assert!(mid.opt().is_some());

    let small_buf = udp_query(nodens.dns, &Q::new("mid.test.", Rt::TXT).edns(700));
    assert!(small_buf.tc(), "~900 bytes do not fit the client's 700");
    assert!(
        small_buf.raw.len() <= 700,
        "{} bytes sent to a client advertising 700",
        small_buf.raw.len()
    );
    assert!(small_buf.opt().is_some());
}

/// A lower server.max_udp_payload (600) caps even a client advertising 4096.
#[test]
fn max_udp_payload_setting_is_honoured() {
    needs!(Need::CoreDns);
    let (_net, _core, nodens) = start(|c| c.max_udp_payload(600));

    let r = udp_query(nodens.dns, &Q::new("mid.test.", Rt::TXT).edns(4096));
    assert!(
        r.tc(),
        "~900 bytes over a 600-byte max_udp_payload without TC"
    );
    assert!(
        r.raw.len() <= 600,
        "{} bytes with max_udp_payload = 600",
        r.raw.len()
    );
    let r = udp_query(nodens.dns, &Q::new("www.test.", Rt::A).edns(4096));
    assert!(!r.tc());
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
}
