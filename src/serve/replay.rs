//! Replay: a UDP worker keeps the replies it gave from the cache, and
//! answers a repeat of the same query (the same bytes after the ID) with
//! a copy, before parsing it. The reply would have been the same bytes:
//! the cache's reply is a function of the query's bytes, the entry, the
//! settings and the second of the entry's age (its TTLs count down in
//! whole seconds), and a kept reply is given only while all four hold.
//! This is dnsdist's packet cache in front of its backends, kept per
//! worker (no lock, no shared line) and in front of nodens's own cache,
//! which stays the one truth: a copy goes as soon as the cache lets its
//! entry go (evicted, replaced, flushed, purged by the API watch).
//!
//! Why: a hit's own work (parse, route, the cache's lookup, render) is a
//! chain of loads from memory the kernel's work between batches has
//! pushed out of the near caches. A kept reply is one slot, fetched for
//! every query of a batch before the first is answered
//! ([`Replies::prefetch`]), so the batch waits on memory once
//! (docs/performance.md, "The sixth step: replay").
//!
//! Kept only where no stage before the cache depends on the client
//! (`hit::keep_for_replay`), only for UDP (a worker's batch), and only with
//! no observer of replies (the query log, dnstap, workload counters want
//! each query parsed). A replayed reply is counted as the hit it repeats:
//! the same requests, cache hits and responses series, in the batch's tally.
//!
//! Request path: right after `admit` and `budget` (the allow list, the
//! rate limits and the namespace budgets see every query), before parsing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cache::Entry;

/// Kept replies per worker, in sets of two: a name shares its set with
/// one other; a third takes the place of the one replayed longer ago
/// when it comes back before another name of the set does.
/// 8,192 slots of 256 bytes: two mebibytes a worker, allocated at its
/// first kept reply. A thousand names thrash in under 1 % of the sets.
const SLOTS: usize = 8192;
const WAYS: usize = 2;
/// Room for a query (after its ID) and its reply, together: a typical
/// question with its OPT record is 40 to 60 bytes and an answer of one or
/// two records 60 to 140; a larger pair is rendered each time.
const ROOM: usize = 200;

/// A worker's kept replies.
pub(crate) struct Replies {
    /// Empty until the first reply is kept.
    slots: Box<[Slot]>,
    /// Per set, the tag of the last query refused a place in it.
    candidates: Box<[u32]>,
    /// Counts replays and keeps: a slot's `used` is this when it last was.
    clock: u32,
    hashing: ahash::RandomState,
    /// Times are kept as nanoseconds since this.
    base: Instant,
    /// The batch's arrival, which every query of it is answered at, in
    /// nanoseconds since `base`: one subtraction a batch, not one a query.
    arrival: Option<(Instant, u64)>,
    /// The address and hash of each query [`Replies::prefetch`] saw in
    /// this batch, in order, so that [`Replies::replay`] hashes none twice.
    prepared: Vec<(usize, u64)>,
    /// The next of `prepared` to be replayed.
    next: usize,
}

/// One kept reply: a header line, then the query and the reply.
#[repr(C, align(64))]
struct Slot {
    /// The settings generation it was rendered under.
    generation: u64,
    /// The cache's retirement count when the entry was last seen held.
    retirements: u64,
    /// Until when (nanoseconds since `base`) the same bytes are the reply:
    /// the end of the entry's second of age, its freshness, or its
    /// prefetch window, whichever comes first; 0 when the slot is free.
    until: u64,
    /// The cache's entry, to see whether the cache still holds it.
    entry: Option<Arc<Entry>>,
    /// Bits of the query's hash, to pass over another query at once.
    tag: u32,
    /// The worker's `clock` when the slot was last kept or replayed.
    used: u32,
    counted: Counted,
    query_len: u16,
    reply_len: u16,
    /// The query after its ID, then the reply with the first query's ID.
    bytes: [u8; ROOM],
}

const _: () = assert!(std::mem::size_of::<Slot>() == 256);

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            generation: 0,
            retirements: 0,
            until: 0,
            entry: None,
            tag: 0,
            used: 0,
            counted: Counted::default(),
            query_len: 0,
            reply_len: 0,
            bytes: [0; ROOM],
        }
    }
}

