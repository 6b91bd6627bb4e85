//! A cached response: the upstream's wire bytes, prepared once on the miss
//! path so that a hit is one copy plus a few patched fields.
//!
//! Stored form: the upstream response with its OPT record removed (the
//! client's EDNS decides whether a reply carries one), TTLs clamped by the
//! zone's policy, AA and TC cleared. The offsets of every TTL field are kept,
//! so a hit rewrites TTLs without parsing the message again.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::wire::build::push_opt;
use crate::wire::query::Query;
use crate::wire::response::{Layout, Section, sane_ttl};
use crate::wire::{HEADER_LEN, MAX_MESSAGE, flag, rcode, read_u16, read_u32, write_u16, write_u32};

/// Memory an entry costs beyond its own bytes: the `Arc` header (16), two
/// heap allocations' size-class rounding (the entry's bytes, the key's
/// name), and the cache's slot, index entry and spare table room. Set from
/// measurement: 100,000 cached A answers add 245 bytes of RSS each
/// (bench/run, the `h<n>.bench.test.` names), and their weight with this
/// constant is 250, so that `cache.capacity` bounds memory, not just
/// payload.
const BOOKKEEPING: usize = 96;

/// What a response says, which decides its cache lifetime and which of the
/// two caches holds it (CoreDNS's `success` and `denial`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// NOERROR with records in the answer section.
    Success,
    /// NXDOMAIN, or NOERROR without answers (NODATA): RFC 2308.
    Denial,
    /// SERVFAIL from upstream, or no upstream answered: RFC 9520.
    Failure,
}

/// TTL policy of the zone a response belongs to.
#[derive(Debug, Clone, Copy)]
pub struct TtlPolicy {
    pub min_ttl: u32,
    pub max_ttl: u32,
    pub negative_max_ttl: u32,
    pub failure_ttl: u32,
}

#[derive(Debug)]
pub struct Entry {
    pub kind: Kind,
    /// The response code (4 bits; extended codes are never cached).
    pub rcode: u16,
    /// The stored message, then the offset of each of its TTL fields (two
    /// bytes each): one allocation instead of two.
    bytes: Box<[u8]>,
    /// Where the message ends in `bytes`.
    wire_len: u16,
    question_end: u16,
    additional_start: u16,
    stored_at: Instant,
    /// How long the entry is fresh, in seconds (a TTL).
    lifetime_secs: u32,
    /// The TTL the entry started with, in seconds (for prefetch).
    pub original_ttl: u32,
    /// Hits, counted up to the zone's `prefetch_min_hits` and not past it
    /// (prefetch asks only whether the threshold is reached).
    pub hits: AtomicU32,
    /// Set once a prefetch for this entry has been started.
    pub prefetch_started: AtomicBool,
    /// Fetched by search-list speculation and not asked for yet.
    speculative: AtomicBool,
    /// [`HOLDABLE`] and [`RETIRED`], in one byte: the entry stays 56 bytes.
    marks: AtomicU8,
}

/// Covered by the API watch: may be served past its TTL while the watch
/// is current (`cache::follow`).
const HOLDABLE: u8 = 1;
/// Let go by the cache (evicted, replaced, removed): a worker's replayed
/// copy of it is then no longer the cache's answer (`serve::replay`).
const RETIRED: u8 = 2;

/// An entry's contents, for writing it out and reading it back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parts<'a> {
    pub kind: Kind,
    pub rcode: u16,
    pub wire: &'a [u8],
    pub ttl_offsets: &'a [u8],
    pub question_end: u16,
    pub additional_start: u16,
    pub age: Duration,
    pub lifetime: Duration,
    pub original_ttl: u32,
}

/// How a reply is rendered from an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Served stale (RFC 8767) with this TTL on every record.
    Stale {
        ttl: u32,
    },
    /// Held past its TTL while the API watch is current, with this TTL on
    /// every record (`cache::follow`).
    Held {
        ttl: u32,
    },
}

/// What rendering produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rendered {
    pub rcode: u16,
    pub truncated: bool,
}

impl Entry {
    /// Marks an entry fetched ahead of its asker (search-list speculation).
    pub fn mark_speculative(&self) {
        self.speculative.store(true, Ordering::Relaxed);
    }

