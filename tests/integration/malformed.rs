//! Malformed and odd packets.
//!
//! A named corpus of packets, each with the outcome the contract gives it:
//! dropped silently (shorter than a header, or QR=1), NOTIMP (opcode other
//! than QUERY), FORMERR (bad counts, bad names, OPT misuse, truncation),
//! BADVERS (EDNS version > 0), REFUSED (AXFR/IXFR), or a normal answer
//! (trailing bytes ignored, legal extremes). Each is sent over UDP and,
//! framed, over TCP; every reply echoes the ID with QR=1. Afterwards nodens
//! is still alive and answers a legitimate query correctly. Separately,
//! packets shaped like responses and carrying fake answers, whether sent to
//! the listener or, while a miss is in flight, to nodens's upstream socket
//! with a wrong ID or from a wrong address, never get into the cache.

use std::net::UdpSocket;
use std::thread;
use std::time::Duration;

use support::*;

// ---- packet building -------------------------------------------------------

const RD: u16 = 0x0100;
const QR: u16 = 0x8000;
const AA: u16 = 0x0400;

fn opcode(op: u16) -> u16 {
    op << 11
}

fn header(id: u16, flags: u16, qd: u16, an: u16, ns: u16, ar: u16) -> Vec<u8> {
    [id, flags, qd, an, ns, ar]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect()
}

/// A wire-format name from labels (no compression).
fn name(labels: &[&str]) -> Vec<u8> {
    let mut v = Vec::new();
    for l in labels {
        v.push(l.len() as u8);
        v.extend_from_slice(l.as_bytes());
    }
    v.push(0);
    v
}

fn www() -> Vec<u8> {
    name(&["www", "test"])
}

fn question(name: &[u8], qtype: u16, qclass: u16) -> Vec<u8> {
    let mut v = name.to_vec();
    v.extend_from_slice(&qtype.to_be_bytes());
    v.extend_from_slice(&qclass.to_be_bytes());
    v
}

fn rr(name: &[u8], rtype: u16, class: u16, ttl: u32, rdata: &[u8]) -> Vec<u8> {
    let mut v = name.to_vec();
    v.extend_from_slice(&rtype.to_be_bytes());
    v.extend_from_slice(&class.to_be_bytes());
    v.extend_from_slice(&ttl.to_be_bytes());
    v.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    v.extend_from_slice(rdata);
    v
}

/// An OPT record: owner, UDP size, extended RCODE, version, flags, options.
fn opt(owner: &[u8], size: u16, ext_rcode: u8, version: u8, flags: u16, rdata: &[u8]) -> Vec<u8> {
    let ttl = (u32::from(ext_rcode) << 24) | (u32::from(version) << 16) | u32::from(flags);
    rr(owner, 41, size, ttl, rdata)
}

fn root_opt() -> Vec<u8> {
    opt(&[0], 1232, 0, 0, 0, &[])
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A standard query for www.test. A with this header.
fn query_with(id: u16, flags: u16) -> Vec<u8> {
    cat(&[&header(id, flags, 1, 0, 0, 0), &question(&www(), 1, 1)])
}

// ---- the corpus ------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    /// No reply at all.
    Dropped,
    /// A reply with this (full) RCODE.
    Rcode(u16),
}
use Outcome::*;

