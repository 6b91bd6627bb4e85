//! The cache written out and read back: how a process that takes over
//! starts warm (`listen::handover`), so a rollout over many nodes does not
//! send every node's queries to the cluster DNS at once; and, behind a
//! header, the cache file a process started after a crash or a reboot
//! reads (`snapshot_file`, `cache::warm`).
//!
//! A stream of length-prefixed records after a 4-byte magic, ended by a
//! zero length (the stream stays open for the handover's reply), each a
//! little binary struct:
//! the key, then the entry with its age and lifetime (relative times: the
//! reader's clock is not the writer's). Failures are not carried (they say
//! something about the writer's upstreams at that moment); entries past
//! their stale window are not either.
//!
//! A snapshot is input like an upstream answer: whoever holds the handover
//! socket, or later the file, wrote it. So the reader trusts no field it
//! can derive. Of each record it keeps the key, the age and the message;
//! the message is walked as an upstream answer is on the miss path
//! (`response::check_answers` against the key's question, then
//! `response::layout`), its kind must be what its response code says, and
//! the entry is built anew by `Entry::from_response` under the reader's TTL
//! policy for the key's zone: TTL offsets, lifetime and clamped TTLs are
//! re-derived, the writer's are ignored (they stay in the format so that
//! either version reads the other's snapshot). A record that fails is
//! refused and counted, and reading goes on; a broken framing (a length
//! that is not one), too many records or the load's deadline end it.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::entry::Parts;
use super::key::{KeyRef, NameBuf};
use super::{Cache, Entry, Key, Kind, TtlPolicy};
use crate::wire::response::{self, Answers, Case};
use crate::wire::{HEADER_LEN, build, query, rcode, read_u16};

const MAGIC: &[u8; 4] = b"NDC1";
/// The largest record a reader accepts (a DNS message is at most 64 KiB).
const MAX_RECORD: usize = 70_000;
/// The least a cached entry weighs with its key (`Entry::weight` and
/// `Key::weight` of the smallest answer are above it): a snapshot with more
/// records than the cache's capacity over this holds records the cache could
/// not keep anyway.
const MIN_RECORD_WEIGHT: u64 = 128;
/// Records one load reads at most, whatever the capacity: a 1 GiB cache
/// holds about four million usual answers.
pub(crate) const HARD_MAX_RECORDS: usize = 8_000_000;
/// How long a load may take. Measured (docs/decisions.md, 51): 100,000 A
/// answers load in 0.36-0.76 s on a busy 2-core machine, so the default
/// 64 MiB cache (about 270,000 answers) loads well within it; past the
/// deadline the rest is skipped and the process starts with what it has.
pub(crate) const LOAD_TIME: Duration = Duration::from_secs(5);

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

/// What a snapshot is read against: the reader's own settings, never the
/// writer's.
pub struct Rules<'a> {
    /// The TTL policy of the zone a (folded) name belongs to, by longest
    /// suffix; `None` when no zone serves the name.
    pub policy: &'a dyn Fn(&[u8]) -> Option<TtlPolicy>,
    /// An entry older than its lifetime plus this is dropped.
    pub stale_max_age: Duration,
    /// Records read at most (loaded and refused together); see [`max_records`].
    pub max_records: usize,
    /// Past this instant no more is read.
    pub deadline: Instant,
}

/// The bound on records for a cache of `capacity_bytes`: as many as it
/// could hold, at most [`HARD_MAX_RECORDS`].
pub(crate) fn max_records(capacity_bytes: u64) -> usize {
    usize::try_from(capacity_bytes / MIN_RECORD_WEIGHT)
        .unwrap_or(usize::MAX)
        .clamp(1, HARD_MAX_RECORDS)
}

/// Why one record was not loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Its fields do not read (lengths, kind code, bytes left over).
    #[error("malformed record")]
    Malformed,
    /// The key is no question a query would make (a name not folded or
    /// not a name, a type or class nodens does not serve, unknown flags).
    #[error("not a question nodens serves")]
    BadKey,
    /// The message does not answer the key's question.
    #[error("the answer is not to the key's question")]
    QuestionMismatch,
    /// The message does not walk (the checks of an upstream answer).
    #[error("the answer does not walk as an upstream answer must")]
    BadWalk,
    /// The kind given is not what the response code and answers say, or
    /// the response code is one nodens does not cache beyond a failure.
    #[error("the kind does not match the response code")]
    KindMismatch,
    /// No zone serves the name.
    #[error("no zone serves the name")]
    NoZone,
    /// Nothing left to serve: a zero lifetime, or older than its lifetime
    /// and the stale window.
    #[error("expired beyond the stale window")]
    Expired,
}