    /// Whether the entry was speculative and not yet taken; clears the mark.
    /// One relaxed load on a hit for entries that never were.
    #[inline]
    pub fn take_speculative(&self) -> bool {
        self.speculative.load(Ordering::Relaxed) && self.speculative.swap(false, Ordering::Relaxed)
    }

    /// Prepares an upstream response for the cache (a zero lifetime still
    /// answers the clients that waited for it, see [`Entry::is_cacheable`]).
    /// `None` when `layout` does not describe a message an entry can hold:
    /// longer than 65,535 bytes, or an offset outside it. Every offset is
    /// checked here, once, so that rendering can trust them.
    pub fn from_response(
        msg: &[u8],
        layout: &Layout,
        policy: &TtlPolicy,
        now: Instant,
    ) -> Option<Entry> {
        if msg.len() > MAX_MESSAGE || layout.end > msg.len() || layout.end < HEADER_LEN {
            return None;
        }
        let kind = match layout.rcode {
            rcode::NOERROR if layout.answer_count > 0 => Kind::Success,
            rcode::NOERROR | rcode::NXDOMAIN => Kind::Denial,
            _ => Kind::Failure,
        };
        // Drop the OPT record. It is normally last; if not, drop the whole
        // additional section rather than shift records that may be pointed at.
        let (wire_len, arcount_cut) = match &layout.opt {
            None => (layout.end, None),
            Some(opt) if opt.end == layout.end => (opt.start, Some(read_u16(msg, 10) - 1)),
            Some(_) => (layout.additional_start, Some(0)),
        };
        if wire_len < layout.question_end {
            return None;
        }
        let kept = || layout.ttls.iter().filter(|(at, _)| *at + 4 <= wire_len);
        // One allocation of the final size: the message, then the offsets
        // of its TTL fields (see `Entry::new`).
        let mut bytes = Vec::with_capacity(wire_len + 2 * kept().count());
        bytes.extend_from_slice(&msg[..wire_len]);
        if let Some(count) = arcount_cut {
            write_u16(&mut bytes, 10, count);
        }
        let flags = read_u16(&bytes, 2) & !(flag::AA | flag::TC);
        write_u16(&mut bytes, 2, flags);

        let lifetime = match kind {
            Kind::Success => kept()
                .filter(|(_, s)| *s != Section::Additional)
                .map(|(at, _)| {
                    sane_ttl(read_u32(&bytes, *at)).clamp(policy.min_ttl, policy.max_ttl)
                })
                .min()
                .unwrap_or(0),
            Kind::Denial => layout
                .soa_negative_ttl
                .map_or(0, |t| t.min(policy.negative_max_ttl)),
            Kind::Failure => policy.failure_ttl,
        };
        for (at, _) in kept() {
            let ttl = sane_ttl(read_u32(&bytes, *at));
            let clamped = match kind {
                Kind::Success => ttl.clamp(policy.min_ttl, policy.max_ttl),
                Kind::Denial | Kind::Failure => ttl.min(lifetime),
            };
            write_u32(&mut bytes, *at, clamped);
            // After the message, its offset: below `wire_len`, checked above
            // to be at most 65,535 (and again by `Entry::new`).
            bytes.extend(u16::try_from(*at).ok()?.to_be_bytes());
        }
        let additional_start = layout.additional_start.min(wire_len);
        Entry::new(
            kind,
            layout.rcode,
            bytes,
            wire_len,
            layout.question_end,
            additional_start,
            lifetime,
            now,
        )
    }

