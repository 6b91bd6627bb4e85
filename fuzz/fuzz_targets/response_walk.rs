//! The miss path and the hit path of an upstream response:
//! `wire::response::check_answers` and `layout`, then
//! `cache::Entry::from_response`, then `Entry::render` to a client query for
//! the same question at several later instants and under several byte
//! limits (the `render_limit` checks live here: one target, since a limit
//! only means something for an entry built from a response).
//!
//! Input: 8 bytes of parameters, then the upstream response.
//!   [0]    client: bit0 EDNS, bit1 DO, bit2 RD, bit3 CD, bit4 AD, bit5 flip
//!          the case of the question's letters, bit6 EDNS UDP size 65535
//!   [1..3] client query ID
//!   [3]    TTL policy: bits 0-1 min_ttl, 2-4 max_ttl, 5-6 negative_max_ttl,
//!          7 failure_ttl
//!   [4..8] time steps between the renders (seconds, from a table)
//!
//! Every rendered reply is read back with an independent reader
//! (`nodens_fuzz::parse_message`) and compared, record by record, with the
//! upstream response: rendering may change TTLs, the ID, flags and the
//! question's letter case, drop the additional section or everything after
//! the question (with TC), and nothing else.
#![no_main]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use nodens::{Entry, Freshness, Kind, TtlPolicy};
use nodens::wire::query;
use nodens::wire::response::{self, Answers, Case, Layout, ResponseError, Section};
use nodens_fuzz::{
    AD, Bytes, CD, HEADER_LEN, Message, OPT, QR, RA, RD, Record, TC, allowed, hex, parse_message,
    read_name, u16_at, u32_at,
};

const OPCODE_MASK: u16 = 0x7800;
const MIN_TTL: [u32; 4] = [0, 5, 300, 3600];
const MAX_TTL: [u32; 8] = [0, 1, 30, 300, 3600, 86400, 0x7fff_ffff, u32::MAX];
const NEG_MAX_TTL: [u32; 4] = [0, 5, 1800, u32::MAX];
const FAILURE_TTL: [u32; 2] = [0, 5];
/// The question an error answer without one is matched against.
const FIXED_QUESTION: &[u8] = b"\x07example\x03com\x00\x00\x01\x00\x01";
const STEPS: [u64; 8] = [0, 1, 2, 7, 299, 3601, 1 << 31, 1 << 33];

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (params, msg) = data.split_at(8);
    run(params, msg);
});

fn sane(ttl: u32) -> u32 {
    if ttl > i32::MAX as u32 { 0 } else { ttl }
}

