//! A kept reply is replayed with the asker's ID while its bytes are the
//! reply the cache would write, and never after.

use std::time::{Duration, Instant};

use super::*;
use crate::cache::testing::answer;

const NAME: &[u8] = b"\x03www\x04test\x00";

/// A query for `NAME` A with `id`.
fn query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend([1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend(NAME);
    q.extend([0, 1, 0, 1]);
    q
}

/// What the cache stage wrote for `packet`: a reply that starts with its
/// ID (the rest stands for the rendered answer).
fn reply(packet: &[u8]) -> Vec<u8> {
    let mut r = packet.to_vec();
    r[2] |= 0x80;
    r.extend([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1]);
    r
}

const COUNTED: Counted = Counted {
    zone: 3,
    qtype: 1,
    rcode: 0,
    dnssec_ok: false,
    success: true,
};

/// What the cache stage would hand over for `packet`, fresh at `now`.
fn kept<'a>(packet: &'a [u8], reply: &'a [u8], entry: &'a Arc<Entry>, now: Instant) -> Kept<'a> {
    Kept {
        packet,
        reply,
        entry,
        generation: 1,
        retirements: 0,
        prefetch_from: None,
        now,
        counted: COUNTED,
    }
}

fn keep(replies: &mut Replies, entry: &Arc<Entry>, now: Instant, prefetch_from: Option<Instant>) {
    let packet = query(7);
    replies.keep(Kept {
        prefetch_from,
        ..kept(&packet, &reply(&packet), entry, now)
    });
}

#[test]
fn a_repeat_gets_the_kept_reply_with_its_own_id() {
    let now = Instant::now();
    let entry = answer(NAME, 60, now);
    let mut replies = Replies::default();
    let mut out = Vec::new();
    assert_eq!(
        replies.replay(&query(9), 1, 0, now, &mut out),
        None,
        "nothing kept yet"
    );
    keep(&mut replies, &entry, now, None);
    let counted = replies.replay(&query(9), 1, 0, now + Duration::from_millis(300), &mut out);
    assert_eq!(counted, Some(COUNTED));
    assert_eq!(out, reply(&query(9)));
    // Another question (another type) is not this one.
    let mut aaaa = query(9);
    let at = aaaa.len() - 3;
    aaaa[at] = 28;
    assert_eq!(replies.replay(&aaaa, 1, 0, now, &mut out), None);
}

#[test]
fn nothing_is_replayed_once_its_bytes_would_differ() {
    let now = Instant::now();
    let entry = answer(NAME, 60, now);
    let mut replies = Replies::default();
    let mut out = Vec::new();
    keep(&mut replies, &entry, now, None);
    // The next second of the entry's age: its TTLs are one lower.
    let next = now + Duration::from_secs(1);
    assert_eq!(replies.replay(&query(9), 1, 0, next, &mut out), None);
    // Other settings (a reload).
    assert_eq!(replies.replay(&query(9), 2, 0, now, &mut out), None);
}

#[test]
fn nothing_is_replayed_in_the_prefetch_window_or_past_the_ttl() {
    let now = Instant::now();
    let mut replies = Replies::default();
    let mut out = Vec::new();
    let entry = answer(NAME, 60, now);
    keep(
        &mut replies,
        &entry,
        now,
        Some(now + Duration::from_millis(200)),
    );
    let later = now + Duration::from_millis(100);
    assert!(replies.replay(&query(9), 1, 0, later, &mut out).is_some());
    let window = now + Duration::from_millis(200);
    assert_eq!(replies.replay(&query(9), 1, 0, window, &mut out), None);
    // An entry fresh for one second is not replayed at its end.
    let short = answer(NAME, 1, now);
    let mut replies = Replies::default();
    keep(&mut replies, &short, now + Duration::from_millis(500), None);
    let end = now + Duration::from_secs(1);
    assert_eq!(replies.replay(&query(9), 1, 0, end, &mut out), None);
}

#[test]
fn a_retired_entry_is_not_replayed_once_the_count_moves() {
    let now = Instant::now();
    let mut replies = Replies::default();
    let mut out = Vec::new();
    let entry = answer(NAME, 60, now);
    keep(&mut replies, &entry, now, None);
    // The cache let another entry go: this one still stands.
    assert!(replies.replay(&query(9), 1, 1, now, &mut out).is_some());
    entry.retire();
    assert_eq!(replies.replay(&query(9), 1, 2, now, &mut out), None);
}

#[test]
fn a_pair_larger_than_a_slot_is_not_kept() {
    let now = Instant::now();
    let entry = answer(NAME, 60, now);
    let mut replies = Replies::default();
    let packet = query(7);
    let mut long = reply(&packet);
    long.resize(ROOM, 0);
    replies.keep(kept(&packet, &long, &entry, now));
    let mut out = Vec::new();
    assert_eq!(replies.replay(&query(9), 1, 0, now, &mut out), None);
}

#[test]
fn a_full_set_lets_a_name_in_when_it_comes_back_in_place_of_the_least_used() {
    let now = Instant::now();
    let mut replies = Replies::default();
    // Queries that differ in their question count land anywhere (the
    // table does not parse them); find three of one set.
    let packets: Vec<Vec<u8>> = (0..=u16::MAX)
        .map(|n| {
            let mut q = query(7);
            q[4..6].copy_from_slice(&n.to_be_bytes());
            q
        })
        .collect();
    let set = |p: &[u8]| replies.set_of(&p[2..]).0;
    let first = set(&packets[0]);
    let same: Vec<Vec<u8>> = packets
        .iter()
        .filter(|p| set(p) == first)
        .take(3)
        .cloned()
        .collect();
    assert_eq!(same.len(), 3, "three queries of one set among 65,536");
    let entry = answer(NAME, 60, now);
    let keep = |replies: &mut Replies, packet: &[u8]| {
        replies.keep(kept(packet, &reply(packet), &entry, now))
    };
    let mut out = Vec::new();
    keep(&mut replies, &same[0]);
    keep(&mut replies, &same[1]);
    // The first is replayed since: the third takes the second's way.
    assert!(replies.replay(&same[0], 1, 0, now, &mut out).is_some());
    // The third is let in when it comes back, not at once.
    keep(&mut replies, &same[2]);
    assert_eq!(replies.replay(&same[2], 1, 0, now, &mut out), None);
    keep(&mut replies, &same[2]);
    assert!(replies.replay(&same[0], 1, 0, now, &mut out).is_some());
    assert!(replies.replay(&same[2], 1, 0, now, &mut out).is_some());
    assert_eq!(replies.replay(&same[1], 1, 0, now, &mut out), None);
}