    /// A synthesised failure (no upstream answered): header and question
    /// of the query with SERVFAIL, cached for `ttl` seconds.
    pub fn failure(question: &[u8], ttl: u32, now: Instant) -> Entry {
        // A question is a name (255 bytes at most) and four: it always fits.
        let question = if question.len() <= 259 { question } else { &[] };
        let mut wire = vec![
            0,
            0,
            0x81,
            0x80 | rcode::SERVFAIL as u8,
            0,
            1,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        wire.extend_from_slice(question);
        if question.is_empty() {
            write_u16(&mut wire, 4, 0);
        }
        let end = wire.len();
        Entry::new(
            Kind::Failure,
            rcode::SERVFAIL,
            wire,
            end,
            end,
            end,
            ttl,
            now,
        )
        .expect("a header and one question fit an entry")
    }

    /// `bytes` holds the message (its first `wire_len` bytes), then the
    /// offset of each of its TTL fields, two bytes each. `None` unless the
    /// message is at most 65,535 bytes, `question_end <= additional_start
    /// <= wire_len`, and every TTL field lies whole after the question:
    /// [`Entry::render`] trusts these without checking again.
    #[allow(clippy::too_many_arguments)]
    fn new(
        kind: Kind,
        rcode: u16,
        bytes: Vec<u8>,
        wire_len: usize,
        question_end: usize,
        additional_start: usize,
        ttl: u32,
        now: Instant,
    ) -> Option<Entry> {
        let fits = wire_len <= MAX_MESSAGE
            && wire_len <= bytes.len()
            && (bytes.len() - wire_len) % 2 == 0
            && HEADER_LEN <= question_end
            && question_end <= additional_start
            && additional_start <= wire_len
            && offsets(&bytes[wire_len..]).all(|at| at >= question_end && at + 4 <= wire_len);
        if !fits {
            return None;
        }
        Some(Entry {
            kind,
            rcode,
            bytes: bytes.into_boxed_slice(),
            wire_len: wire_len as u16,
            question_end: question_end as u16,
            additional_start: additional_start as u16,
            stored_at: now,
            lifetime_secs: ttl,
            original_ttl: ttl,
            hits: AtomicU32::new(0),
            prefetch_started: AtomicBool::new(false),
            speculative: AtomicBool::new(false),
            marks: AtomicU8::new(0),
        })
    }

    /// Bytes this entry occupies, for the cache's weight: its own size, its
    /// heap bytes, and [`BOOKKEEPING`] for what the allocator and the
    /// cache's tables add, so that `cache.capacity` bounds memory, not just
    /// payload.
    pub fn weight(&self) -> usize {
        std::mem::size_of::<Entry>() + self.bytes.len() + BOOKKEEPING
    }

    /// The stored message.
    #[inline]
    fn wire(&self) -> &[u8] {
        &self.bytes[..usize::from(self.wire_len)]
    }

    /// The offsets of the message's TTL fields, as stored after it.
    #[inline]
    fn ttl_offsets(&self) -> &[u8] {
        &self.bytes[usize::from(self.wire_len)..]
    }

    #[inline]
    fn lifetime(&self) -> Duration {
        Duration::from_secs(self.lifetime_secs.into())
    }

    /// When the entry was stored (or, read back, when it would have been).
    pub fn stored_at(&self) -> Instant {
        self.stored_at
    }

    /// When the entry stops being fresh.
    pub fn expires_at(&self) -> Instant {
        self.stored_at + self.lifetime()
    }

    /// The entry as plain parts, for a cache snapshot.
    pub(crate) fn parts(&self, now: Instant) -> Parts<'_> {
        Parts {
            kind: self.kind,
            rcode: self.rcode,
            wire: self.wire(),
            ttl_offsets: self.ttl_offsets(),
            question_end: self.question_end,
            additional_start: self.additional_start,
            age: self.age(now),
            lifetime: self.lifetime(),
            original_ttl: self.original_ttl,
        }
    }

    /// The question as stored (the name as the upstream echoed it).
    pub fn question(&self) -> &[u8] {
        &self.wire()[HEADER_LEN..self.question_end as usize]
    }

    pub fn is_cacheable(&self) -> bool {
        self.lifetime_secs != 0
    }