impl Slot {
    #[inline]
    fn query(&self) -> &[u8] {
        &self.bytes[..usize::from(self.query_len)]
    }

    #[inline]
    fn reply(&self) -> &[u8] {
        let start = usize::from(self.query_len);
        &self.bytes[start..start + usize::from(self.reply_len)]
    }
}

/// What a replayed reply is counted as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counted {
    pub(super) zone: u32,
    pub(super) qtype: u16,
    pub(super) rcode: u16,
    pub(super) dnssec_ok: bool,
    pub(super) success: bool,
}

/// A reply to keep: what the cache stage wrote for `packet`.
pub(super) struct Kept<'a> {
    pub(super) packet: &'a [u8],
    pub(super) reply: &'a [u8],
    pub(super) entry: &'a Arc<Entry>,
    /// The settings generation and the cache's retirement count the
    /// batch started with (before the entry was looked up).
    pub(super) generation: u64,
    pub(super) retirements: u64,
    /// When the entry enters its prefetch window (`None`: no prefetch).
    pub(super) prefetch_from: Option<Instant>,
    pub(super) now: Instant,
    pub(super) counted: Counted,
}

impl Default for Replies {
    fn default() -> Replies {
        Replies {
            slots: Box::default(),
            candidates: Box::default(),
            clock: 0,
            hashing: ahash::RandomState::new(),
            base: Instant::now(),
            arrival: None,
            prepared: Vec::with_capacity(64),
            next: 0,
        }
    }
}

impl Replies {
    /// The first slot of the set for `query`, and the query's tag.
    #[inline]
    fn set_of(&self, query: &[u8]) -> (usize, u32) {
        set_of(self.hashing.hash_one(query))
    }

    /// [`Replies::set_of`], with the hash `prefetch` took if it saw `query`.
    #[inline]
    fn set_of_prepared(&mut self, query: &[u8]) -> (usize, u32) {
        // In the order they were prepared; one a stage before this one
        // answered is passed over.
        let at = query.as_ptr() as usize;
        if let Some(found) = self.prepared[self.next..].iter().position(|p| p.0 == at) {
            self.next += found + 1;
            return set_of(self.prepared[self.next - 1].1);
        }
        self.set_of(query)
    }

    /// Forgets the batch's hashes (at its end).
    #[inline]
    pub(super) fn end_batch(&mut self) {
        self.prepared.clear();
        self.next = 0;
        self.arrival = None;
    }

    /// [`Replies::nanos`] of the batch's arrival, `at`, worked out once.
    #[inline]
    fn arrival_nanos(&mut self, at: Instant) -> u64 {
        match self.arrival {
            Some((arrival, nanos)) if arrival == at => nanos,
            _ => {
                let nanos = self.nanos(at);
                self.arrival = Some((at, nanos));
                nanos
            }
        }
    }

