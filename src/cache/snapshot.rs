//! The cache written out and read back: how a process that takes over
//! starts warm (`listen::handover`), so a rollout over many nodes does not
//! send every node's queries to the cluster DNS at once.
//!
//! A stream of length-prefixed records after a 4-byte magic, ended by a
//! zero length (the stream stays open for the handover's reply), each a
//! little binary struct:
//! the key, then the entry with its age and lifetime (relative times: the
//! reader's clock is not the writer's). Failures are not carried (they say
//! something about the writer's upstreams at that moment); entries past
//! their stale window are not either.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::entry::Parts;
use super::{Cache, Entry, Key, Kind};

const MAGIC: &[u8; 4] = b"NDC1";
/// The largest record a reader accepts (a DNS message is at most 64 KiB).
const MAX_RECORD: usize = 70_000;

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
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

/// A cursor over one record; every read is bounds-checked.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

fn decode(record: &[u8], now: Instant) -> Option<(Key, Entry)> {
    let mut f = Fields(record);
    let name_len = f.u8()? as usize;
    let name = f.take(name_len)?;
    let (qtype, qclass, flags) = (f.u16()?, f.u16()?, f.u8()?);
    let kind = match f.u8()? {
        0 => Kind::Success,
        1 => Kind::Denial,
        _ => return None,
    };
    let (rcode, question_end, additional_start) = (f.u16()?, f.u16()?, f.u16()?);
    let original_ttl = f.u32()?;
    let lifetime = Duration::from_millis(f.u64()?);
    let age = Duration::from_millis(f.u64()?);
    let offsets = f.u16()?;
    let offsets = f.take(usize::from(offsets) * 2)?;
    let wire_len = f.u32()? as usize;
    let wire = f.take(wire_len)?;
    if !f.0.is_empty() || name.is_empty() || name.len() > 255 {
        return None;
    }
    let parts = Parts {
        kind,
        rcode,
        wire,
        ttl_offsets: offsets,
        question_end,
        additional_start,
        age,
        lifetime,
        original_ttl,
    };
    let entry = Entry::from_parts(parts, now)?;
    Some((Key::from_parts(name, qtype, qclass, flags), entry))
}

/// Writes every entry of `cache` still servable within `stale_max_age`;
/// returns how many.
pub fn write(
    cache: &Cache,
    now: Instant,
    stale_max_age: Duration,
    out: &mut (impl Write + ?Sized),
) -> io::Result<usize> {
    out.write_all(MAGIC)?;
    let mut record = Vec::new();
    let mut count = 0;
    for (key, entry) in cache.success.iter().chain(cache.denial.iter()) {
        if entry.kind == Kind::Failure || !entry.is_servable_stale(now, stale_max_age) {
            continue;
        }
        encode(&key, &entry.parts(now), &mut record);
        out.write_all(&(record.len() as u32).to_be_bytes())?;
        out.write_all(&record)?;
        count += 1;
    }
    out.write_all(&0u32.to_be_bytes())?;
    out.flush()?;
    Ok(count)
}

/// Reads records until the end marker (or the end of `input`), inserting
/// each; returns how many. A malformed record ends the reading with an error (what was read
/// before it stays).
pub fn read(cache: &Cache, now: Instant, input: &mut (impl Read + ?Sized)) -> io::Result<usize> {
    let mut magic = [0u8; 4];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(io::Error::other("not a nodens cache snapshot"));
    }
    let mut count = 0;
    let mut record = Vec::new();
    loop {
        let mut len = [0u8; 4];
        match input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(count),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 {
            return Ok(count);
        }
        if len > MAX_RECORD {
            return Err(io::Error::other("cache snapshot: record too large"));
        }
        record.resize(len, 0);
        input.read_exact(&mut record)?;
        let (key, entry) = decode(&record, now)
            .ok_or_else(|| io::Error::other("cache snapshot: malformed record"))?;
        cache.insert(key, Arc::new(entry));
        count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::TtlPolicy;
    use crate::cache::key::NameBuf;
    use crate::cache::{KeyRef, Lookup};
    use crate::wire::{query, response};

    fn answer(name: &[u8]) -> Vec<u8> {
        let mut m = vec![0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
        m.extend(name);
        m.extend([
            0, 1, 0, 1, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, 1,
        ]);
        m
    }

    #[test]
    fn entries_survive_a_round_trip_and_bad_input_is_refused() {
        let name = b"\x04host\x07example\x00";
        let msg = answer(name);
        let layout = response::layout(&msg).unwrap();
        let policy = TtlPolicy {
            min_ttl: 0,
            max_ttl: 3600,
            negative_max_ttl: 1800,
            failure_ttl: 5,
        };
        let now = Instant::now();
        let mut q = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        q.extend(name);
        q.extend([0, 1, 0, 1]);
        let parsed = query::parse(&q).unwrap();
        let mut buf: NameBuf = [0; 255];
        let key = KeyRef::from_query(&parsed, &mut buf);
        let from = Cache::new(1 << 20);
        from.insert(
            key.to_owned(),
            Arc::new(Entry::from_response(&msg, &layout, &policy, now)),
        );

        let mut bytes = Vec::new();
        assert_eq!(write(&from, now, Duration::ZERO, &mut bytes).unwrap(), 1);
        let to = Cache::new(1 << 20);
        assert_eq!(read(&to, now, &mut bytes.as_slice()).unwrap(), 1);
        let Lookup::Fresh(entry) = to.lookup(&key, now, Duration::ZERO) else {
            panic!("not fresh after the round trip");
        };
        let mut out = Vec::new();
        entry.render(
            &parsed,
            now,
            crate::cache::Freshness::Fresh,
            None,
            512,
            &mut out,
        );
        assert_eq!(&out[out.len() - 4..], &[192, 0, 2, 1]);

        // Every truncation and every flipped length is refused, not panicked on.
        for cut in 4..bytes.len() {
            let _ = read(&Cache::new(1 << 20), now, &mut &bytes[..cut]);
        }
        for at in 4..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0xff;
            let _ = read(&Cache::new(1 << 20), now, &mut bad.as_slice());
        }
        assert!(read(&to, now, &mut &b"XXXX"[..]).is_err());
    }
}
