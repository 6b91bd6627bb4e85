//! Autopath's reply (`wire::chain::cname_reply`) spliced from a cached
//! upstream response: `<question> CNAME <target>` in front of the target's
//! records, every name decompressed, cut to the client's limit.
//!
//! Input: 2 bytes of parameters, then the upstream response.
//!   [0]  client: bit0 EDNS, bit1 DO, bit2 RD
//!   [1]  the reply's byte limit, from a table
//!
//! The response is cached as the miss path caches it (check_answers for
//! its own question, layout, Entry::from_response), rendered as autopath
//! renders it, and chained. The chained reply, read back with the
//! independent reader, must hold the client's question, the CNAME to the
//! target's name, and the rendered target's records unchanged (the
//! additional section may be dropped, or everything with TC); or
//! cname_reply says the target is malformed. Never a panic.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use nodens::{Entry, Freshness, TtlPolicy};
use nodens::wire::chain::cname_reply;
use nodens::wire::query;
use nodens::wire::response::{self, Case};
use nodens_fuzz::{Bytes, HEADER_LEN, OPT, TC, hex, parse_message, read_name, u16_at};

const CNAME: u16 = 5;
const LIMITS: [usize; 4] = [512, 1232, 4096, 65535];
/// The client's question: `x.team-a.svc.cluster.local. A IN`.
const CLIENT_QUESTION: &[u8] = b"\x01x\x06team-a\x03svc\x07cluster\x05local\x00\x00\x01\x00\x01";

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 + HEADER_LEN {
        return;
    }
    let (params, msg) = data.split_at(2);
    run(params, msg);
});

fn run(params: &[u8], msg: &[u8]) {
    let mut p = Bytes(params);
    let client = p.u8();
    let limit = LIMITS[(p.u8() & 3) as usize];
    let Ok(layout) = response::layout(msg) else {
        return;
    };
    let question = &msg[HEADER_LEN..layout.question_end];
    if u16_at(msg, 4) != 1
        || response::check_answers(msg, u16_at(msg, 0), question, Case::Ignore).is_err()
    {
        return;
    }
    let policy = TtlPolicy {
        min_ttl: 0,
        max_ttl: 86400,
        negative_max_ttl: 1800,
        failure_ttl: 5,
    };
    let now = Instant::now();
    let entry = Entry::from_response(msg, &layout, &policy, now).expect("layout's message fits");

    let edns = client & 1 != 0;
    let mut packet = vec![
        0x12,
        0x34,
        if client & 4 != 0 { 1 } else { 0 },
        0,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
    ];
    packet.push(u8::from(edns));
    packet.extend_from_slice(CLIENT_QUESTION);
    if edns {
        let do_bit = if client & 2 != 0 { 0x80 } else { 0 };
        packet.extend([0, 0, 41, 0x04, 0xd0, 0, 0, do_bit, 0, 0, 0]);
    }
    let client_query = query::parse(&packet).expect("the fixed client query parses");

    // As autopath renders the target: its own question, no OPT.
    let mut plain_packet = packet[..HEADER_LEN].to_vec();
    plain_packet.extend_from_slice(entry.question());
    let plain = query::Query {
        packet: &plain_packet,
        name_end: plain_packet.len() - 4,
        edns: None,
        ..client_query
    };
    let mut target = Vec::new();
    entry.render(&plain, now, Freshness::Fresh, None, 65535, &mut target);

    let mut out = Vec::new();
    let Ok(code) = cname_reply(&client_query, &target, limit, &mut out) else {
        return;
    };
    let chained =
        parse_message(&out).unwrap_or_else(|| panic!("chained reply unreadable: {}", hex(&out)));
    let rendered = parse_message(&target).expect("a rendered entry reads back");
    assert_eq!(chained.id, 0x1234);
    assert_eq!(code, chained.flags & 0xf);
    assert_eq!(chained.question.as_deref(), Some(CLIENT_QUESTION));
    assert_eq!(chained.opt().is_some(), edns, "OPT only for an EDNS client");
    assert!(out.len() <= limit, "{} bytes over {limit}", out.len());
    if chained.flags & TC != 0 {
        assert!(chained.answer.is_empty() && chained.authority.is_empty());
        return;
    }
    let (first, rest) = chained.answer.split_first().expect("the CNAME");
    let (target_name, _) = read_name(&target, HEADER_LEN).expect("the target's name");
    let (client_name, _) = read_name(&packet, HEADER_LEN).unwrap();
    assert_eq!(
        (first.rtype, &first.owner, &first.rdata),
        (CNAME, &client_name, &target_name)
    );
    let content = |records: &[nodens_fuzz::Record]| -> Vec<_> {
        records
            .iter()
            .map(|r| {
                (
                    r.content().0.to_vec(),
                    r.rtype,
                    r.class,
                    r.ttl,
                    r.rdata.clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        content(rest),
        content(&rendered.answer),
        "answer: {}",
        hex(&out)
    );
    assert_eq!(content(&chained.authority), content(&rendered.authority));
    let additional: Vec<_> = chained
        .additional
        .iter()
        .filter(|r| r.rtype != OPT)
        .cloned()
        .collect();
    if !additional.is_empty() {
        let want: Vec<_> = rendered
            .additional
            .iter()
            .filter(|r| r.rtype != OPT)
            .cloned()
            .collect();
        assert_eq!(content(&additional), content(&want));
    }
}
