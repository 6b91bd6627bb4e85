//! `cache::snapshot::read` on any stream: never panics, never reads more
//! records than its bound, and whatever it loads renders as a well-formed
//! answer to its key's question with TTLs within the zone's policy.
//!
//! Input: 1 byte of parameters, then the snapshot stream.
//!   [0] bits 0-1: the zone's TTL policy (from a table); bit 2: a stale
//!       window of an hour (else none); bit 3: a bound of 3 records (else 1000)
//!
//! Names ending in `nz.` are in no zone. After the load the cache is
//! written out again (`snapshot::write`); the written stream is read here
//! with this target's own reader of the format, and for each key a client
//! query is built byte by byte, parsed by nodens, looked up, rendered
//! (fresh or stale), and the reply read back with the independent reader
//! of `nodens_fuzz` (RFC 1035 only). The written stream, read again,
//! loads every record and refuses none: what passed once passes again.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use nodens::{SnapshotRules as Rules, read_snapshot, write_snapshot};
use nodens::{Cache, Freshness, KeyRef, Lookup, TtlPolicy};
use nodens::wire::query;
use nodens_fuzz::{Bytes, CD, HEADER_LEN, OPT, QR, RA, RD, TC, hex, parse_message, u16_at};

const POLICIES: [TtlPolicy; 4] = [
    TtlPolicy { min_ttl: 0, max_ttl: 3600, negative_max_ttl: 1800, failure_ttl: 5 },
    TtlPolicy { min_ttl: 0, max_ttl: 30, negative_max_ttl: 5, failure_ttl: 5 },
    TtlPolicy { min_ttl: 300, max_ttl: 600, negative_max_ttl: 0, failure_ttl: 0 },
    TtlPolicy { min_ttl: 0, max_ttl: 0x7fff_ffff, negative_max_ttl: u32::MAX, failure_ttl: 5 },
];
const STALE_TTL: u32 = 30;
const CLIENT_ID: u16 = 0x5566;

fuzz_target!(|data: &[u8]| {
    let Some((&params, stream)) = data.split_first() else {
        return;
    };
    run(params, stream);
});

/// One record of a written snapshot, as this target reads the format.
struct Written {
    name: Vec<u8>,
    qtype: u16,
    qclass: u16,
    flags: u8,
    kind: u8,
    rcode: u16,
    wire: Vec<u8>,
}

/// Reads the stream `snapshot::write` wrote: magic, length-prefixed
/// records, a zero length.
fn read_written(mut s: &[u8]) -> Vec<Written> {
    assert_eq!(&s[..4], b"NDC1", "written magic");
    s = &s[4..];
    let mut out = Vec::new();
    loop {
        let len = u32::from_be_bytes(s[..4].try_into().unwrap()) as usize;
        s = &s[4..];
        if len == 0 {
            assert!(s.is_empty(), "bytes after the end marker");
            return out;
        }
        let (record, rest) = s.split_at(len);
        s = rest;
        let mut r = Bytes(record);
        let name: Vec<u8> = (0..r.u8()).map(|_| r.u8()).collect();
        let (qtype, qclass, flags, kind, rcode) = (r.u16(), r.u16(), r.u8(), r.u8(), r.u16());
        // question_end, additional_start, original TTL, lifetime, age.
        for _ in 0..2 + 2 + 4 + 8 + 8 {
            r.u8();
        }
        let offsets = r.u16() as usize;
        for _ in 0..offsets * 2 {
            r.u8();
        }
        let wire_len = u32::from_be_bytes([r.u8(), r.u8(), r.u8(), r.u8()]) as usize;
        assert_eq!(r.0.len(), wire_len, "record length");
        out.push(Written { name, qtype, qclass, flags, kind, rcode, wire: r.0.to_vec() });
    }
}

/// A client's query for a key, byte by byte: RD, CD from the key, an OPT
/// record with DO when the key has DO.
fn client_query(w: &Written) -> Vec<u8> {
    let dnssec_ok = w.flags & 1 != 0;
    let mut flags = RD;
    if w.flags & 2 != 0 {
        flags |= CD;
    }
    let mut q = Vec::new();
    q.extend(CLIENT_ID.to_be_bytes());
    q.extend(flags.to_be_bytes());
    q.extend([0, 1, 0, 0, 0, 0, 0, u8::from(dnssec_ok)]);
    q.extend(&w.name);
    q.extend(w.qtype.to_be_bytes());
    q.extend(w.qclass.to_be_bytes());
    if dnssec_ok {
        q.extend([0, 0, 41, 0x10, 0, 0, 0, 0x80, 0, 0, 0]);
    }
    q
}