struct Case {
    name: &'static str,
    packet: Vec<u8>,
    expect: Outcome,
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |name: &'static str, packet: Vec<u8>, expect: Outcome| {
        cases.push(Case {
            name,
            packet,
            expect,
        })
    };
    let id = 0x4d00;
    let q = question(&www(), 1, 1);

    // Too short for a header.
    add("empty packet", vec![], Dropped);
    add("one byte", vec![0x4d], Dropped);
    add(
        "eleven bytes of header",
        header(id, RD, 1, 0, 0, 0)[..11].to_vec(),
        Dropped,
    );

    // QR=1: responses are never answered.
    add("bare header with QR=1", header(id, QR, 0, 0, 0, 0), Dropped);
    add("response with a question", query_with(id, QR | RD), Dropped);
    add(
        "response with a fake answer",
        cat(&[
            &header(id, QR | AA | RD, 1, 1, 0, 0),
            &q,
            &rr(&www(), 1, 1, 86400, &[6, 6, 6, 6]),
        ]),
        Dropped,
    );
    add(
        "response with opcode NOTIFY",
        query_with(id, QR | opcode(4)),
        Dropped,
    );
    add(
        "response with RCODE FORMERR",
        query_with(id, QR | 1),
        Dropped,
    );

    // Opcodes other than QUERY.
    add(
        "opcode IQUERY",
        query_with(id, opcode(1) | RD),
        Rcode(rcode::NOTIMP),
    );
    add(
        "opcode STATUS",
        query_with(id, opcode(2)),
        Rcode(rcode::NOTIMP),
    );
    add(
        "opcode NOTIFY",
        query_with(id, opcode(4)),
        Rcode(rcode::NOTIMP),
    );
    add(
        "opcode UPDATE",
        query_with(id, opcode(5)),
        Rcode(rcode::NOTIMP),
    );
    add(
        "opcode 15 (unassigned)",
        query_with(id, opcode(15)),
        Rcode(rcode::NOTIMP),
    );

    // Counts.
    add(
        "QDCOUNT 0, nothing else",
        header(id, RD, 0, 0, 0, 0),
        Rcode(rcode::FORMERR),
    );
    add(
        "QDCOUNT 0 with a question after the header",
        cat(&[&header(id, RD, 0, 0, 0, 0), &q]),
        Rcode(rcode::FORMERR),
    );
    add(
        "QDCOUNT 1 but no question",
        header(id, RD, 1, 0, 0, 0),
        Rcode(rcode::FORMERR),
    );
    add(
        "QDCOUNT 2",
        cat(&[
            &header(id, RD, 2, 0, 0, 0),
            &q,
            &question(&name(&["mail", "test"]), 15, 1),
        ]),
        Rcode(rcode::FORMERR),
    );
    add(
        "ANCOUNT 1 in a query",
        cat(&[
            &header(id, RD, 1, 1, 0, 0),
            &q,
            &rr(&www(), 1, 1, 300, &[192, 0, 2, 1]),
        ]),
        Rcode(rcode::FORMERR),
    );
    add(
        "NSCOUNT 1 in a query",
        cat(&[
            &header(id, RD, 1, 0, 1, 0),
            &q,
            &rr(&name(&["test"]), 2, 1, 300, &name(&["ns", "test"])),
        ]),
        Rcode(rcode::FORMERR),
    );

    // Names.
    let l63 = "a".repeat(63);
    let l64 = "a".repeat(64);
    let l56 = "c".repeat(56);
    let l57 = "c".repeat(57);
    add(
        "label of 64 bytes",
        cat(&[
            &header(id, RD, 1, 0, 0, 0),
            &question(&name(&[&l64, "test"]), 1, 1),
        ]),
        Rcode(rcode::FORMERR),
    );
    let name256 = name(&[&l63, &l63, &l63, &l57, "test"]);
    assert_eq!(name256.len(), 256);
    add(
        "name of 256 bytes",
        cat(&[&header(id, RD, 1, 0, 0, 0), &question(&name256, 1, 1)]),
        Rcode(rcode::FORMERR),
    );
    add(
        "question name is a compression pointer",
        cat(&[&header(id, RD, 1, 0, 0, 0), &[0xc0, 0x0c], &[0, 1, 0, 1]]),
        Rcode(rcode::FORMERR),
    );
    add(
        "compression pointer after a label",
        cat(&[
            &header(id, RD, 1, 0, 0, 0),
            b"\x03www\xc0\x0c",
            &[0, 1, 0, 1],
        ]),
        Rcode(rcode::FORMERR),
    );
    add(
        "extended label type 0x40",
        cat(&[
            &header(id, RD, 1, 0, 0, 0),
            b"\x41\x03www\x00",
            &[0, 1, 0, 1],
        ]),
        Rcode(rcode::FORMERR),
    );
    add(
        "reserved label type 0x80",
        cat(&[&header(id, RD, 1, 0, 0, 0), b"\x83www\x00", &[0, 1, 0, 1]]),
        Rcode(rcode::FORMERR),
    );
    add(
        "name cut before its root label",
        cat(&[&header(id, RD, 1, 0, 0, 0), b"\x03www\x04te"]),
        Rcode(rcode::FORMERR),
    );
    add(
        "question cut inside QTYPE",
        cat(&[&header(id, RD, 1, 0, 0, 0), &www(), &[0]]),
        Rcode(rcode::FORMERR),
    );
    add(
        "question without QCLASS",
        cat(&[&header(id, RD, 1, 0, 0, 0), &www(), &[0, 1]]),
        Rcode(rcode::FORMERR),
    );

    // OPT misuse and truncated additional section.
    add(
        "QTYPE OPT in the question",
        cat(&[&header(id, RD, 1, 0, 0, 0), &question(&www(), 41, 1)]),
        Rcode(rcode::FORMERR),
    );
    add(
        "two OPT records",
        cat(&[&header(id, RD, 1, 0, 0, 2), &q, &root_opt(), &root_opt()]),
        Rcode(rcode::FORMERR),
    );
    add(
        "OPT with a non-root owner",
        cat(&[
            &header(id, RD, 1, 0, 0, 1),
            &q,
            &opt(&www(), 1232, 0, 0, 0, &[]),
        ]),
        Rcode(rcode::FORMERR),
    );
    add(
        "ARCOUNT 1 but nothing follows",
        cat(&[&header(id, RD, 1, 0, 0, 1), &q]),
        Rcode(rcode::FORMERR),
    );
    add(
        "ARCOUNT 2 with one OPT",
        cat(&[&header(id, RD, 1, 0, 0, 2), &q, &root_opt()]),
        Rcode(rcode::FORMERR),
    );
    let opt_full = root_opt();
    add(
        "OPT cut inside its fixed part",
        cat(&[&header(id, RD, 1, 0, 0, 1), &q, &opt_full[..5]]),
        Rcode(rcode::FORMERR),
    );
    let mut short_rdata = opt(&[0], 1232, 0, 0, 0, &[0, 10, 0, 4, 1, 2]);
    short_rdata.truncate(short_rdata.len() - 2); // RDLENGTH says 6, 4 follow
    add(
        "OPT RDATA shorter than RDLENGTH",
        cat(&[&header(id, RD, 1, 0, 0, 1), &q, &short_rdata]),
        Rcode(rcode::FORMERR),
    );

    // EDNS versions.
    add(
        "EDNS version 1",
        cat(&[
            &header(id, RD, 1, 0, 0, 1),
            &q,
            &opt(&[0], 1232, 0, 1, 0, &[]),
        ]),
        Rcode(rcode::BADVERS),
    );
    add(
        "EDNS version 255 with DO",
        cat(&[
            &header(id, RD, 1, 0, 0, 1),
            &q,
            &opt(&[0], 4096, 0, 255, 0x8000, &[]),
        ]),
        Rcode(rcode::BADVERS),
    );

    // Zone transfers.
    add(
        "QTYPE AXFR",
        cat(&[
            &header(id, 0, 1, 0, 0, 0),
            &question(&name(&["test"]), 252, 1),
        ]),
        Rcode(rcode::REFUSED),
    );
    add(
        "QTYPE IXFR",
        cat(&[
            &header(id, 0, 1, 0, 0, 0),
            &question(&name(&["test"]), 251, 1),
        ]),
        Rcode(rcode::REFUSED),
    );
    add(
        "QTYPE AXFR with EDNS",
        cat(&[
            &header(id, 0, 1, 0, 0, 1),
            &question(&name(&["test"]), 252, 1),
            &root_opt(),
        ]),
        Rcode(rcode::REFUSED),
    );

    // Odd but legal.
    add(
        "trailing bytes after the question",
        cat(&[&query_with(id, RD), b"\xde\xad\xbe\xef garbage"]),
        Rcode(rcode::NOERROR),
    );
    add(
        "trailing bytes after the OPT",
        cat(&[&header(id, RD, 1, 0, 0, 1), &q, &root_opt(), &[0; 7]]),
        Rcode(rcode::NOERROR),
    );
    add(
        "label of exactly 63 bytes",
        cat(&[
            &header(id, RD, 1, 0, 0, 0),
            &question(&name(&[&l63, "test"]), 1, 1),
        ]),
        Rcode(rcode::NXDOMAIN),
    );
    let name255 = name(&[&l63, &l63, &l63, &l56, "test"]);
    assert_eq!(name255.len(), 255);
    add(
        "name of exactly 255 bytes",
        cat(&[&header(id, RD, 1, 0, 0, 0), &question(&name255, 1, 1)]),
        Rcode(rcode::NXDOMAIN),
    );

    cases
}