    #[inline]
    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_nanos() as u64
    }

    /// Asks the processor for the set of `packet` ahead of its turn.
    #[inline]
    pub(super) fn prefetch(&mut self, packet: &[u8]) {
        let Some(query) = packet.get(2..) else {
            return;
        };
        if self.slots.is_empty() {
            return;
        }
        let hash = self.hashing.hash_one(query);
        if self.prepared.len() < self.prepared.capacity() {
            self.prepared.push((query.as_ptr() as usize, hash));
        }
        let (first, _) = set_of(hash);
        // All of the first way, where a name alone in its set is kept,
        // and the header of the other.
        let set = self.slots[first..first + WAYS].as_ptr().cast::<u8>();
        for line in 0..size_of::<Slot>() / 64 + 1 {
            // SAFETY: within the set's slots, which `self` owns.
            prefetch(unsafe { set.add(line * 64) });
        }
    }

    /// Writes the kept reply to `packet` into `out`, with its ID, if one
    /// stands for settings `generation` at `now`; `retirements` is the
    /// cache's count at the batch's start.
    #[inline]
    pub(super) fn replay(
        &mut self,
        packet: &[u8],
        generation: u64,
        retirements: u64,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Option<Counted> {
        let (id, query) = (packet.get(..2)?, &packet[2..]);
        if self.slots.is_empty() {
            return None;
        }
        let (first, tag) = self.set_of_prepared(query);
        let now = self.arrival_nanos(now);
        let slot = self.slots[first..first + WAYS]
            .iter_mut()
            .find(|s| s.tag == tag && s.query() == query)?;
        if slot.generation != generation || now >= slot.until {
            return None;
        }
        if slot.retirements != retirements {
            // The cache let something go: is it this one?
            if slot.entry.as_ref().is_none_or(|e| e.is_retired()) {
                // Let the entry's memory go with it.
                slot.entry = None;
                slot.until = 0;
                return None;
            }
            slot.retirements = retirements;
        }
        self.clock = self.clock.wrapping_add(1);
        slot.used = self.clock;
        out.clear();
        out.extend_from_slice(slot.reply());
        out[..2].copy_from_slice(id);
        Some(slot.counted)
    }

    /// Keeps `kept` in its set, in place of a slot that no longer serves,
    /// else of the other way than the query's hash picks.
    pub(super) fn keep(&mut self, kept: Kept<'_>) {
        let Some(query) = kept.packet.get(2..) else {
            return;
        };
        if query.len() + kept.reply.len() > ROOM || kept.reply.len() < 12 {
            return;
        }
        let entry = kept.entry;
        // The reply's TTLs are the entry's less its age in whole seconds:
        // the same until the age's next second.
        let age = entry.age(kept.now);
        let next_second = entry.stored_at() + Duration::from_secs(age.as_secs() + 1);
        let mut until = next_second.min(entry.expires_at());
        if let Some(from) = kept.prefetch_from {
            until = until.min(from);
        }
        let (until, now) = (self.nanos(until), self.nanos(kept.now));
        if now >= until {
            return;
        }
        if self.slots.is_empty() {
            self.slots = (0..SLOTS).map(|_| Slot::default()).collect();
            self.candidates = vec![0; SLOTS / WAYS].into_boxed_slice();
        }
        let (first, tag) = self.set_of(query);
        self.clock = self.clock.wrapping_add(1);
        let clock = self.clock;
        let set = &mut self.slots[first..first + WAYS];
        let way = set
            .iter()
            .position(|s| s.tag == tag && s.query() == query)
            .or_else(|| {
                set.iter()
                    .position(|s| s.generation != kept.generation || now >= s.until)
            });
        let way = match way {
            Some(way) => way,
            // Both ways serve: a name takes one over only when it comes
            // back before another name of its set does (a doorkeeper), so
            // that more hot names than slots do not copy each hit in and
            // out of the table.
            None if self.candidates[first / WAYS] != tag => {
                self.candidates[first / WAYS] = tag;
                return;
            }
            None => {
                let idle = |s: &Slot| clock.wrapping_sub(s.used);
                let oldest = set.iter().enumerate().max_by_key(|(_, s)| idle(s));
                oldest.map_or(0, |(way, _)| way)
            }
        };
        let slot = &mut set[way];
        slot.generation = kept.generation;
        slot.retirements = kept.retirements;
        slot.until = until;
        slot.entry = Some(Arc::clone(entry));
        slot.tag = tag;
        slot.used = clock;
        slot.counted = kept.counted;
        slot.query_len = query.len() as u16;
        slot.reply_len = kept.reply.len() as u16;
        slot.bytes[..query.len()].copy_from_slice(query);
        slot.bytes[query.len()..query.len() + kept.reply.len()].copy_from_slice(kept.reply);
    }
}

/// The first slot of a hash's set, and its tag (never 0: a free slot's).
#[inline]
fn set_of(hash: u64) -> (usize, u32) {
    (
        (hash as usize % (SLOTS / WAYS)) * WAYS,
        (hash >> 32) as u32 | 1,
    )
}

/// A hint that `at` is read soon; nothing where the processor has no
/// such instruction in stable Rust.
#[inline(always)]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
