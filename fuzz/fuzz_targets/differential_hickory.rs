//! nodens' query parser against hickory-proto's full message parser.
//!
//! Whenever `nodens::wire::query::parse` accepts a packet, hickory-proto
//! (`Message::from_vec`) must parse it too and agree on the ID, the flags
//! nodens acts on, the question name (ignoring ASCII case), type and class,
//! and EDNS: present or not, UDP size, DO bit, version.
//!
//! Where hickory rejects a packet nodens accepts, the packet is decoded
//! again piece by piece with hickory's own decoders, to find the part it
//! refuses. Header and question must always decode. The only accepted
//! differences are in records of the additional section whose content
//! nodens never reads (see `explain`); anything else fails the target.
//!
//! Input: one UDP payload as a client would send it.
#![no_main]

use hickory_proto::op::{Header, Message, MessageType, OpCode, Query as HQuery};
use hickory_proto::rr::Record;
use hickory_proto::rr::RecordType;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use libfuzzer_sys::fuzz_target;
use nodens::wire::query::{self, Query};
use nodens_fuzz::{CD, RD, hex, labels, u16_at, u32_at};

fuzz_target!(|data: &[u8]| {
    let Ok(q) = query::parse(data) else { return };
    match Message::from_vec(data) {
        Ok(m) => compare(data, &q, &m),
        Err(e) => explain(data, &q, &e.to_string()),
    }
});

fn compare(data: &[u8], q: &Query<'_>, m: &Message) {
    let ctx = || hex(data);
    assert_eq!(m.id(), q.id, "ID: {}", ctx());
    assert_eq!(m.message_type(), MessageType::Query, "{}", ctx());
    assert_eq!(m.op_code(), OpCode::Query, "{}", ctx());
    assert_eq!(m.recursion_desired(), q.flags & RD != 0, "RD: {}", ctx());
    assert_eq!(m.checking_disabled(), q.flags & CD != 0, "CD: {}", ctx());
    assert_eq!(m.queries().len(), 1, "question count: {}", ctx());
    compare_question(data, q, &m.queries()[0]);
    match (m.extensions(), q.edns) {
        (None, None) => {}
        (Some(h), Some(n)) => {
            assert_eq!(
                h.max_payload().max(512),
                n.udp_size,
                "EDNS UDP size: {}",
                ctx()
            );
            assert_eq!(h.flags().dnssec_ok, n.dnssec_ok, "DO bit: {}", ctx());
            assert_eq!(h.version(), 0, "EDNS version: {}", ctx());
        }
        (h, n) => panic!("EDNS presence: hickory {h:?}, nodens {n:?}: {}", ctx()),
    }
}

fn compare_question(data: &[u8], q: &Query<'_>, hq: &HQuery) {
    let ours = labels(q.name()).expect("nodens' name is a label sequence");
    let theirs: Vec<&[u8]> = hq.name().iter().collect();
    assert!(
        hq.name().is_fqdn(),
        "hickory read a non-absolute name: {}",
        hex(data)
    );
    assert_eq!(ours.len(), theirs.len(), "label count: {}", hex(data));
    for (a, b) in ours.iter().zip(&theirs) {
        assert!(
            a.eq_ignore_ascii_case(b),
            "label {a:02x?} vs {b:02x?}: {}",
            hex(data)
        );
    }
    assert_eq!(u16::from(hq.query_type()), q.qtype, "qtype: {}", hex(data));
    assert_eq!(
        u16::from(hq.query_class()),
        q.qclass,
        "qclass: {}",
        hex(data)
    );
}