// ---- checking outcomes -----------------------------------------------------

/// Checks one reply (or its absence) against the expected outcome.
fn check(case: &Case, proto: &str, reply: Option<Vec<u8>>) {
    let what = format!("{} over {proto}", case.name);
    match (case.expect, reply) {
        (Dropped, None) => {}
        (Dropped, Some(r)) => panic!("{what}: expected no reply, got {r:02x?}"),
        (Rcode(want), None) => panic!("{what}: expected RCODE {want}, got no reply"),
        (Rcode(want), Some(r)) => {
            let m = RawMsg::parse(&r)
                .unwrap_or_else(|| panic!("{what}: reply does not parse: {r:02x?}"));
            let sent_id = u16::from_be_bytes([case.packet[0], case.packet[1]]);
            assert_eq!(m.id, sent_id, "{what}: ID not echoed");
            assert!(m.qr(), "{what}: QR not set in the reply");
            let sent_opcode =
                ((u16::from_be_bytes([case.packet[2], case.packet[3]]) >> 11) & 0xf) as u8;
            assert_eq!(m.opcode(), sent_opcode, "{what}: opcode not echoed");
            assert!(m.qdcount <= 1, "{what}: QDCOUNT {} in the reply", m.qdcount);
            assert_eq!(m.rcode(), want, "{what}: RCODE (reply {r:02x?})");
            if want == rcode::BADVERS {
                assert!(
                    m.opt.is_some(),
                    "{what}: BADVERS needs an OPT record to carry it"
                );
            }
            if want == rcode::NOERROR {
                let reply = Reply::parse(r, Duration::ZERO);
                assert_eq!(reply.a(), vec![ipv4("192.0.2.1")], "{what}: wrong answer");
            }
        }
    }
}