fn run(params: u8, stream: &[u8]) {
    let policy = POLICIES[usize::from(params & 3)];
    let stale_max_age = Duration::from_secs(if params & 4 != 0 { 3600 } else { 0 });
    let max_records = if params & 8 != 0 { 3 } else { 1000 };
    let zone = |name: &[u8]| (!name.ends_with(b"\x02nz\x00")).then_some(policy);
    let now = Instant::now();
    let rules = Rules { policy: &zone, stale_max_age, max_records, deadline: now + Duration::from_secs(60) };
    let cache = Cache::new(1 << 20);
    let loaded = read_snapshot(&cache, now, &rules, &mut &stream[..]);
    assert!(loaded.loaded + loaded.refused <= max_records, "record bound");
    assert_eq!(loaded.first_refusal.is_some(), loaded.refused > 0);

    let mut written = Vec::new();
    let count = write_snapshot(&cache, now, stale_max_age, &mut written).unwrap();
    assert!(count <= loaded.loaded, "more written ({count}) than loaded");
    let records = read_written(&written);
    assert_eq!(records.len(), count);

    for w in &records {
        assert!(w.kind <= 1, "a failure loaded");
        let stored_question = w.wire.get(HEADER_LEN..HEADER_LEN + w.name.len());
        assert!(
            stored_question.is_some_and(|q| q.eq_ignore_ascii_case(&w.name)),
            "the stored message asks another name: {}",
            hex(&w.wire)
        );
        let packet = client_query(w);
        let parsed = query::parse(&packet)
            .unwrap_or_else(|e| panic!("loaded key is no query nodens parses ({}): {}", e.reason(), hex(&packet)));
        let mut buf = [0u8; 255];
        let key = KeyRef::from_query(&parsed, &mut buf);
        assert_eq!(
            (key.name, key.qtype, key.qclass, key.flags),
            (&w.name[..], w.qtype, w.qclass, w.flags),
            "the written key is not the one its query looks up"
        );
        let (entry, freshness) = match cache.lookup(&key, now, stale_max_age) {
            Lookup::Fresh(e) => (e, Freshness::Fresh),
            Lookup::Stale(e) => (e, Freshness::Stale { ttl: STALE_TTL }),
            Lookup::Miss => panic!("a written entry is not found: {}", hex(&w.name)),
            // Held answers need a current API watch, which this cache has not.
            Lookup::Held(_) => panic!("an entry held past its TTL without a watch: {}", hex(&w.name)),
        };
        let bound = if w.kind == 0 { policy.max_ttl } else { policy.negative_max_ttl };
        assert!(
            entry.remaining(now) <= Duration::from_secs(bound.into()),
            "remaining lifetime {:?} beyond the zone's {bound} s",
            entry.remaining(now)
        );
        let mut out = Vec::new();
        let rendered = entry.render(&parsed, now, freshness, None, 65535, &mut out);
        let msg = parse_message(&out)
            .unwrap_or_else(|| panic!("reply does not read: {}", hex(&out)));
        assert_eq!(msg.end, out.len(), "bytes after the records");
        assert_eq!(msg.id, CLIENT_ID);
        assert_eq!(msg.flags & (QR | RA | RD), QR | RA | RD);
        assert_eq!(msg.flags & TC, 0, "truncated at 65535 bytes");
        assert_eq!(msg.flags & 0x7800, 0, "opcode");
        assert_eq!(msg.flags & CD != 0, w.flags & 2 != 0);
        let rcode = msg.flags & 0xf;
        assert_eq!(rcode, u16_at(&out, 2) & 0xf);
        assert_eq!(rendered.rcode, w.rcode);
        assert!(rcode == 0 || rcode == 3, "rcode {rcode} loaded");
        assert_eq!(w.kind == 0, rcode == 0 && !msg.answer.is_empty(), "kind and rcode");
        assert_eq!(
            msg.question.as_deref(),
            Some(&packet[HEADER_LEN..HEADER_LEN + w.name.len() + 4]),
            "the reply's question is not the key's"
        );
        assert_eq!(msg.opt().is_some(), w.flags & 1 != 0, "OPT as asked");
        for r in msg.answer.iter().chain(&msg.authority).chain(&msg.additional) {
            if r.rtype == OPT {
                continue;
            }
            match freshness {
                Freshness::Fresh => assert!(r.ttl <= bound, "TTL {} beyond the zone's {bound}", r.ttl),
                Freshness::Stale { ttl } | Freshness::Held { ttl } => assert_eq!(r.ttl, ttl),
            }
        }
    }

    // What passed once passes again.
    let again = Cache::new(1 << 20);
    let reloaded = read_snapshot(&again, now, &Rules { max_records: 1000, ..rules }, &mut &written[..]);
    assert!(reloaded.cut.is_none(), "written stream cut: {:?}", reloaded.cut);
    assert_eq!((reloaded.loaded, reloaded.refused), (count, 0), "written stream: {:?}", reloaded.first_refusal);
}