fn run(params: &[u8], msg: &[u8]) {
    let mut p = Bytes(params);
    let client = p.u8();
    let client_id = p.u16();
    let policy_bits = p.u8();
    let steps: Vec<u64> = (0..4).map(|_| STEPS[(p.u8() & 7) as usize]).collect();

    if msg.len() < HEADER_LEN {
        assert_eq!(
            response::check_answers(msg, 0, FIXED_QUESTION, Case::Ignore),
            Err(ResponseError::Short)
        );
        assert!(
            response::layout(msg).is_err(),
            "layout of a message shorter than a header"
        );
        return;
    }
    let id = u16_at(msg, 0);
    let flags = u16_at(msg, 2);
    // Only a response (QR) to a standard query (opcode 0) answers ours: the
    // cached flags, opcode included, reach the client.
    let response_to_query = flags & QR != 0 && flags & OPCODE_MASK == 0;
    if !response_to_query {
        for case in [Case::Ignore, Case::Exact] {
            assert_eq!(
                response::check_answers(msg, id, FIXED_QUESTION, case),
                Err(ResponseError::NotResponse),
                "flags {flags:#06x}"
            );
        }
    }

    // An error answer without a question section (NSD refusing a class) is
    // accepted for our question and given it back by with_question.
    let with_question;
    let msg = if response_to_query && u16_at(msg, 4) == 0 && flags & 0xf != 0 {
        for case in [Case::Ignore, Case::Exact] {
            assert_eq!(
                response::check_answers(msg, id, FIXED_QUESTION, case),
                Ok(Answers::ErrorWithoutQuestion)
            );
        }
        with_question = response::with_question(msg, FIXED_QUESTION);
        let l = response::layout(&with_question).unwrap_or_else(|e| {
            panic!(
                "with_question gave a message layout rejects ({e}): {}",
                hex(&with_question)
            )
        });
        assert_eq!(l.rcode, flags & 0xf);
        assert_eq!(l.end, with_question.len());
        &with_question[..]
    } else {
        msg
    };

    // Layout reads one question whatever QDCOUNT says: nodens calls it only
    // for responses check_answers accepted, which have one.
    let Ok(layout) = response::layout(msg) else {
        return;
    };

    // check_answers, as the UDP and TCP exchanges call it before layout.
    let question = &msg[HEADER_LEN..layout.question_end];
    let accepted = response::check_answers(msg, id, question, Case::Ignore);
    let expect_ok = response_to_query && u16_at(msg, 4) == 1;
    if expect_ok {
        assert_eq!(accepted, Ok(Answers::Question));
    } else {
        assert!(accepted.is_err(), "check_answers: {accepted:?}");
        return;
    }
    let oracle = parse_message(msg).unwrap_or_else(|| {
        panic!(
            "layout accepted a message the reference reader cannot read: {}",
            hex(msg)
        )
    });
    check_layout(msg, &layout, &oracle);
    assert_eq!(
        response::check_answers(msg, id, question, Case::Exact),
        Ok(Answers::Question)
    );
    for case in [Case::Ignore, Case::Exact] {
        assert_eq!(
            response::check_answers(msg, id ^ 0x0101, question, case),
            Err(ResponseError::IdMismatch)
        );
    }
    let name_len = question.len() - 4;
    let mut other_case = question.to_vec();
    flip_case(&mut other_case[..name_len]);
    assert_eq!(
        response::check_answers(msg, id, &other_case, Case::Ignore),
        Ok(Answers::Question)
    );
    if other_case != question {
        assert_eq!(
            response::check_answers(msg, id, &other_case, Case::Exact),
            Err(ResponseError::CaseMismatch)
        );
    }
    // Only the name is compared without regard to case: a question for type
    // 0x0041 (HTTPS) is not answered by a response for type 0x0061.
    let mut other_type = question.to_vec();
    flip_case(&mut other_type[name_len..]);
    if other_type != question && !allowed("question-type-case") {
        assert_eq!(
            response::check_answers(msg, id, &other_type, Case::Ignore),
            Err(ResponseError::QuestionMismatch),
            "check_answers matched type/class {:02x?} against {:02x?} ignoring ASCII case",
            &other_type[name_len..],
            &question[name_len..]
        );
    }

    // The entry, as serve/miss.rs builds it on a miss.
    let max_ttl = MAX_TTL[((policy_bits >> 2) & 7) as usize];
    let policy = TtlPolicy {
        min_ttl: MIN_TTL[(policy_bits & 3) as usize].min(max_ttl),
        max_ttl,
        negative_max_ttl: NEG_MAX_TTL[((policy_bits >> 5) & 3) as usize],
        failure_ttl: FAILURE_TTL[(policy_bits >> 7) as usize],
    };
    let t0 = Instant::now();
    // `layout` accepts only what an entry can hold.
    let entry = Entry::from_response(msg, &layout, &policy, t0).expect("layout's message fits");
    let expected_kind = match layout.rcode {
        0 if layout.answer_count > 0 => Kind::Success,
        0 | 3 => Kind::Denial,
        _ => Kind::Failure,
    };
    assert_eq!(entry.kind, expected_kind);
    assert_eq!(entry.rcode, layout.rcode);
    let clamp = |ttl: u32| sane(ttl).clamp(policy.min_ttl, policy.max_ttl);
    let lifetime = match entry.kind {
        Kind::Success => oracle
            .answer
            .iter()
            .chain(&oracle.authority)
            .map(|r| clamp(r.ttl))
            .min()
            .unwrap(),
        Kind::Denial => layout
            .soa_negative_ttl
            .map_or(0, |t| t.min(policy.negative_max_ttl)),
        Kind::Failure => policy.failure_ttl,
    };
    assert_eq!(entry.original_ttl, lifetime, "entry lifetime");
    assert_eq!(entry.is_cacheable(), lifetime > 0);
    assert!(entry.is_fresh(t0) == (lifetime > 0));
    // The TTL every record starts with in the cache.
    let stored_ttl = |r: &Record| match entry.kind {
        Kind::Success => clamp(r.ttl),
        Kind::Denial | Kind::Failure => sane(r.ttl).min(lifetime),
    };

    // What the entry keeps: the OPT record goes; if it is not the last
    // record, the whole additional section goes with it.
    let opt_last = layout.opt.as_ref().map(|o| o.end == layout.end);
    let stored_len = match (&layout.opt, opt_last) {
        (None, _) => layout.end,
        (Some(o), Some(true)) => o.start,
        (Some(_), _) => layout.additional_start,
    };
    let kept_additional: Vec<&Record> = if opt_last == Some(false) {
        Vec::new()
    } else {
        oracle.additional_without_opt()
    };

    // The client's query for the same question.
    let edns = client & 1 != 0;
    let dnssec_ok = edns && client & 2 != 0;
    let mut flags = 0u16;
    if client & 4 != 0 {
        flags |= RD;
    }
    if client & 8 != 0 {
        flags |= CD;
    }
    if client & 16 != 0 {
        flags |= AD;
    }
    let mut packet = Vec::with_capacity(question.len() + 23);
    packet.extend(client_id.to_be_bytes());
    packet.extend(flags.to_be_bytes());
    packet.extend([0, 1, 0, 0, 0, 0, 0, u8::from(edns)]);
    packet.extend(question);
    if client & 32 != 0 {
        flip_case(&mut packet[HEADER_LEN..HEADER_LEN + name_len]);
    }
    if edns {
        let size: u16 = if client & 64 != 0 { 65535 } else { 1232 };
        packet.extend([0, 0, 41]);
        packet.extend(size.to_be_bytes());
        packet.extend([0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
    }
    let Ok(q) = query::parse(&packet) else {
        // OPT, AXFR, IXFR, MAILA, MAILB questions are never cached.
        return;
    };
    let client_question = q.question();

    let mut previous: HashMap<usize, u32> = HashMap::new();
    let mut elapsed = 0u64;
    let mut out = Vec::new();
    for step in std::iter::once(0).chain(steps) {
        elapsed += step;
        let now = t0 + Duration::from_secs(elapsed);
        let limits = [
            q.udp_limit(512),
            q.udp_limit(1232),
            q.udp_limit(4096),
            usize::from(u16::MAX),
        ];
        for limit in limits {
            let rendered = entry.render(&q, now, Freshness::Fresh, None, limit, &mut out);
            let ctx = Ctx {
                msg,
                layout: &layout,
                oracle: &oracle,
                kept_additional: &kept_additional,
                stored_len,
                entry: &entry,
                packet: &packet,
                client_question,
                edns,
                dnssec_ok,
                ede: false,
            };
            let reply = ctx.check(&out, limit, rendered.truncated, rendered.rcode);
            for r in reply
                .answer
                .iter()
                .chain(&reply.authority)
                .chain(reply.additional.iter().filter(|r| r.rtype != OPT))
            {
                let original = oracle_record_at(&oracle, r.ttl_at);
                let expected =
                    stored_ttl(original).saturating_sub(elapsed.min(u64::from(u32::MAX)) as u32);
                assert_eq!(
                    r.ttl, expected,
                    "TTL after {elapsed} s (record at {})",
                    r.ttl_at
                );
                if let Some(&before) = previous.get(&r.ttl_at) {
                    assert!(r.ttl <= before, "TTL went up from {before} to {}", r.ttl);
                }
                previous.insert(r.ttl_at, r.ttl);
            }
        }
    }

    // Served stale (RFC 8767): every record gets the stale TTL, and a
    // client with EDNS gets EDE 3.
    let limit = q.udp_limit(1232);
    let stale_at = t0 + Duration::from_secs(elapsed + u64::from(lifetime));
    let rendered = entry.render(
        &q,
        stale_at,
        Freshness::Stale { ttl: 30 },
        Some(3),
        limit,
        &mut out,
    );
    let ctx = Ctx {
        msg,
        layout: &layout,
        oracle: &oracle,
        kept_additional: &kept_additional,
        stored_len,
        entry: &entry,
        packet: &packet,
        client_question,
        edns,
        dnssec_ok,
        ede: true,
    };
    let reply = ctx.check(&out, limit, rendered.truncated, rendered.rcode);
    for r in reply
        .answer
        .iter()
        .chain(&reply.authority)
        .chain(&reply.additional)
    {
        if r.rtype != OPT {
            assert_eq!(r.ttl, 30, "stale TTL");
        }
    }
}

/// The record of the upstream response whose TTL field is at `ttl_at`
/// (rendering keeps every kept record at its offset).
fn oracle_record_at(oracle: &Message, ttl_at: usize) -> &Record {
    oracle
        .answer
        .iter()
        .chain(&oracle.authority)
        .chain(&oracle.additional)
        .find(|r| r.ttl_at == ttl_at)
        .unwrap_or_else(|| panic!("rendered record at {ttl_at} is not at a record's place"))
}

fn flip_case(b: &mut [u8]) {
    for c in b {
        if c.is_ascii_alphabetic() {
            *c ^= 0x20;
        }
    }
}

/// Layout's offsets against the reference reader.
fn check_layout(msg: &[u8], l: &Layout, oracle: &Message) {
    let counts = [u16_at(msg, 6), u16_at(msg, 8), u16_at(msg, 10)];
    assert!(l.question_end >= HEADER_LEN + 5);
    assert!(l.question_end <= l.additional_start);
    assert!(l.additional_start <= l.end && l.end <= msg.len());
    assert_eq!(l.end, oracle.end, "end of the records");
    assert_eq!(l.answer_count, counts[0]);
    assert_eq!(l.flags, u16_at(msg, 2));
    assert_eq!(l.rcode & 0xf, l.flags & 0xf);
    let total: usize = counts.iter().map(|&c| usize::from(c)).sum();
    assert_eq!(l.ttls.len() + usize::from(l.opt.is_some()), total);
    let oracle_ttls: Vec<(usize, Section)> = oracle
        .answer
        .iter()
        .map(|r| (r.ttl_at, Section::Answer))
        .chain(
            oracle
                .authority
                .iter()
                .map(|r| (r.ttl_at, Section::Authority)),
        )
        .chain(
            oracle
                .additional
                .iter()
                .filter(|r| r.rtype != OPT)
                .map(|r| (r.ttl_at, Section::Additional)),
        )
        .collect();
    assert_eq!(l.ttls, oracle_ttls, "TTL offsets");
    match (&l.opt, oracle.opt()) {
        (None, None) => {}
        (Some(range), Some(opt)) => {
            assert!(range.start >= l.additional_start && range.end <= l.end);
            // (An OPT owned by another name than the root is not refused:
            // it is dropped from the entry all the same.)
            assert!(opt.ttl_at > range.start && opt.ttl_at + 6 <= range.end);
            assert_eq!(l.rcode >> 4, u16::from(msg[opt.ttl_at]));
        }
        (a, b) => panic!("OPT: layout {a:?}, reference {b:?}"),
    }
    // RFC 2308 5: the smaller of the SOA's TTL and its MINIMUM field, the
    // last of the 20 bytes that follow the SOA's two names.
    let negative = oracle
        .authority
        .iter()
        .filter(|r| r.rtype == 6)
        .map(|r| {
            let rdata = r.ttl_at + 6;
            let rdata_end = rdata + usize::from(u16_at(msg, r.ttl_at + 4));
            let (_, mname_end) = read_name(msg, rdata).expect("read before");
            let (_, names_end) = read_name(msg, mname_end).expect("read before");
            if names_end + 20 > rdata_end && !allowed("soa-short-rdata") {
                panic!(
                    "layout accepted an SOA whose RDATA ({} bytes) is too short for its \
                     names ({} bytes) and 20 bytes of fields: {}",
                    rdata_end - rdata,
                    names_end - rdata,
                    hex(msg)
                );
            }
            // What nodens reads: the last 4 bytes of the RDATA.
            sane(r.ttl).min(sane(u32_at(msg, rdata_end - 4)))
        })
        .min();
    assert_eq!(l.soa_negative_ttl, negative, "negative TTL");
}

struct Ctx<'a> {
    msg: &'a [u8],
    layout: &'a Layout,
    oracle: &'a Message,
    kept_additional: &'a [&'a Record],
    stored_len: usize,
    entry: &'a Entry,
    packet: &'a [u8],
    client_question: &'a [u8],
    edns: bool,
    dnssec_ok: bool,
    ede: bool,
}

