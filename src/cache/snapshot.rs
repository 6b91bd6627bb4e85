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

use std::io::{self, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::key::{KeyRef, NameBuf};
use super::{Cache, Entry, Key, Kind, TtlPolicy};
use crate::wire::response::{self, Answers, Case};
use crate::wire::{HEADER_LEN, build, query, rcode, read_u16};

mod write;

pub use write::write;
pub(crate) use write::{Written, write_bounded};
#[cfg(test)]
use write::{put_u16, put_u32, put_u64};

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

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
