//! Client query parsing (`wire::query::parse`) and the replies nodens writes
//! without a cache: the error reply to a rejected query, the REFUSED reply
//! to a name outside every zone, and the query forwarded upstream.
//!
//! Input: one UDP payload as a client would send it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodens::KeyRef;
use nodens::wire::query::{self, Query, Reject};
use nodens::wire::{build, rcode, response};
use nodens_fuzz::{AD, CD, HEADER_LEN, QR, RA, RD, labels, u16_at};

const OPCODE_MASK: u16 = 0x7800;

fuzz_target!(|data: &[u8]| {
    match query::parse(data) {
        Ok(q) => accepted(data, &q),
        Err(reject) => rejected(data, &reject),
    }
});

fn accepted(data: &[u8], q: &Query<'_>) {
    assert!(std::ptr::eq(q.packet, data));
    assert!(data.len() >= HEADER_LEN);
    assert_eq!(q.id, u16_at(data, 0));
    assert_eq!(q.flags, u16_at(data, 2));
    assert_eq!(q.flags & QR, 0, "a response was accepted as a query");
    assert_eq!(q.flags & OPCODE_MASK, 0, "opcode other than QUERY accepted");
    assert_eq!(u16_at(data, 4), 1, "QDCOUNT != 1 accepted");
    assert_eq!(u16_at(data, 6), 0);
    assert_eq!(u16_at(data, 8), 0);

    // The name: an uncompressed wire name of at most 255 octets, right
    // after the header.
    let name = q.name();
    assert_eq!(HEADER_LEN + name.len(), q.name_end);
    assert!(
        !name.is_empty() && name.len() <= 255,
        "name length {}",
        name.len()
    );
    assert_eq!(
        *name.last().unwrap(),
        0,
        "name does not end with the root label"
    );
    assert!(
        labels(name).is_some(),
        "name is not a sequence of labels: {name:02x?}"
    );

    // The question: name, type, class, all inside the packet.
    let question = q.question();
    assert!(question.starts_with(name));
    assert_eq!(question.len(), name.len() + 4);
    assert!(q.name_end + 4 <= data.len());
    assert_eq!(&data[HEADER_LEN..q.name_end + 4], question);
    assert_eq!(u16_at(question, name.len()), q.qtype);
    assert_eq!(u16_at(question, name.len() + 2), q.qclass);
    assert!(
        query::is_served_class(q.qclass),
        "class {} should have been refused",
        q.qclass
    );
    assert!(
        ![41, 251, 252, 253, 254].contains(&q.qtype),
        "qtype {} should have been rejected",
        q.qtype
    );

    // Flags and EDNS.
    assert_eq!(q.checking_disabled(), q.flags & CD != 0);
    assert_eq!(q.dnssec_ok(), q.edns.is_some_and(|e| e.dnssec_ok));
    if let Some(e) = q.edns {
        assert!(e.udp_size >= 512);
        assert_ne!(u16_at(data, 10), 0, "EDNS without an additional record");
    }
    for server_max in [0u16, 511, 512, 1232, 4096, u16::MAX] {
        let limit = q.udp_limit(server_max);
        assert!(limit >= 512, "udp_limit({server_max}) = {limit} below 512");
        assert!(limit <= usize::from(server_max.max(512)));
        match q.edns {
            None => assert_eq!(limit, 512),
            Some(e) => assert_eq!(limit, usize::from(e.udp_size.min(server_max).max(512))),
        }
    }

    // The cache key: the name lower-cased, type, class, DO and CD.
    let mut buf = [0u8; 255];
    let key = KeyRef::from_query(q, &mut buf);
    assert!(key.name.eq_ignore_ascii_case(name));
    assert!(!key.name.iter().any(u8::is_ascii_uppercase));
    assert_eq!((key.qtype, key.qclass), (q.qtype, q.qclass));
    let owned = key.to_owned();
    assert!(owned.question().eq_ignore_ascii_case(question));
    assert_eq!(owned.dnssec_ok(), q.dnssec_ok());
    assert_eq!(owned.checking_disabled(), q.checking_disabled());

    // REFUSED for a name outside every zone (serve/route.rs), as a client sees it.
    let mut out = Vec::new();
    build::reply_with_rcode(
        data,
        rcode::REFUSED,
        Some(q.name_end + 4),
        q.edns,
        None,
        &mut out,
    );
    check_reply(
        data,
        &out,
        rcode::REFUSED,
        Some(q.name_end + 4),
        q.edns.is_some(),
    );

    // The query sent upstream for it must itself be a valid query for the
    // same question, with EDNS and the client's DO and CD bits.
    for id in [0u16, q.id, 0xffff] {
        let up = build::upstream_query(id, question, q.dnssec_ok(), q.checking_disabled());
        let uq = query::parse(&up)
            .unwrap_or_else(|r| panic!("upstream query rejected: {r:?} {up:02x?}"));
        assert_eq!(uq.id, id);
        assert_eq!(uq.question(), question);
        assert_eq!(uq.dnssec_ok(), q.dnssec_ok());
        assert_eq!(uq.checking_disabled(), q.checking_disabled());
        assert_ne!(uq.flags & RD, 0);
        assert!(uq.edns.is_some());
        // And an answer to it with the same ID and question is accepted.
        let mut answer = up.clone();
        answer[2] |= 0x80;
        for case in [response::Case::Ignore, response::Case::Exact] {
            assert_eq!(
                response::check_answers(&answer, id, question, case),
                Ok(response::Answers::Question),
                "own question not matched"
            );
        }
    }
}

