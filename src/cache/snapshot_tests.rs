//! Unit tests of `cache::snapshot`.

use super::*;
use crate::cache::testing::{POLICY, every_name, key};
use crate::cache::{Freshness, Lookup};
use crate::wire::read_u32;

const HOST: &[u8] = b"\x04host\x07example\x00";
const OTHER: &[u8] = b"\x05other\x07example\x00";

fn rules(now: Instant) -> Rules<'static> {
    Rules {
        policy: &every_name,
        stale_max_age: Duration::ZERO,
        max_records: 100,
        deadline: now + Duration::from_secs(3600),
    }
}

/// An answer for `name` A with `flags`, one A record with `ttl` (none
/// with NXDOMAIN).
fn answer(name: &[u8], flags: u16, ttl: u32) -> Vec<u8> {
    let answers = u8::from(flags & 0xf == 0);
    let mut m = vec![0, 1, 0, 0, 0, 1, 0, answers, 0, 0, 0, 0];
    m[2..4].copy_from_slice(&flags.to_be_bytes());
    m.extend(name);
    m.extend([0, 1, 0, 1]);
    if answers == 1 {
        m.extend([0xc0, 0x0c, 0, 1, 0, 1]);
        m.extend(ttl.to_be_bytes());
        m.extend([0, 4, 192, 0, 2, 1]);
    }
    m
}

/// A record as any writer could send it, every field chosen.
struct Raw<'a> {
    name: &'a [u8],
    qtype: u16,
    flags: u8,
    kind: u8,
    rcode: u16,
    lifetime_ms: u64,
    age_ms: u64,
    offsets: &'a [u16],
    wire: Vec<u8>,
}

fn raw(name: &[u8], wire: Vec<u8>) -> Raw<'_> {
    Raw {
        name,
        qtype: 1,
        flags: 0,
        kind: 0,
        rcode: 0,
        lifetime_ms: 300_000,
        age_ms: 0,
        offsets: &[],
        wire,
    }
}

fn bytes(r: &Raw<'_>) -> Vec<u8> {
    let mut out = vec![r.name.len() as u8];
    out.extend(r.name);
    put_u16(&mut out, r.qtype);
    put_u16(&mut out, 1);
    out.push(r.flags);
    out.push(r.kind);
    put_u16(&mut out, r.rcode);
    put_u16(&mut out, 0);
    put_u16(&mut out, 0);
    put_u32(&mut out, u32::MAX);
    put_u64(&mut out, r.lifetime_ms);
    put_u64(&mut out, r.age_ms);
    put_u16(&mut out, r.offsets.len() as u16);
    for at in r.offsets {
        put_u16(&mut out, *at);
    }
    put_u32(&mut out, r.wire.len() as u32);
    out.extend(&r.wire);
    out
}

fn stream(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for r in records {
        put_u32(&mut out, r.len() as u32);
        out.extend(r);
    }
    put_u32(&mut out, 0);
    out
}

fn load(records: &[Vec<u8>], rules: &Rules<'_>, now: Instant) -> (Cache, Loaded) {
    let cache = Cache::new(1 << 20);
    let loaded = read(&cache, now, rules, &mut stream(records).as_slice());
    (cache, loaded)
}

/// The reply a client asking `name` A gets from `cache`, if any.
fn served(cache: &Cache, name: &[u8], now: Instant) -> Option<Vec<u8>> {
    let Lookup::Fresh(entry) = cache.lookup(&key(name), now, Duration::ZERO) else {
        return None;
    };
    let q = build::query_for(0x1234, name, 1, 1, false, false);
    let mut out = Vec::new();
    entry.render(
        &query::parse(&q).unwrap(),
        now,
        Freshness::Fresh,
        None,
        512,
        &mut out,
    );
    Some(out)
}

/// The one refusal of a load of `record` then a good one: the good one
/// is loaded all the same (a bad record does not end the load).
fn refusal_of(record: Raw<'_>) -> Refusal {
    let now = Instant::now();
    let good = bytes(&raw(OTHER, answer(OTHER, 0x8180, 60)));
    let (cache, loaded) = load(&[bytes(&record), good], &rules(now), now);
    assert!(loaded.cut.is_none(), "{:?}", loaded.cut);
    assert_eq!((loaded.loaded, loaded.refused), (1, 1));
    assert!(served(&cache, OTHER, now).is_some());
    assert!(served(&cache, record.name, now).is_none());
    loaded.first_refusal.unwrap()
}

