//! The wire layer never panics and never produces a malformed reply, whatever
//! bytes it is given: mutated client queries go through `query::parse`, mutated
//! upstream responses through `response::layout`, `Entry::from_response` and
//! `Entry::render`, and every rendered reply must itself be a well-formed
//! message that answers the query's ID and question. Deterministic (seeded), so
//! a failure reproduces.

use std::time::{Duration, Instant};

use nodens::wire::query::{self, Reject};
use nodens::wire::{build, name, read_u16, response};
use nodens::{Entry, Freshness, TtlPolicy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const POLICY: TtlPolicy = TtlPolicy {
    min_ttl: 0,
    max_ttl: 3600,
    negative_max_ttl: 1800,
    failure_ttl: 5,
};

fn valid_query() -> Vec<u8> {
    let mut q = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    q.extend(b"\x03www\x04test\x00\x00\x01\x00\x01");
    q.extend([0, 0, 41, 0x10, 0, 0, 0, 0x80, 0, 0, 0]);
    q
}

/// www.test. A, two answers, an SOA in authority, glue, and an OPT.
fn valid_response() -> Vec<u8> {
    let mut m = vec![0xab, 0xcd, 0x81, 0x80, 0, 1, 0, 2, 0, 1, 0, 2];
    m.extend(b"\x03www\x04test\x00\x00\x01\x00\x01");
    for last in [1u8, 2] {
        m.extend(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\xc0\x00\x02");
        m.push(last);
    }
    m.extend(b"\xc0\x10\x00\x06\x00\x01\x00\x00\x0e\x10\x00\x18\xc0\x10\xc0\x10");
    m.extend([0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 30]);
    m.extend(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x10\x00\x04\x0a\x00\x00\x01");
    m.extend([0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
    m
}

fn mutate(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let mut p = base.to_vec();
    for _ in 0..rng.random_range(1..6) {
        match rng.random_range(0..5) {
            0 | 1 if !p.is_empty() => {
                let i = rng.random_range(0..p.len());
                p[i] = rng.random();
            }
            2 => p.truncate(rng.random_range(0..=p.len())),
            3 => p.extend((0..rng.random_range(1..20)).map(|_| rng.random::<u8>())),
            _ => {
                // A compression pointer somewhere: loops, forward pointers, out of range.
                let i = rng.random_range(0..=p.len());
                let target: u8 = rng.random();
                p.splice(i..i, [0xc0, target]);
            }
        }
    }
    p
}

/// A reply must have a header, echo the query's ID, carry one question
/// equal to the query's, and walk cleanly.
fn assert_well_formed_reply(reply: &[u8], query: &[u8]) {
    assert!(reply.len() >= 12, "reply shorter than a header");
    assert_eq!(&reply[..2], &query[..2], "reply ID differs");
    assert_ne!(read_u16(reply, 2) & 0x8000, 0, "reply without QR");
    if read_u16(reply, 4) == 1 {
        let end = name::parse_uncompressed(reply, 12).expect("question name in reply") + 4;
        assert_eq!(
            &reply[12..end],
            &query[12..end],
            "reply question differs from the query's"
        );
        if let Err(e) = response::layout(reply) {
            panic!("reply does not walk ({e}):\nquery {query:02x?}\nreply {reply:02x?}");
        }
    }
}

#[test]
fn mutated_queries_never_panic_and_errors_are_well_formed() {
    let mut rng = StdRng::seed_from_u64(1);
    let base = valid_query();
    let (mut accepted, mut answered, mut dropped) = (0, 0, 0);
    let mut out = Vec::new();
    for _ in 0..200_000 {
        let p = mutate(&mut rng, &base);
        match query::parse(&p) {
            Ok(q) => {
                accepted += 1;
                assert!(q.name_end + 4 <= p.len());
            }
            Err(reject @ Reject::Answer { .. }) => {
                answered += 1;
                assert!(build::error_reply(&p, &reject, &mut out));
                assert_well_formed_reply(&out, &p);
            }
            Err(Reject::Drop(_)) => dropped += 1,
        }
    }
    // The mutator must actually reach every outcome, or this test proves little.
    assert!(
        accepted > 1000 && answered > 1000 && dropped > 1000,
        "{accepted} {answered} {dropped}"
    );
}

#[test]
fn mutated_responses_never_panic_and_render_well_formed() {
    let mut rng = StdRng::seed_from_u64(2);
    let base = valid_response();
    let q = valid_query();
    let query = query::parse(&q).unwrap();
    let question = query.question().to_vec();
    let mut out = Vec::new();
    let (mut cached, mut rejected) = (0, 0);
    let now = Instant::now();
    for _ in 0..200_000 {
        let m = mutate(&mut rng, &base);
        let m = match response::check_answers(&m, 0xabcd, &question, response::Case::Ignore) {
            Ok(response::Answers::Question) => m,
            Ok(response::Answers::ErrorWithoutQuestion) => response::with_question(&m, &question),
            Err(_) => {
                rejected += 1;
                continue;
            }
        };
        let Ok(layout) = response::layout(&m) else {
            rejected += 1;
            continue;
        };
        cached += 1;
        let entry = Entry::from_response(&m, &layout, &POLICY, now)
            .expect("a message `layout` accepts fits an entry");
        for (freshness, limit) in [
            (Freshness::Fresh, Some(512)),
            (Freshness::Stale { ttl: 30 }, None),
            (Freshness::Fresh, Some(60)),
        ] {
            entry.render(
                &query,
                now + Duration::from_secs(1),
                freshness,
                None,
                limit.unwrap_or(usize::MAX),
                &mut out,
            );
            assert_well_formed_reply(&out, &q);
            if let Some(limit) = limit {
                assert!(
                    out.len() <= limit.max(12 + question.len() + 11),
                    "reply of {} bytes over {limit}",
                    out.len()
                );
            }
        }
    }
    assert!(cached > 1000 && rejected > 1000, "{cached} {rejected}");
}