fn rejected(data: &[u8], reject: &Reject) {
    let mut out = Vec::new();
    let wrote = build::error_reply(data, reject, &mut out);
    match *reject {
        Reject::Drop(reason) => {
            assert!(!wrote, "error_reply wrote a reply for a dropped packet");
            // Only runts and responses are dropped (never answer a response:
            // two servers would bounce errors forever).
            assert!(
                data.len() < HEADER_LEN || u16_at(data, 2) & QR != 0,
                "dropped ({reason}) a packet that is neither short nor a response"
            );
        }
        Reject::Answer {
            rcode: code,
            reason,
            question_end,
            edns,
        } => {
            assert!(wrote, "error_reply wrote nothing for {reason}");
            assert!(!reason.is_empty());
            assert!(
                data.len() >= HEADER_LEN,
                "answering a packet shorter than a header"
            );
            assert_eq!(u16_at(data, 2) & QR, 0, "answering a response ({reason})");
            if let Some(end) = question_end {
                assert!(
                    end >= HEADER_LEN + 5 && end <= data.len(),
                    "question_end {end}"
                );
            }
            if let Some(e) = edns {
                assert!(e.udp_size >= 512);
            }
            check_reply(data, &out, code, question_end, edns.is_some());
        }
    }
}

/// A reply nodens builds from the client's packet with no records: the
/// client's ID and opcode, QR and RA set, RD and CD copied, the response
/// code, the question if it could be read, one OPT if the client used EDNS.
fn check_reply(data: &[u8], out: &[u8], code: u16, question_end: Option<usize>, edns: bool) {
    assert!(out.len() >= HEADER_LEN, "reply shorter than a header");
    let request = u16_at(data, 2);
    let flags = u16_at(out, 2);
    assert_eq!(u16_at(out, 0), u16_at(data, 0), "reply ID differs");
    assert_ne!(flags & QR, 0, "reply without QR");
    assert_ne!(flags & RA, 0);
    assert_eq!(flags & OPCODE_MASK, request & OPCODE_MASK);
    assert_eq!(flags & (RD | CD), request & (RD | CD));
    assert_eq!(flags & AD, 0);
    assert_eq!(flags & 0x000f, code & 0x000f, "header RCODE");
    assert_eq!(u16_at(out, 4), u16::from(question_end.is_some()));
    assert_eq!(u16_at(out, 6), 0);
    assert_eq!(u16_at(out, 8), 0);
    assert_eq!(u16_at(out, 10), u16::from(edns));
    let mut len = HEADER_LEN;
    if let Some(end) = question_end {
        assert_eq!(&out[HEADER_LEN..end], &data[HEADER_LEN..end]);
        len = end;
    }
    if edns {
        len += 11;
    }
    assert_eq!(out.len(), len, "reply length");
    // A client parses it: with a question, nodens' own response walker
    // does, and sees the full (extended) response code.
    if let Some(end) = question_end {
        let l = response::layout(out)
            .unwrap_or_else(|e| panic!("error reply does not parse ({e}): {out:02x?}"));
        assert_eq!(l.end, out.len());
        assert_eq!(l.answer_count, 0);
        assert!(l.ttls.is_empty());
        if edns {
            assert_eq!(l.rcode, code, "extended RCODE lost");
        }
        let question = &data[HEADER_LEN..end];
        let answers =
            response::check_answers(out, u16_at(data, 0), question, response::Case::Exact);
        assert_eq!(
            answers,
            Ok(response::Answers::Question),
            "error reply does not answer the question"
        );
    }
}