/// hickory rejected what nodens accepted: find out where, and fail unless
/// it is one of the documented exceptions.
fn explain(data: &[u8], q: &Query<'_>, error: &str) {
    let fail = |what: &str| -> ! {
        panic!(
            "nodens accepts, hickory rejects ({error}): {what}\n  packet {}",
            hex(data)
        )
    };
    let mut d = BinDecoder::new(data);
    let header = Header::read(&mut d).unwrap_or_else(|e| fail(&format!("header: {e}")));
    assert_eq!(header.id(), q.id);
    let hq = HQuery::read(&mut d).unwrap_or_else(|e| fail(&format!("question: {e}")));
    compare_question(data, q, &hq);
    assert_eq!(d.index(), q.name_end + 4, "end of the question");

    // nodens requires empty answer and authority sections, so only the
    // additional section is left. Walk it with nodens' framing (which
    // hickory shares: the same name, fixed fields and RDLENGTH), reading
    // each record with hickory.
    let mut at = q.name_end + 4;
    let mut seen_opt = false;
    for _ in 0..header.additional_count() {
        let owner_end = nodens::wire::name::skip(data, at).expect("nodens read this name");
        let rrtype = u16_at(data, owner_end);
        let rdlen = usize::from(u16_at(data, owner_end + 8));
        let end = owner_end + 10 + rdlen;
        let Ok(pos) = u16::try_from(at) else {
            fail("record beyond 64 KiB")
        };
        let mut rd = d.clone(pos);
        match Record::read(&mut rd) {
            Ok(r) => {
                assert_eq!(rd.index(), end, "record framing differs: {}", hex(data));
                if r.record_type() == RecordType::OPT {
                    if seen_opt {
                        fail("two OPT records");
                    }
                    seen_opt = true;
                }
            }
            Err(e) if rrtype == nodens::wire::rtype::OPT => {
                // Exception 1: EDNS option content. nodens checks that the
                // options are well-framed (code, length, data filling the
                // RDATA exactly) and reads nothing inside them: it forwards
                // no client option upstream (upstream_query writes its own
                // OPT) and replies carry only nodens' own OPT. hickory also
                // decodes the content of options it knows (Client Subnet:
                // family, prefix lengths, address bytes) and refuses the
                // message when one is malformed. Only that is accepted
                // here: the owner is the root (nodens checked), and the
                // option framing must be one hickory agrees with, so the
                // error must come from inside an option.
                seen_opt = true;
                let mut rdata = &data[owner_end + 10..end];
                let mut codes = Vec::new();
                while !rdata.is_empty() {
                    let len = usize::from(u16_at(rdata, 2));
                    codes.push(u16_at(rdata, 0));
                    rdata = &rdata[4 + len..];
                }
                const CLIENT_SUBNET: u16 = 8;
                if !codes.contains(&CLIENT_SUBNET) {
                    fail(&format!("OPT record with options {codes:?}: {e}"));
                }
                // The EDNS fields themselves, read by hand.
                let edns = q.edns.expect("nodens saw this OPT");
                assert_eq!(u16_at(data, owner_end + 2).max(512), edns.udp_size);
                assert_eq!(u32_at(data, owner_end + 4) & 0x8000 != 0, edns.dnssec_ok);
            }
            Err(_) => {
                // Exception 2: records other than OPT in the additional
                // section of a query (TSIG, SIG(0), or anything else) are
                // skipped by nodens without reading their owner name's
                // labels or their RDATA: it never forwards, answers or
                // caches them. hickory decodes both, and refuses, for
                // example, an A record whose RDATA is not 4 bytes, or an
                // owner name with a compression pointer that points
                // forward or into the name itself. Where the next record
                // starts does not depend on either: a name ends at its
                // first zero label or pointer, the RDATA after RDLENGTH
                // bytes, which nodens checked to be inside the packet.
                assert!(end <= data.len());
            }
        }
        at = end;
    }
    if !seen_opt && q.edns.is_some() {
        fail("nodens found an OPT record hickory did not");
    }
    if seen_opt && q.edns.is_none() {
        fail("hickory found an OPT record nodens did not");
    }
    // Every record decoded on its own, yet the message did not.
    let individually_ok = {
        let mut at = q.name_end + 4;
        let mut ok = true;
        for _ in 0..header.additional_count() {
            let pos = at as u16;
            let mut rd = d.clone(pos);
            if Record::read(&mut rd).is_err() {
                ok = false;
                break;
            }
            at = rd.index();
        }
        ok
    };
    if individually_ok {
        fail("every part decodes, the whole message does not");
    }
}
