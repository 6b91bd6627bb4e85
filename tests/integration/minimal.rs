//! Minimal responses (`[[zone]] minimal = true`), side by side with
//! CoreDNS's `minimal` plugin in front of the same upstream: an answer keeps
//! its answer section only, a denial keeps its SOA, and the upstream itself
//! sends the authority and additional sections that were dropped.

use hickory_proto::rr::RecordType;
use support::*;

/// The authoritative upstream: `www`, with the zone's NS in every answer,
/// as CoreDNS's `file` plugin writes them.
fn upstream(net: &Net) -> CoreDns {
    CoreDns::start(
        net.upstream(0),
        &[("example.", zone_file("example.", "www 300 IN A 192.0.2.1"))],
    )
}

/// The sections after the answer, as counts: authority, and additional
/// without the OPT record.
fn rest(r: &Reply) -> (usize, usize) {
    (r.msg.name_servers().len(), r.msg.additionals().len())
}

#[test]
fn answers_keep_only_their_answer_section_as_coredns_minimal() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let up = upstream(&net);
    // CoreDNS as the peer: `minimal` in front of `forward` to the same upstream.
    let peer = CoreDns::start_with_blocks(
        net.upstream(1),
        &[("ready.", zone_file("ready.", "x 300 IN A 192.0.2.9"))],
        &[("example", &format!("minimal\n  forward . {}", up.addr))],
    );
    let cfg = Cfg::new(&net).zone(Zone::new("example.", &[up.addr]).minimal(true));
    let nodens = Nodens::start(&cfg);
    let www = Q::new("www.example.", Rt::A);

    // What is dropped is there to drop: the upstream's answer carries the
    // zone's NS in its authority section (CoreDNS's `file` adds no glue to
    // it; the unit tests cut an additional section too).
    assert_eq!(rest(&udp_query(up.addr, &www)), (1, 0), "NS in authority");

    // Twice: the miss, then the cache hit of what was stored.
    for q in [&www, &www] {
        let ours = udp_query(nodens.dns, q);
        let theirs = udp_query(peer.addr, q);
        assert!(!ours.answer_set().is_empty(), "{q:?} {:?}", ours.msg);
        assert_eq!(ours.answer_set(), theirs.answer_set(), "{q:?}");
        assert_eq!(rest(&ours), (0, 0), "nodens: {:?}", ours.msg);
        assert_eq!(rest(&theirs), (0, 0), "CoreDNS minimal: {:?}", theirs.msg);
    }

    // A denial keeps the SOA negative caching needs, in both.
    for (name, qtype) in [("nope.example.", Rt::A), ("www.example.", Rt::TXT)] {
        let q = Q::new(name, qtype);
        let (ours, theirs) = (udp_query(nodens.dns, &q), udp_query(peer.addr, &q));
        assert_eq!(ours.rcode(), theirs.rcode(), "{name} {qtype:?}");
        assert_eq!(
            ours.authority_set(),
            theirs.authority_set(),
            "{name} {qtype:?}"
        );
        let soa = ours.msg.name_servers().iter();
        assert!(
            soa.clone().any(|r| r.record_type() == RecordType::SOA),
            "{name} {qtype:?}: {:?}",
            ours.msg
        );
    }
}

/// Without `minimal`, the answer is the upstream's, sections and all.
#[test]
fn without_minimal_the_answer_keeps_its_sections() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let up = upstream(&net);
    let cfg = Cfg::new(&net).zone(Zone::new("example.", &[up.addr]));
    let nodens = Nodens::start(&cfg);
    let www = Q::new("www.example.", Rt::A);
    for _ in 0..2 {
        assert_eq!(rest(&udp_query(nodens.dns, &www)), (1, 0));
    }
}