    pub fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.stored_at)
    }

    pub fn is_fresh(&self, now: Instant) -> bool {
        self.age(now) < self.lifetime()
    }

    /// Marks an entry the cache has let go of.
    pub(crate) fn retire(&self) {
        self.marks.fetch_or(RETIRED, Ordering::Relaxed);
    }

    /// Whether the cache has let go of the entry.
    #[inline]
    pub(crate) fn is_retired(&self) -> bool {
        self.marks.load(Ordering::Relaxed) & RETIRED != 0
    }

    /// Marks an entry the API watch covers (before it is stored).
    pub(crate) fn mark_holdable(&self) {
        self.marks.fetch_or(HOLDABLE, Ordering::Relaxed);
    }

    /// Whether the entry is marked holdable.
    pub(crate) fn is_holdable(&self) -> bool {
        self.marks.load(Ordering::Relaxed) & HOLDABLE != 0
    }

    /// Whether an expired entry is held at `now`, `hold_secs` past its
    /// TTL: an answer (not a failure) the watch covers.
    pub(crate) fn is_held(&self, now: Instant, hold_secs: u32) -> bool {
        self.kind != Kind::Failure
            && self.is_holdable()
            && self.age(now) < self.lifetime() + Duration::from_secs(hold_secs.into())
    }

    /// Whether an expired entry may still be served stale at `now`.
    pub fn is_servable_stale(&self, now: Instant, stale_max_age: Duration) -> bool {
        self.kind != Kind::Failure && self.age(now) < self.lifetime() + stale_max_age
    }

    /// Seconds of freshness left, rounded down.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.lifetime().saturating_sub(self.age(now))
    }

    /// Writes the reply to `query` into `out`: the stored message with the
    /// client's ID, flags and question (its letter case included), TTLs
    /// counted down, an OPT record if the client sent one, cut to `limit`
    /// bytes by dropping the additional section or else setting TC.
    pub fn render(
        &self,
        query: &Query<'_>,
        now: Instant,
        freshness: Freshness,
        ede: Option<u16>,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Rendered {
        let opt_len = query
            .edns
            .map_or(0, |_| 11 + if ede.is_some() { 6 } else { 0 });
        out.clear();
        let wire = self.wire();
        // Room for the OPT record too: no second allocation for it.
        out.reserve(wire.len() + opt_len);
        out.extend_from_slice(wire);
        write_u16(out, 0, query.id);
        // RA always: to its clients nodens is a recursive service, whatever
        // the upstream (an authoritative server, say) set.
        let mut flags = (read_u16(out, 2) & !(flag::RD | flag::CD)) | flag::RA;
        flags |= query.flags & (flag::RD | flag::CD);
        // RFC 6840 5.8: AD only to clients that asked for it (AD or DO).
        if query.flags & flag::AD == 0 && !query.dnssec_ok() {
            flags &= !flag::AD;
        }
        write_u16(out, 2, flags);
        let question = query.question();
        if HEADER_LEN + question.len() == self.question_end as usize {
            out[HEADER_LEN..self.question_end as usize].copy_from_slice(question);
        }
        let elapsed = self.age(now).as_secs().min(u32::MAX.into()) as u32;
        for at in offsets(self.ttl_offsets()) {
            let ttl = match freshness {
                Freshness::Fresh => read_u32(wire, at).saturating_sub(elapsed),
                Freshness::Stale { ttl } | Freshness::Held { ttl } => ttl,
            };
            write_u32(out, at, ttl);
        }
        let mut rendered = Rendered {
            rcode: self.rcode,
            truncated: false,
        };
        if out.len() + opt_len > limit {
            // RFC 2181 9: leaving out additional data needs no TC bit.
            let cut = if self.additional_start as usize + opt_len <= limit {
                self.additional_start as usize
            } else {
                write_u16(out, 6, 0);
                write_u16(out, 8, 0);
                let flags = read_u16(out, 2) | flag::TC;
                write_u16(out, 2, flags);
                rendered.truncated = true;
                self.question_end as usize
            };
            out.truncate(cut);
            write_u16(out, 10, 0);
        }
        if let Some(edns) = query.edns {
            push_opt(out, edns.dnssec_ok, self.rcode, ede);
            let arcount = read_u16(out, 10) + 1;
            write_u16(out, 10, arcount);
        }
        rendered
    }
}

/// The TTL offsets stored as two big-endian bytes each.
#[inline]
fn offsets(stored: &[u8]) -> impl Iterator<Item = usize> + '_ {
    stored
        .chunks_exact(2)
        .map(|pair| usize::from(u16::from_be_bytes([pair[0], pair[1]])))
}

#[cfg(test)]
#[path = "entry_tests.rs"]
mod tests;
