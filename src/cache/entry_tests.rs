//! A cache entry's tests: rendered, clamped, weighed, and refused when its
//! offsets do not fit.

use super::*;
use crate::cache::testing::POLICY;
use crate::wire::{query, response};

/// Response: www.t. A 1.2.3.4 TTL 300, glue-like additional A TTL 100, OPT.
fn upstream() -> Vec<u8> {
    let mut m = vec![0xab, 0xcd, 0x85, 0x80, 0, 1, 0, 1, 0, 0, 0, 2];
    m.extend(b"\x03www\x01t\x00\x00\x01\x00\x01");
    m.extend(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\x01\x02\x03\x04");
    m.extend(b"\xc0\x10\x00\x01\x00\x01\x00\x00\x00\x64\x00\x04\x05\x06\x07\x08");
    m.extend([0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
    m
}

fn client_query(edns: bool) -> Vec<u8> {
    let mut p = vec![0x55, 0x66, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)];
    p.extend(b"\x03WwW\x01T\x00\x00\x01\x00\x01");
    if edns {
        p.extend([0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
    }
    p
}

#[test]
fn render_patches_id_case_ttl_and_opt() {
    let msg = upstream();
    let layout = response::layout(&msg).unwrap();
    let t0 = Instant::now();
    let e = Entry::from_response(&msg, &layout, &POLICY, t0).unwrap();
    assert_eq!(e.kind, Kind::Success);
    assert_eq!(e.original_ttl, 300);
    for edns in [false, true] {
        let p = client_query(edns);
        let q = query::parse(&p).unwrap();
        let mut out = Vec::new();
        e.render(
            &q,
            t0 + Duration::from_secs(7),
            Freshness::Fresh,
            None,
            512,
            &mut out,
        );
        assert_eq!(&out[..2], &[0x55, 0x66]);
        assert_eq!(read_u16(&out, 2) & flag::AA, 0);
        assert_eq!(&out[12..19], b"\x03WwW\x01T\x00");
        let l = response::layout(&out).unwrap();
        assert_eq!(read_u32(&out, l.ttls[0].0), 293);
        assert_eq!(read_u32(&out, l.ttls[1].0), 93);
        assert_eq!(l.opt.is_some(), edns);
    }
}

#[test]
fn render_stale_sets_stale_ttl() {
    let msg = upstream();
    let layout = response::layout(&msg).unwrap();
    let t0 = Instant::now();
    let e = Entry::from_response(&msg, &layout, &POLICY, t0).unwrap();
    let p = client_query(true);
    let q = query::parse(&p).unwrap();
    let mut out = Vec::new();
    e.render(
        &q,
        t0 + Duration::from_secs(400),
        Freshness::Stale { ttl: 30 },
        Some(3),
        usize::MAX,
        &mut out,
    );
    let l = response::layout(&out).unwrap();
    assert!(l.ttls.iter().all(|(at, _)| read_u32(&out, *at) == 30));
    assert_eq!(&out[out.len() - 6..], &[0, 15, 0, 2, 0, 3]);
}

#[test]
fn render_truncates_to_limit() {
    let msg = upstream();
    let layout = response::layout(&msg).unwrap();
    let e = Entry::from_response(&msg, &layout, &POLICY, Instant::now()).unwrap();
    let p = client_query(false);
    let q = query::parse(&p).unwrap();
    let mut out = Vec::new();
    // Room for the answer but not the additional record: drop it, no TC.
    let r = e.render(&q, Instant::now(), Freshness::Fresh, None, 50, &mut out);
    assert!(!r.truncated);
    assert_eq!(read_u16(&out, 6), 1);
    assert_eq!(read_u16(&out, 10), 0);
    // No room for the answer: question only, TC.
    let r = e.render(&q, Instant::now(), Freshness::Fresh, None, 30, &mut out);
    assert!(r.truncated);
    assert_eq!(out.len(), 23);
    assert_ne!(read_u16(&out, 2) & flag::TC, 0);
    assert_eq!(read_u16(&out, 6), 0);
}

/// The shape bench/run measures: an A answer for `h123456.bench.test.`.
/// Its weight with its key is what 100,000 of them add to RSS (245 B
/// measured), and the entry fits a small allocator block.
#[test]
fn weight_of_a_cached_a_answer_follows_the_measured_rss() {
    let name = b"\x07h123456\x05bench\x04test\x00";
    let mut msg = vec![0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
    msg.extend(name);
    msg.extend([
        0, 1, 0, 1, 0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 0x2c, 0, 4, 192, 0, 2, 1,
    ]);
    let layout = response::layout(&msg).unwrap();
    let entry = Entry::from_response(&msg, &layout, &POLICY, Instant::now()).unwrap();
    let key = crate::cache::KeyRef {
        name,
        qtype: 1,
        qclass: 1,
        flags: 0,
    };
    assert_eq!(key.to_owned().weight() + entry.weight(), 250);
    assert!(std::mem::size_of::<Entry>() <= 56);
}

/// An entry holds its offsets in two bytes: a layout of a longer
/// message, or one whose offsets lie outside the message, makes none
/// (before, the offsets wrapped and the first render panicked).
#[test]
fn offsets_that_do_not_fit_make_no_entry() {
    let msg = upstream();
    let layout = response::layout(&msg).unwrap();
    let now = Instant::now();
    let mut long = msg.clone();
    long.resize(70_000, 0);
    let mut beyond = layout.clone();
    beyond.end = long.len();
    assert!(Entry::from_response(&long, &beyond, &POLICY, now).is_none());
    // A TTL field in the header: patching it would write the counts.
    let mut ttl_in_header = layout.clone();
    ttl_in_header.ttls.push((4, Section::Answer));
    assert!(Entry::from_response(&msg, &ttl_in_header, &POLICY, now).is_none());
    let mut question_outside = layout.clone();
    question_outside.question_end = msg.len() + 1;
    assert!(Entry::from_response(&msg, &question_outside, &POLICY, now).is_none());
    assert_eq!(
        response::layout(&long),
        Err(response::ResponseError::TooLong)
    );
}

#[test]
fn ttl_clamps() {
    let msg = upstream();
    let layout = response::layout(&msg).unwrap();
    let policy = TtlPolicy {
        min_ttl: 200,
        max_ttl: 250,
        ..POLICY
    };
    let e = Entry::from_response(&msg, &layout, &policy, Instant::now()).unwrap();
    assert_eq!(e.original_ttl, 250);
}