/// Why reading stopped before the end marker.
#[derive(Debug, thiserror::Error)]
pub enum Cut {
    #[error("not a nodens cache snapshot")]
    NotASnapshot,
    /// The framing is broken: a length no record has.
    #[error("cache snapshot: record too large")]
    RecordTooLarge,
    #[error("cache snapshot: more than {0} records, the rest skipped")]
    TooManyRecords(usize),
    #[error("cache snapshot: load time over, the rest skipped")]
    Deadline,
    /// The stream failed (its own timeout, a reset, an end inside a record).
    #[error(transparent)]
    Read(io::Error),
}

/// A load cut short, with what it loaded before.
#[derive(Debug, thiserror::Error)]
#[error("{cut} ({loaded} records loaded before)")]
pub struct CutShort {
    pub cut: Cut,
    pub loaded: usize,
}

/// What a load did.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Records inserted into the cache.
    pub loaded: usize,
    /// Records read and refused.
    pub refused: usize,
    /// Why the first refused record was.
    pub first_refusal: Option<Refusal>,
    /// Why reading stopped before the end marker, if it did: broken
    /// framing, a read error, too many records, the deadline.
    pub cut: Option<Cut>,
}

impl Loaded {
    /// The count loaded, or why the load was cut short.
    pub fn into_result(self) -> Result<usize, CutShort> {
        match self.cut {
            None => Ok(self.loaded),
            Some(cut) => Err(CutShort {
                cut,
                loaded: self.loaded,
            }),
        }
    }

    fn refuse(&mut self, why: Refusal) {
        self.refused += 1;
        self.first_refusal.get_or_insert(why);
    }
}

/// A record as the stream has it: the parts the reader uses.
struct Record<'a> {
    name: &'a [u8],
    qtype: u16,
    qclass: u16,
    flags: u8,
    kind: Kind,
    rcode: u16,
    age: Duration,
    wire: &'a [u8],
}

/// Reads a record's fields. The writer's TTL offsets, section offsets,
/// lifetime and original TTL are read past, not used: all are derived
/// again from the message.
fn fields(record: &[u8]) -> Option<Record<'_>> {
    let mut f = Fields(record);
    let name_len = f.u8()? as usize;
    let name = f.take(name_len)?;
    let (qtype, qclass, flags) = (f.u16()?, f.u16()?, f.u8()?);
    let kind = match f.u8()? {
        0 => Kind::Success,
        1 => Kind::Denial,
        _ => return None,
    };
    let rcode = f.u16()?;
    let _question_end = f.u16()?;
    let _additional_start = f.u16()?;
    let _original_ttl = f.u32()?;
    let _lifetime = f.u64()?;
    let age = Duration::from_millis(f.u64()?);
    let offsets = f.u16()?;
    f.take(usize::from(offsets) * 2)?;
    let wire_len = f.u32()? as usize;
    let wire = f.take(wire_len)?;
    f.0.is_empty().then_some(Record {
        name,
        qtype,
        qclass,
        flags,
        kind,
        rcode,
        age,
        wire,
    })
}

/// The key, if it is exactly the one a client's query for its question
/// would look up: built as a query, parsed as one, folded.
fn checked_key(r: &Record<'_>) -> Option<Key> {
    let dnssec_ok = r.flags & super::key::FLAG_DO != 0;
    let checking_disabled = r.flags & super::key::FLAG_CD != 0;
    let packet = build::query_for(0, r.name, r.qtype, r.qclass, dnssec_ok, checking_disabled);
    let parsed = query::parse(&packet).ok()?;
    let mut buf: NameBuf = [0; 255];
    let key = KeyRef::from_query(&parsed, &mut buf);
    let same = key.name == r.name
        && key.qtype == r.qtype
        && key.qclass == r.qclass
        && key.flags == r.flags;
    same.then(|| key.to_owned())
}