/// How long to wait before calling a packet dropped.
const DROP_WAIT: Duration = Duration::from_millis(400);

fn wait_for(expect: Outcome) -> Duration {
    if expect == Dropped {
        DROP_WAIT
    } else {
        Duration::from_secs(5)
    }
}

fn send_tcp(server: std::net::SocketAddr, case: &Case) -> Option<Vec<u8>> {
    let mut c = Tcp::connect(server);
    // A write error means the server already closed: no reply.
    c.send(&case.packet).ok()?;
    match c.recv(wait_for(case.expect)) {
        TcpRead::Msg(m) => Some(m),
        TcpRead::Closed | TcpRead::Timeout => None,
    }
}

#[test]
fn corpus_gets_the_specified_outcomes() {
    needs!(Need::CoreDns);
    let (_net, _core, mut nodens) = setup();

    let cases = corpus();
    assert!(cases.len() >= 30, "corpus has only {} packets", cases.len());
    let mut names: Vec<_> = cases.iter().map(|c| c.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be distinct");

    for case in &cases {
        let reply = udp_exchange(nodens.dns, &case.packet, wait_for(case.expect));
        check(case, "UDP", reply);
        nodens.assert_alive();
    }
    for case in &cases {
        if case.packet.is_empty() {
            continue; // a zero-length TCP frame is the same as the empty packet
        }
        let reply = send_tcp(nodens.dns, case);
        check(case, "TCP", reply);
        nodens.assert_alive();
    }

    // Several bad frames back to back on one connection, then a good one.
    let mut c = Tcp::connect(nodens.dns);
    let shared = [
        "opcode IQUERY",
        "QDCOUNT 2",
        "EDNS version 1",
        "QTYPE AXFR",
        "label of 64 bytes",
        "two OPT records",
    ];
    for case in cases.iter().filter(|c| shared.contains(&c.name)) {
        c.send(&case.packet).unwrap();
        match c.recv(Duration::from_secs(5)) {
            TcpRead::Msg(r) => check(case, "TCP (shared connection)", Some(r)),
            other => panic!("{}: {other:?} on a shared connection", case.name),
        }
    }
    c.send(&Q::new("www.test.", Rt::A).id(77).to_bytes())
        .unwrap();
    match c.recv(Duration::from_secs(5)) {
        TcpRead::Msg(r) => assert_eq!(Reply::parse(r, Duration::ZERO).a(), vec![ipv4("192.0.2.1")]),
        other => panic!("good query after bad frames on one connection: {other:?}"),
    }

    nodens.assert_alive();
    let r = udp_query(nodens.dns, &Q::new("mail.test.", Rt::MX));
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert_eq!(
        r.answers_of(Rt::MX).len(),
        1,
        "legitimate query after the corpus"
    );
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );
}