impl Ctx<'_> {
    /// Checks one rendered reply and returns it as read back.
    fn check(&self, out: &[u8], limit: usize, truncated: bool, rcode: u16) -> Message {
        let fail = |what: &str| -> ! {
            panic!(
                "{what}\n  response {}\n  query    {}\n  limit {limit}\n  reply    {}",
                hex(self.msg),
                hex(self.packet),
                hex(out)
            )
        };
        // Size: everything if it fits, else without the additional
        // section, else the question alone with TC.
        let opt_len = if self.edns {
            11 + if self.ede { 6 } else { 0 }
        } else {
            0
        };
        assert!(limit >= 512);
        let expected_len = if self.stored_len + opt_len <= limit {
            self.stored_len + opt_len
        } else if self.layout.additional_start + opt_len <= limit {
            self.layout.additional_start + opt_len
        } else {
            self.layout.question_end + opt_len
        };
        if out.len() > limit {
            fail(&format!(
                "reply of {} bytes over the limit of {limit}",
                out.len()
            ));
        }
        if out.len() != expected_len {
            fail(&format!(
                "reply of {} bytes, expected {expected_len}",
                out.len()
            ));
        }
        let cut_to_question =
            self.stored_len + opt_len > limit && self.layout.additional_start + opt_len > limit;
        assert_eq!(truncated, cut_to_question, "Rendered::truncated");
        assert_eq!(rcode, self.entry.rcode);

        // Header.
        let flags = u16_at(out, 2);
        let client_flags = u16_at(self.packet, 2);
        assert_eq!(
            u16_at(out, 0),
            u16_at(self.packet, 0),
            "reply ID is not the client's"
        );
        assert_ne!(flags & QR, 0, "reply without QR");
        assert_ne!(flags & RA, 0, "reply without RA");
        assert_eq!(
            flags & (RD | CD),
            client_flags & (RD | CD),
            "RD/CD not the client's"
        );
        assert_eq!(flags & TC != 0, truncated, "TC bit");
        assert_eq!(flags & 0x0400, 0, "AA from the cache");
        let upstream_ad = self.layout.flags & AD != 0;
        let wants_ad = client_flags & AD != 0 || self.dnssec_ok;
        assert_eq!(flags & AD != 0, upstream_ad && wants_ad, "AD bit");
        // RFC 1035 4.1.1: the opcode is the query's (QUERY), whatever the
        // upstream wrote.
        if !allowed("reply-opcode") {
            assert_eq!(
                flags & OPCODE_MASK,
                client_flags & OPCODE_MASK,
                "reply opcode is not the query's"
            );
        }
        assert_eq!(flags & 0xf, self.entry.rcode & 0xf, "header RCODE");
        assert_eq!(
            &out[HEADER_LEN..HEADER_LEN + self.client_question.len()],
            self.client_question,
            "question is not the client's (letter case included)"
        );

        // The reply as a client reads it.
        let Some(reply) = parse_message(out) else {
            fail("reply does not parse")
        };
        if reply.end != out.len() {
            fail("bytes after the last record");
        }
        if truncated {
            assert!(reply.answer.is_empty() && reply.authority.is_empty());
        } else {
            let same = |a: &[Record], b: &[Record]| {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.content() == y.content())
            };
            if !same(&reply.answer, &self.oracle.answer) {
                fail("answer section differs from upstream's (other than TTLs)");
            }
            if !same(&reply.authority, &self.oracle.authority) {
                fail("authority section differs from upstream's (other than TTLs)");
            }
        }
        let extra = reply.additional_without_opt();
        let all_kept = extra.len() == self.kept_additional.len()
            && extra
                .iter()
                .zip(self.kept_additional)
                .all(|(x, y)| x.content() == y.content());
        if !(extra.is_empty() || all_kept) {
            fail("additional section differs from upstream's (other than TTLs)");
        }
        match (reply.opt(), self.edns) {
            (None, false) => {}
            (Some(opt), true) => {
                let last = reply.additional.last().unwrap();
                assert_eq!(last.rtype, OPT, "OPT is not the last record");
                assert_eq!(opt.owner, [0]);
                assert_eq!(opt.class, 1232, "advertised UDP size");
                assert_eq!(
                    opt.ttl >> 24,
                    u32::from(self.entry.rcode >> 4),
                    "extended RCODE"
                );
                assert_eq!((opt.ttl >> 16) & 0xff, 0, "EDNS version");
                assert_eq!(opt.ttl & 0x8000 != 0, self.dnssec_ok, "DO bit");
                let expected: &[u8] = if self.ede { &[0, 15, 0, 2, 0, 3] } else { &[] };
                assert_eq!(opt.rdata, expected, "OPT options");
            }
            (opt, edns) => fail(&format!("OPT {opt:?} for a client with EDNS {edns}")),
        }

        // nodens' own walker accepts what nodens sends, and sees the same
        // response code.
        let l = match response::layout(out) {
            Ok(l) => l,
            Err(e) => fail(&format!("rendered reply rejected by layout: {e}")),
        };
        let full_rcode = if self.edns {
            self.entry.rcode
        } else {
            self.entry.rcode & 0xf
        };
        assert_eq!(l.rcode, full_rcode);
        if let Err(e) = response::check_answers(
            out,
            u16_at(self.packet, 0),
            self.client_question,
            Case::Exact,
        ) {
            fail(&format!("rendered reply does not answer the query: {e}"));
        }
        reply
    }
}