/// One record checked as an upstream answer to its key's question and
/// built anew under the reader's policy.
fn decode(
    record: &[u8],
    now: Instant,
    added_age: Duration,
    rules: &Rules<'_>,
) -> Result<(Key, Entry), Refusal> {
    let r = fields(record).ok_or(Refusal::Malformed)?;
    let key = checked_key(&r).ok_or(Refusal::BadKey)?;
    let question = key.question();
    // The ID is the writer's: any; QR, opcode, QDCOUNT and the question are
    // checked as for an upstream's answer (the case of the name aside: the
    // stored name is the one echoed over TCP, and a hit writes the client's).
    let id = r.wire.get(..2).map_or(0, |_| read_u16(r.wire, 0));
    match response::check_answers(r.wire, id, &question, Case::Ignore) {
        Ok(Answers::Question) => {}
        Ok(Answers::ErrorWithoutQuestion) | Err(_) => return Err(Refusal::QuestionMismatch),
    }
    let layout = response::layout(r.wire).map_err(|_| Refusal::BadWalk)?;
    if layout.question_end != HEADER_LEN + question.len() {
        return Err(Refusal::QuestionMismatch);
    }
    let kind = match layout.rcode {
        rcode::NOERROR if layout.answer_count > 0 => Kind::Success,
        rcode::NOERROR | rcode::NXDOMAIN => Kind::Denial,
        _ => return Err(Refusal::KindMismatch),
    };
    if kind != r.kind || layout.rcode != r.rcode {
        return Err(Refusal::KindMismatch);
    }
    let policy = (rules.policy)(key.name()).ok_or(Refusal::NoZone)?;
    // Stored as it was `age` ago; an age the clock cannot go back by is
    // past any lifetime.
    let age = r.age.checked_add(added_age).ok_or(Refusal::Expired)?;
    let stored_at = now.checked_sub(age).ok_or(Refusal::Expired)?;
    let entry =
        Entry::from_response(r.wire, &layout, &policy, stored_at).ok_or(Refusal::BadWalk)?;
    if !entry.is_cacheable() || !entry.is_servable_stale(now, rules.stale_max_age) {
        return Err(Refusal::Expired);
    }
    Ok((key, entry))
}

/// A reader that fails once the deadline is past: each read of the
/// underlying stream returns within its own timeout (the handover's step
/// timeout), so a writer that trickles bytes cannot hold a load longer
/// than the deadline and one such timeout.
struct Until<'a, R: ?Sized> {
    inner: &'a mut R,
    deadline: Instant,
    /// Set when a read was refused for the deadline.
    passed: bool,
}

impl<R: Read + ?Sized> Read for Until<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if Instant::now() >= self.deadline {
            self.passed = true;
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.inner.read(buf)
    }
}

impl<R: ?Sized> Until<'_, R> {
    /// Why a read failed with `e`.
    fn cut(&self, e: io::Error) -> Cut {
        if self.passed {
            Cut::Deadline
        } else {
            Cut::Read(e)
        }
    }
}

/// Reads records until the end marker (or the end of `input`), inserting
/// each that passes the checks (see the module's comment). A malformed
/// record is refused and reading goes on; a broken framing, a read error,
/// `rules.max_records` or `rules.deadline` ends the reading, and what was
/// loaded before stays.
pub fn read(
    cache: &Cache,
    now: Instant,
    rules: &Rules<'_>,
    input: &mut (impl Read + ?Sized),
) -> Loaded {
    read_aged(cache, now, Duration::ZERO, rules, input)
}

/// [`read`] of a snapshot written `added_age` before `now` and kept since
/// (a file): every record's age is that much more, so what expired in
/// between is dropped and the TTLs served go on counting down.
pub(crate) fn read_aged(
    cache: &Cache,
    now: Instant,
    added_age: Duration,
    rules: &Rules<'_>,
    input: &mut (impl Read + ?Sized),
) -> Loaded {
    let mut loaded = Loaded::default();
    let mut input = Until {
        inner: input,
        deadline: rules.deadline,
        passed: false,
    };
    let mut magic = [0u8; 4];
    if let Err(e) = input.read_exact(&mut magic) {
        loaded.cut = Some(input.cut(e));
        return loaded;
    }
    if &magic != MAGIC {
        loaded.cut = Some(Cut::NotASnapshot);
        return loaded;
    }
    let mut record = Vec::new();
    loop {
        let mut len = [0u8; 4];
        match input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return loaded,
            Err(e) => {
                loaded.cut = Some(input.cut(e));
                return loaded;
            }
        }
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 {
            return loaded;
        }
        if len > MAX_RECORD {
            loaded.cut = Some(Cut::RecordTooLarge);
            return loaded;
        }
        if loaded.loaded + loaded.refused >= rules.max_records {
            loaded.cut = Some(Cut::TooManyRecords(rules.max_records));
            return loaded;
        }
        record.resize(len, 0);
        if let Err(e) = input.read_exact(&mut record) {
            loaded.cut = Some(input.cut(e));
            return loaded;
        }
        match decode(&record, now, added_age, rules) {
            Ok((key, entry)) => {
                cache.insert(key, Arc::new(entry));
                loaded.loaded += 1;
            }
            Err(why) => loaded.refuse(why),
        }
    }
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

#[cfg(test)]
mod tests {
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
}
