//! The writer's side of a snapshot: every servable entry, encoded as the
//! reader (`snapshot.rs`) expects, within a bound on bytes for the file.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use super::MAGIC;
use crate::cache::entry::Parts;
use crate::cache::{Cache, Key, Kind};

pub(super) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(super) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn kind_code(kind: Kind) -> u8 {
    match kind {
        Kind::Success => 0,
        Kind::Denial => 1,
        Kind::Failure => 2,
    }
}

fn encode(key: &Key, p: &Parts<'_>, out: &mut Vec<u8>) {
    out.clear();
    out.push(key.name().len() as u8);
    out.extend_from_slice(key.name());
    put_u16(out, key.qtype());
    put_u16(out, key.qclass());
    out.push(key.flags());
    out.push(kind_code(p.kind));
    put_u16(out, p.rcode);
    put_u16(out, p.question_end);
    put_u16(out, p.additional_start);
    put_u32(out, p.original_ttl);
    put_u64(out, p.lifetime.as_millis() as u64);
    put_u64(out, p.age.as_millis() as u64);
    // The offsets as the entry stores them: big-endian u16 each.
    put_u16(out, (p.ttl_offsets.len() / 2) as u16);
    out.extend_from_slice(p.ttl_offsets);
    put_u32(out, p.wire.len() as u32);
    out.extend_from_slice(p.wire);
}

/// Writes every entry of `cache` still servable within `stale_max_age`;
/// returns how many.
pub fn write(
    cache: &Cache,
    now: Instant,
    stale_max_age: Duration,
    out: &mut (impl Write + ?Sized),
) -> io::Result<usize> {
    write_bounded(cache, now, stale_max_age, u64::MAX, out).map(|w| w.records)
}

/// What a bounded write wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) records: usize,
    /// Bytes of the stream, magic and end marker included.
    pub(crate) bytes: u64,
    /// Entries left out because the next would have passed the bound.
    pub(crate) cut: bool,
}

/// [`write`] in at most `max_bytes` (at least the magic and the end
/// marker): the entries that fit, in the cache's order, and a well-formed
/// end. For a file on the node's disk, whose size and write time must not
/// grow with whatever the cache holds.
pub(crate) fn write_bounded(
    cache: &Cache,
    now: Instant,
    stale_max_age: Duration,
    max_bytes: u64,
    out: &mut (impl Write + ?Sized),
) -> io::Result<Written> {
    out.write_all(MAGIC)?;
    let mut record = Vec::new();
    let mut count = 0;
    // The magic and the end marker.
    let mut bytes = 8u64;
    for (key, entry) in cache.success.iter().chain(cache.denial.iter()) {
        // An answer of a view (`[[zone]] listen`) is not carried: the
        // reader's views may be other ones, and a view's answer must not
        // reach another's clients.
        if entry.kind == Kind::Failure
            || !entry.is_servable_stale(now, stale_max_age)
            || key.view() != 0
        {
            continue;
        }
        encode(&key, &entry.parts(now), &mut record);
        let framed = 4 + record.len() as u64;
        if bytes.saturating_add(framed) > max_bytes {
            out.write_all(&0u32.to_be_bytes())?;
            out.flush()?;
            return Ok(Written {
                records: count,
                bytes,
                cut: true,
            });
        }
        out.write_all(&(record.len() as u32).to_be_bytes())?;
        out.write_all(&record)?;
        bytes += framed;
        count += 1;
    }
    out.write_all(&0u32.to_be_bytes())?;
    out.flush()?;
    Ok(Written {
        records: count,
        bytes,
        cut: false,
    })
}