/// Fake responses sent to the listener (UDP and TCP) are ignored, and
/// nothing they carry is ever served.
#[test]
fn fake_responses_to_the_listener_never_poison_the_cache() {
    needs!(Need::CoreDns);
    let (_net, core, mut nodens) = setup();

    let fake = |id: u16, owner: &[u8]| {
        cat(&[
            &header(id, QR | AA | RD, 1, 1, 0, 0),
            &question(owner, 1, 1),
            &rr(owner, 1, 1, 86400, &[6, 6, 6, 6]),
        ])
    };
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for id in 0..64u16 {
        for owner in [www(), name(&["poison", "test"])] {
            sock.send_to(&fake(id, &owner), nodens.dns).unwrap();
        }
    }
    let mut c = Tcp::connect(nodens.dns);
    for id in 0..8u16 {
        let _ = c.send(&fake(id, &name(&["poison", "test"])));
    }
    drop(c);
    nodens.assert_alive();

    let r = udp_query(nodens.dns, &Q::new("poison.test.", Rt::A));
    assert_eq!(
        r.rcode(),
        rcode::NXDOMAIN,
        "poison.test. does not exist: {:?}",
        r.msg.answers()
    );
    let r = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    core.sync_log();
    assert_eq!(
        core.count_queries("poison.test.", "A"),
        1,
        "the answer came from the upstream"
    );
}

/// While a miss waits on a silent upstream, answers with the wrong ID (from
/// the upstream's own address) and with the right ID from a wrong address
/// are sent to nodens's upstream socket. Neither is accepted: the client gets
/// CoreDNS's answer after upstream_timeout, and so does the next client.
#[test]
fn spoofed_upstream_answers_are_rejected() {
    needs!(Need::CoreDns);
    let (net, silent, _core, nodens) = silent_first_with(secs(5), ms(1500));

    let dns = nodens.dns;
    let client = thread::spawn(move || {
        udp_query_timeout(
            dns,
            &Q::new("www.test.", Rt::A).id(0x1111),
            Duration::from_secs(6),
        )
    });

    let (from, pkt) = silent
        .recv(Duration::from_secs(3))
        .expect("nodens forwarded to the silent upstream first");
    let upstream_id = Reply::parse(pkt.clone(), Duration::ZERO).id();
    let qsection = question_bytes(&pkt);
    let spoof = |id: u16| {
        cat(&[
            &header(id, QR | AA | RD, 1, 1, 0, 0),
            &qsection,
            &rr(&[0xc0, 12], 1, 1, 86400, &[6, 6, 6, 6]),
        ])
    };

    // The right ID, from a wrong address: the connected socket never sees it.
    let other = UdpSocket::bind(net.other(199, 5300)).unwrap();
    other.send_to(&spoof(upstream_id), from).unwrap();
    // The right ID from the right address but the wrong question.
    let wrong_q = cat(&[
        &header(upstream_id, QR | AA | RD, 1, 1, 0, 0),
        &question(&name(&["mail", "test"]), 1, 1),
        &rr(&[0xc0, 12], 1, 1, 86400, &[6, 6, 6, 6]),
    ]);
    silent.sock.send_to(&wrong_q, from).unwrap();
    // Wrong IDs, from the right address: two, so that with the wrong
    // question three stray datagrams arrive, one short of near-miss
    // detection (a fourth would end the wait and go over TCP: tests/integration/abuse.rs).
    for k in 1..=2u16 {
        silent
            .sock
            .send_to(&spoof(upstream_id.wrapping_add(k)), from)
            .unwrap();
    }

    let r = client.join().unwrap().expect("client got an answer");
    assert_eq!(r.id(), 0x1111);
    assert_eq!(
        r.a(),
        vec![ipv4("192.0.2.1")],
        "a spoofed answer was accepted"
    );
    assert!(
        r.elapsed >= Duration::from_millis(1200),
        "answered in {:?}: before the silent upstream timed out, so from a spoof",
        r.elapsed
    );
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")],
        "cache poisoned"
    );
    let mail = udp_query(nodens.dns, &Q::new("mail.test.", Rt::A));
    assert_eq!(mail.rcode(), rcode::NOERROR);
    assert!(
        mail.a().is_empty(),
        "mail.test. has no A record; the wrong-question spoof was cached: {:?}",
        mail.msg.answers()
    );
}