/// A view's answers stay behind (the reader's views may be others),
/// and a record claiming a view is refused.
#[test]
fn answers_of_views_are_not_carried() {
    let now = Instant::now();
    let from = Cache::new(1 << 20);
    for (name, view) in [(HOST, 0), (OTHER, 3)] {
        let msg = answer(name, 0x8180, 3600);
        let layout = response::layout(&msg).unwrap();
        from.insert(
            key(name).in_view(view).to_owned(),
            Arc::new(Entry::from_response(&msg, &layout, &POLICY, now).unwrap()),
        );
    }
    let mut written = Vec::new();
    assert_eq!(write(&from, now, Duration::ZERO, &mut written).unwrap(), 1);
    let (to, loaded) = load(&[], &rules(now), now);
    assert_eq!(loaded.loaded, 0);
    let loaded = read(&to, now, &rules(now), &mut written.as_slice());
    assert_eq!((loaded.loaded, loaded.refused), (1, 0));
    assert!(served(&to, HOST, now).is_some());
    let claimed = Raw {
        flags: 3 << 2,
        ..raw(HOST, answer(HOST, 0x8180, 60))
    };
    let (_, loaded) = load(&[bytes(&claimed)], &rules(now), now);
    assert_eq!((loaded.loaded, loaded.refused), (0, 1));
}

#[test]
fn entries_survive_a_round_trip_and_bad_input_is_refused() {
    let msg = answer(HOST, 0x8180, 3600);
    let layout = response::layout(&msg).unwrap();
    let now = Instant::now();
    let from = Cache::new(1 << 20);
    from.insert(
        key(HOST).to_owned(),
        Arc::new(Entry::from_response(&msg, &layout, &POLICY, now).unwrap()),
    );

    let mut bytes = Vec::new();
    assert_eq!(write(&from, now, Duration::ZERO, &mut bytes).unwrap(), 1);
    let to = Cache::new(1 << 20);
    let loaded = read(&to, now, &rules(now), &mut bytes.as_slice());
    assert_eq!((loaded.loaded, loaded.refused), (1, 0));
    let out = served(&to, HOST, now).expect("fresh after the round trip");
    assert!(out.windows(4).any(|w| w == [192, 0, 2, 1]));

    // Every truncation and every flipped byte is refused or loaded, not
    // panicked on.
    for cut in 4..bytes.len() {
        let _ = read(&Cache::new(1 << 20), now, &rules(now), &mut &bytes[..cut]);
    }
    for at in 4..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0xff;
        let _ = read(&Cache::new(1 << 20), now, &rules(now), &mut bad.as_slice());
    }
    assert!(read(&to, now, &rules(now), &mut &b"XXXX"[..]).cut.is_some());
}

#[test]
fn ttls_and_lifetime_come_from_the_message_under_the_readers_policy() {
    let now = Instant::now();
    // 68 years in the message, more in the lifetime, offsets that point
    // at the header: the offsets and lifetime are ignored, the TTL is
    // clamped to the zone's max_ttl.
    let mut record = raw(HOST, answer(HOST, 0x8180, 0x7fff_ffff));
    record.lifetime_ms = u64::MAX;
    record.offsets = &[2, 4, 6];
    let (cache, loaded) = load(&[bytes(&record)], &rules(now), now);
    assert_eq!(loaded.loaded, 1);
    let out = served(&cache, HOST, now).unwrap();
    let layout = response::layout(&out).unwrap();
    assert_eq!(layout.ttls.len(), 1);
    assert_eq!(read_u32(&out, layout.ttls[0].0), POLICY.max_ttl);
    assert_eq!(&out[..4], &[0x12, 0x34, 0x81, 0x80]);
    // Past the clamped lifetime it is no longer fresh.
    let later = now + Duration::from_secs(POLICY.max_ttl.into());
    assert!(served(&cache, HOST, later).is_none());

    // 136 years (top bit set) is zero (RFC 2181 8): nothing to load.
    let mut record = raw(HOST, answer(HOST, 0x8180, u32::MAX));
    record.lifetime_ms = u64::MAX;
    assert_eq!(refusal_of(record), Refusal::Expired);
}

#[test]
fn an_answer_to_another_question_is_refused() {
    assert_eq!(
        refusal_of(raw(HOST, answer(OTHER, 0x8180, 60))),
        Refusal::QuestionMismatch
    );
    // The same name, another type.
    let mut record = raw(HOST, answer(HOST, 0x8180, 60));
    record.qtype = 28;
    assert_eq!(refusal_of(record), Refusal::QuestionMismatch);
    // Not a response.
    assert_eq!(
        refusal_of(raw(HOST, answer(HOST, 0x0180, 60))),
        Refusal::QuestionMismatch
    );
}

#[test]
fn a_kind_the_response_code_does_not_say_is_refused() {
    // NXDOMAIN given as a success.
    let mut record = raw(HOST, answer(HOST, 0x8183, 60));
    record.rcode = 3;
    assert_eq!(refusal_of(record), Refusal::KindMismatch);
    // An answer given as a denial.
    let mut record = raw(HOST, answer(HOST, 0x8180, 60));
    record.kind = 1;
    assert_eq!(refusal_of(record), Refusal::KindMismatch);
    // The rcode field disagreeing with the message.
    let mut record = raw(HOST, answer(HOST, 0x8180, 60));
    record.rcode = 3;
    assert_eq!(refusal_of(record), Refusal::KindMismatch);
    // A failure, whatever it is called.
    let mut record = raw(HOST, answer(HOST, 0x8182, 60));
    record.kind = 1;
    record.rcode = 2;
    assert_eq!(refusal_of(record), Refusal::KindMismatch);
    let mut record = raw(HOST, answer(HOST, 0x8180, 60));
    record.kind = 2;
    assert_eq!(refusal_of(record), Refusal::Malformed);
}

#[test]
fn a_message_that_does_not_walk_is_refused() {
    // Two answers counted, one there.
    let mut wire = answer(HOST, 0x8180, 60);
    wire[7] = 2;
    assert_eq!(refusal_of(raw(HOST, wire)), Refusal::BadWalk);
    // A pointer into the record's own TTL field.
    let mut wire = answer(HOST, 0x8180, 60);
    let ttl_at = 12 + HOST.len() + 4 + 6;
    wire[ttl_at..ttl_at + 4].copy_from_slice(&[1, b'a', 0, 0]);
    let name_at = 12 + HOST.len() + 4;
    wire[name_at + 1] = ttl_at as u8;
    assert_eq!(refusal_of(raw(HOST, wire)), Refusal::BadWalk);
}

#[test]
fn keys_no_query_would_make_are_refused() {
    // Not folded.
    let name = b"\x04HOST\x07example\x00";
    assert_eq!(
        refusal_of(raw(name, answer(name, 0x8180, 60))),
        Refusal::BadKey
    );
    // Flags beyond DO and CD.
    let mut record = raw(HOST, answer(HOST, 0x8180, 60));
    record.flags = 0x80;
    assert_eq!(refusal_of(record), Refusal::BadKey);
    // A type nodens refuses to serve (AXFR).
    let mut record = raw(HOST, answer(HOST, 0x8180, 60));
    record.qtype = 252;
    assert_eq!(refusal_of(record), Refusal::BadKey);
}

#[test]
fn stale_and_unrouted_entries_are_dropped() {
    let mut record = raw(HOST, answer(HOST, 0x8180, 60));
    record.age_ms = 61_000;
    assert_eq!(refusal_of(record), Refusal::Expired);
    // Within the stale window it stays.
    let now = Instant::now();
    let mut record = raw(HOST, answer(HOST, 0x8180, 60));
    record.age_ms = 61_000;
    let stale = Rules {
        stale_max_age: Duration::from_secs(10),
        ..rules(now)
    };
    assert_eq!(load(&[bytes(&record)], &stale, now).1.loaded, 1);

    let nowhere = |_: &[u8]| None;
    let unrouted = Rules {
        policy: &nowhere,
        ..rules(now)
    };
    let record = raw(HOST, answer(HOST, 0x8180, 60));
    let loaded = load(&[bytes(&record)], &unrouted, now).1;
    assert_eq!(loaded.first_refusal, Some(Refusal::NoZone));
}

#[test]
fn a_record_with_bytes_left_over_is_refused_and_reading_goes_on() {
    let now = Instant::now();
    let mut bad = bytes(&raw(HOST, answer(HOST, 0x8180, 60)));
    bad.push(0);
    let good = bytes(&raw(OTHER, answer(OTHER, 0x8180, 60)));
    let (_, loaded) = load(&[bad, good], &rules(now), now);
    assert_eq!((loaded.loaded, loaded.refused), (1, 1));
    assert_eq!(loaded.first_refusal, Some(Refusal::Malformed));
}

#[test]
fn too_many_records_end_the_load() {
    let now = Instant::now();
    let record = bytes(&raw(HOST, answer(HOST, 0x8180, 60)));
    let bounded = Rules {
        max_records: 2,
        ..rules(now)
    };
    let (_, loaded) = load(&[record.clone(), record.clone(), record], &bounded, now);
    assert_eq!(loaded.loaded, 2);
    assert!(loaded.cut.is_some());
    assert_eq!(max_records(0), 1);
    assert_eq!(max_records(64 << 20), (64 << 20) / 128);
    assert_eq!(max_records(u64::MAX), HARD_MAX_RECORDS);
}

#[test]
fn broken_framing_and_a_passed_deadline_end_the_load() {
    let now = Instant::now();
    let good = bytes(&raw(HOST, answer(HOST, 0x8180, 60)));
    let mut broken = stream(std::slice::from_ref(&good));
    broken.truncate(broken.len() - 4);
    broken.extend(u32::MAX.to_be_bytes());
    broken.extend(&good);
    let loaded = read(
        &Cache::new(1 << 20),
        now,
        &rules(now),
        &mut broken.as_slice(),
    );
    assert_eq!(loaded.loaded, 1);
    assert!(loaded.cut.is_some());

    let passed = Rules {
        deadline: now,
        ..rules(now)
    };
    let loaded = load(&[good], &passed, now).1;
    assert_eq!(loaded.loaded, 0);
    assert!(
        matches!(loaded.cut, Some(Cut::Deadline)),
        "{:?}",
        loaded.cut
    );
}
