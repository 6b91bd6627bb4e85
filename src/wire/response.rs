//! Reading an upstream response once, on the miss path: does it answer our
//! question, where are its sections and TTL fields, what does its SOA say
//! about negative caching, and where is its OPT record.

use std::ops::Range;

use smallvec::SmallVec;
use thiserror::Error;

use super::{HEADER_LEN, MAX_MESSAGE, flag, name, rdata, read_u16, read_u32, rtype};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ResponseError {
    #[error("shorter than a header")]
    Short,
    #[error("not a response")]
    NotResponse,
    #[error("ID does not match")]
    IdMismatch,
    #[error("question does not match")]
    QuestionMismatch,
    #[error("question matches but for its letter case")]
    CaseMismatch,
    #[error("malformed record")]
    Malformed,
    #[error("longer than 65,535 bytes")]
    TooLong,
}

/// Where things are in a response; offsets into the message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    pub flags: u16,
    /// The full response code, extended bits from OPT included.
    pub rcode: u16,
    pub question_end: usize,
    pub answer_count: u16,
    /// Offset where the additional section starts (end of authority).
    pub additional_start: usize,
    /// Offsets of the TTL fields of every record but OPT, with the section
    /// each is in.
    pub ttls: Vec<(usize, Section)>,
    /// The negative-caching TTL from an SOA in the authority section
    /// (RFC 2308 section 5: the smaller of the SOA's TTL and its MINIMUM).
    pub soa_negative_ttl: Option<u32>,
    /// Where the first SOA record of the authority section starts.
    pub authority_soa: Option<usize>,
    /// The bytes of the OPT record, if present.
    pub opt: Option<Range<usize>>,
    /// Total length of the records; bytes after this are ignored.
    pub end: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Answer,
    Authority,
    Additional,
}

/// How a response that [`check_answers`] accepted answers the question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// It repeats the question.
    Question,
    /// An error code with no question section: some servers answer so
    /// when they refuse a question they cannot parse or serve (NSD, for
    /// class 0, NONE or ANY). The caller supplies the question.
    ErrorWithoutQuestion,
}

/// Whether the question's letter case must come back as sent: yes when
/// the query went out with randomised case (0x20, the spoofing defence),
/// no over TCP and for upstreams that do not preserve case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Exact,
    Ignore,
}

/// Checks that `msg` answers the question `question` (wire bytes of name,
/// type, class) with ID `id`. With [`Case::Exact`], a response whose
/// question differs from ours only in letter case is a
/// [`ResponseError::CaseMismatch`]: not ours, or from a server that does
/// not preserve case.
pub fn check_answers(
    msg: &[u8],
    id: u16,
    question: &[u8],
    case: Case,
) -> Result<Answers, ResponseError> {
    if msg.len() < HEADER_LEN {
        return Err(ResponseError::Short);
    }
    let flags = read_u16(msg, 2);
    // A response with another opcode answers no query of ours (and its
    // opcode would reach the client in the cached flags).
    if flags & flag::QR == 0 || flags & flag::OPCODE_MASK != 0 {
        return Err(ResponseError::NotResponse);
    }
    if read_u16(msg, 0) != id {
        return Err(ResponseError::IdMismatch);
    }
    match read_u16(msg, 4) {
        1 => {}
        0 if flags & flag::RCODE_MASK != 0 => return Ok(Answers::ErrorWithoutQuestion),
        _ => return Err(ResponseError::QuestionMismatch),
    }
    let theirs = msg
        .get(HEADER_LEN..HEADER_LEN + question.len())
        .ok_or(ResponseError::QuestionMismatch)?;
    // The name without regard to case; type and class are numbers, not
    // letters (type 0x0041 is not type 0x0061).
    let name_len = question.len().saturating_sub(4);
    let (their_name, their_type_class) = theirs.split_at(name_len);
    let (our_name, our_type_class) = question.split_at(name_len);
    if their_type_class != our_type_class || !their_name.eq_ignore_ascii_case(our_name) {
        return Err(ResponseError::QuestionMismatch);
    }
    if case == Case::Exact && their_name != our_name {
        return Err(ResponseError::CaseMismatch);
    }
    Ok(Answers::Question)
}

/// A response with `question` and the response code of `msg`, a reply
/// that [`check_answers`] found to be [`Answers::ErrorWithoutQuestion`]:
/// from here on it is handled like any error answer.
pub fn with_question(msg: &[u8], question: &[u8]) -> Vec<u8> {
    let mut full = Vec::with_capacity(HEADER_LEN + question.len());
    full.extend_from_slice(&msg[..4]);
    full.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    full.extend_from_slice(question);
    full
}

/// After a 0x20 exchange: wherever a record's owner name spells the
/// randomised question `sent` (a wire name) out in full, as the whole name
/// or as its tail (`_udp.<question>`), it is rewritten to `asked`, the
/// spelling the cache stores. Servers that write owner names literally
/// instead of pointing at the question (CoreDNS's `kubernetes` and `whoami`
/// plugins do) would otherwise hand the random case on to every client.
/// Names reached through pointers need nothing: the question they read is
/// already restored. `msg`'s question is `asked` already (the caller wrote
/// it back), so its end is known without a walk. Stops quietly at anything
/// malformed ([`layout`] judges the message later).
pub fn restore_owner_case(msg: &mut [u8], sent: &[u8], asked: &[u8]) {
    debug_assert_eq!(sent.len(), asked.len());
    let Some(&first_label) = sent.first() else {
        return;
    };
    let records: usize = [6, 8, 10]
        .iter()
        .map(|&at| read_u16(msg, at) as usize)
        .sum();
    let mut at = HEADER_LEN + asked.len() + 4;
    for _ in 0..records {
        // The owner's literal labels, up to a pointer or the root: where
        // the owner ends, the record's type follows.
        let mut label = at;
        let name_end = loop {
            let Some(&len) = msg.get(label) else {
                return;
            };
            if len == first_label && msg.get(label..label + sent.len()) == Some(sent) {
                msg[label..label + asked.len()].copy_from_slice(asked);
                // `sent` ends in the root label: so does the owner.
                break label + sent.len();
            }
            match len {
                0 => break label + 1,
                pointer if pointer & 0xc0 == 0xc0 => break label + 2,
                literal if literal & 0xc0 == 0 => label += 1 + usize::from(literal),
                _ => return,
            }
        };
        if name_end + 10 > msg.len() {
            return;
        }
        at = name_end + 10 + read_u16(msg, name_end + 8) as usize;
    }
}

/// Walks every record of a response that [`check_answers`] accepted.
pub fn layout(msg: &[u8]) -> Result<Layout, ResponseError> {
    // Every offset of a layout fits the two bytes a cache entry keeps it
    // in: a longer message is no message (only one built here could be).
    if msg.len() > MAX_MESSAGE {
        return Err(ResponseError::TooLong);
    }
    let question_end =
        name::parse_uncompressed(msg, HEADER_LEN).map_err(|_| ResponseError::Malformed)? + 4;
    if question_end > msg.len() {
        return Err(ResponseError::Malformed);
    }
    let flags = read_u16(msg, 2);
    let counts = [
        (read_u16(msg, 6), Section::Answer),
        (read_u16(msg, 8), Section::Authority),
        (read_u16(msg, 10), Section::Additional),
    ];
    // Every record takes 11 bytes at least: room for all at once, not
    // grown record by record, and no more than the message can hold.
    let records: usize = counts.iter().map(|&(n, _)| usize::from(n)).sum();
    let mut out = Layout {
        flags,
        rcode: flags & flag::RCODE_MASK,
        question_end,
        answer_count: counts[0].0,
        ttls: Vec::with_capacity(records.min((msg.len() - question_end) / 11)),
        ..Layout::default()
    };
    let mut at = question_end;
    // Labels reached through compression pointers: they must not lie in a
    // TTL field, or rewriting the TTL would rewrite the name. On the stack
    // for an answer of a usual size.
    let mut jumped_labels: SmallVec<[(usize, usize); 16]> = SmallVec::new();
    // Pointers point back: a label that ends within the question (the
    // usual target) lies before every TTL field.
    let mut visit = |label: usize, len: usize| {
        if label + len > question_end {
            jumped_labels.push((label, len));
        }
    };
    for (count, section) in counts {
        if section == Section::Additional {
            out.additional_start = at;
        }
        for _ in 0..count {
            let start = at;
            at = name::skip_visiting(msg, at, &mut visit).map_err(|_| ResponseError::Malformed)?;
            if at + 10 > msg.len() {
                return Err(ResponseError::Malformed);
            }
            let rrtype = read_u16(msg, at);
            let ttl_at = at + 4;
            let rdlen = read_u16(msg, at + 8) as usize;
            let rdata = at + 10;
            at = rdata + rdlen;
            if at > msg.len() {
                return Err(ResponseError::Malformed);
            }
            if rrtype == rtype::OPT {
                if section != Section::Additional || out.opt.is_some() {
                    return Err(ResponseError::Malformed);
                }
                out.rcode |= ((read_u32(msg, ttl_at) >> 24) as u16) << 4;
                out.opt = Some(start..at);
                continue;
            }
            out.ttls.push((ttl_at, section));
            // Names inside RDATA (CNAME, NS, SOA, MX, SRV...) may point too.
            let names_end = check_rdata_names(msg, rrtype, rdata, at, &mut visit)?;
            if rrtype == rtype::SOA {
                // Two names, then five 32-bit fields, MINIMUM the last:
                // exactly, or MINIMUM would be read from inside a name.
                if names_end + 20 != at {
                    return Err(ResponseError::Malformed);
                }
            }
            if rrtype == rtype::SOA && section == Section::Authority {
                out.authority_soa.get_or_insert(start);
                let minimum = read_u32(msg, at - 4);
                let negative = sane_ttl(read_u32(msg, ttl_at)).min(sane_ttl(minimum));
                out.soa_negative_ttl =
                    Some(out.soa_negative_ttl.map_or(negative, |t| t.min(negative)));
            }
        }
    }
    let overlaps_ttl = |&(label, len): &(usize, usize)| {
        out.ttls
            .iter()
            .any(|&(ttl, _)| label < ttl + 4 && ttl < label + len)
    };
    if jumped_labels.iter().any(overlaps_ttl) {
        return Err(ResponseError::Malformed);
    }
    out.end = at;
    Ok(out)
}

/// Walks the names in RDATA of the types whose names may be compressed
/// ([`rdata::names`]), recording labels reached through pointers. Returns
/// where the names end. A name that does not read is a malformed record,
/// whatever the type: copied as it is, its pointer would point at other
/// bytes in the reply (the header is the client's).
fn check_rdata_names(
    msg: &[u8],
    rrtype: u16,
    rdata: usize,
    end: usize,
    jumped: &mut impl FnMut(usize, usize),
) -> Result<usize, ResponseError> {
    let Some((prefix, names)) = rdata::names(rrtype) else {
        return Ok(rdata);
    };
    let mut at = rdata + prefix;
    for _ in 0..names {
        at = name::skip_visiting(msg, at, &mut *jumped).map_err(|_| ResponseError::Malformed)?;
        if at > end {
            return Err(ResponseError::Malformed);
        }
    }
    Ok(at)
}

/// RFC 2181 section 8: a TTL with the top bit set is treated as zero.
#[inline]
pub fn sane_ttl(ttl: u32) -> u32 {
    if ttl > i32::MAX as u32 { 0 } else { ttl }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// www.t. A 1.2.3.4 (TTL 300), authority SOA (TTL 60, MINIMUM 30), OPT.
    fn sample() -> Vec<u8> {
        let mut m = vec![0xab, 0xcd, 0x81, 0x80, 0, 1, 0, 1, 0, 1, 0, 1];
        m.extend(b"\x03www\x01t\x00\x00\x01\x00\x01");
        m.extend(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\x01\x02\x03\x04");
        m.extend(b"\xc0\x10\x00\x06\x00\x01\x00\x00\x00\x3c\x00\x18");
        m.extend(b"\xc0\x10\xc0\x10");
        m.extend([0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 30]);
        m.extend([0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        m
    }

    #[test]
    fn restores_literal_owner_names_to_the_asked_case() {
        let sent = b"\x03wWw\x01T\x00";
        let asked = b"\x03www\x01t\x00";
        let mut m = vec![0xab, 0xcd, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0];
        m.extend(b"\x03www\x01t\x00\x00\x01\x00\x01");
        // An owner written in full in the sent spelling, one with a label
        // in front of it, one other name.
        m[7] = 3;
        m.extend(sent);
        m.extend(b"\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\x01\x02\x03\x04");
        m.extend(b"\x03wWx\x01T\x00");
        m.extend(b"\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\x01\x02\x03\x05");
        m.extend(b"\x04_udp");
        m.extend(sent);
        m.extend(b"\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\x01\x02\x03\x06");
        let before = m.clone();
        restore_owner_case(&mut m, sent, asked);
        assert_eq!(&m[23..30], asked, "owner in the sent spelling restored");
        assert_eq!(m[44..51], before[44..51], "another name left alone");
        assert_eq!(&m[70..77], asked, "the tail of a longer owner restored");
        assert_eq!(&m[65..70], b"\x04_udp");
        assert!(layout(&m).is_ok());
        // Truncated input: no panic, nothing beyond the break touched.
        let mut cut = before[..30].to_vec();
        restore_owner_case(&mut cut, sent, asked);
    }

    #[test]
    fn walks_sections() {
        let m = sample();
        let www = b"\x03www\x01t\x00\x00\x01\x00\x01";
        let upper = b"\x03WWW\x01t\x00\x00\x01\x00\x01";
        assert_eq!(
            check_answers(&m, 0xabcd, upper, Case::Ignore),
            Ok(Answers::Question)
        );
        assert_eq!(
            check_answers(&m, 0xabcd, www, Case::Exact),
            Ok(Answers::Question)
        );
        assert_eq!(
            check_answers(&m, 0xabcd, upper, Case::Exact),
            Err(ResponseError::CaseMismatch)
        );
        assert_eq!(
            check_answers(&m, 1, www, Case::Ignore),
            Err(ResponseError::IdMismatch)
        );
        assert_eq!(
            check_answers(
                &m,
                0xabcd,
                b"\x03www\x01t\x00\x00\x1c\x00\x01",
                Case::Ignore
            ),
            Err(ResponseError::QuestionMismatch)
        );
        let l = layout(&m).unwrap();
        assert_eq!(l.rcode, 0);
        assert_eq!(l.answer_count, 1);
        assert_eq!(l.ttls.len(), 2);
        assert_eq!(read_u32(&m, l.ttls[0].0), 300);
        assert_eq!(l.soa_negative_ttl, Some(30));
        assert_eq!(l.opt, Some(m.len() - 11..m.len()));
        assert_eq!(l.end, m.len());
    }

    #[test]
    fn error_without_question_is_accepted_and_completed() {
        let refused = [0xab, 0xcd, 0x80, 0x05, 0, 0, 0, 0, 0, 0, 0, 0];
        let question = b"\x01a\x00\x00\x01\x00\x00";
        assert_eq!(
            check_answers(&refused, 0xabcd, question, Case::Exact),
            Ok(Answers::ErrorWithoutQuestion)
        );
        assert_eq!(
            check_answers(&refused, 0xabce, question, Case::Exact),
            Err(ResponseError::IdMismatch)
        );
        let mut noerror = refused;
        noerror[3] = 0x00;
        assert_eq!(
            check_answers(&noerror, 0xabcd, question, Case::Exact),
            Err(ResponseError::QuestionMismatch),
            "a NOERROR without a question answers nothing"
        );
        let full = with_question(&refused, question);
        let l = layout(&full).unwrap();
        assert_eq!(l.rcode, 5);
        assert_eq!(l.question_end, full.len());
    }

    /// Inputs the fuzzer found (fuzz/reproducers/response_walk), without
    /// the target's 8 bytes of parameters.
    #[test]
    fn fuzz_findings_are_rejected() {
        // A response for type 0x0041 (HTTPS) does not answer type 0x0061.
        let https = b"\xab\xcd\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x07\x65\x78\x61\x6d\x70\x6c\x65\x03\x63\x6f\x6d\x00\x00\x41\x00\x01\xc0\x0c\x00\x41\x00\x01\x00\x00\x01\x2c\x00\x03\x00\x01\x00";
        let q = &https[12..29];
        assert_eq!(
            check_answers(https, 0xabcd, q, Case::Ignore),
            Ok(Answers::Question)
        );
        let mut type_0x61 = q.to_vec();
        type_0x61[14] = 0x61;
        assert_eq!(
            check_answers(https, 0xabcd, &type_0x61, Case::Ignore),
            Err(ResponseError::QuestionMismatch)
        );
        // Opcode 2 (STATUS) in a response: not an answer to a query.
        let status = b"\xab\xcd\x91\x80\x00\x01\x00\x01\x00\x00\x00\x00\x07\x65\x78\x61\x6d\x70\x6c\x65\x03\x63\x6f\x6d\x00\x00\x01\x00\x01\xc0\x0c\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\x01\x02\x03\x04";
        assert_eq!(
            check_answers(status, 0xabcd, &status[12..29], Case::Ignore),
            Err(ResponseError::NotResponse)
        );
        // An SOA whose names leave no room for its five numbers: MINIMUM
        // would have been read from inside the second name.
        let soa = b"\xab\xcd\x81\x83\x00\x01\x00\x00\x00\x01\x00\x00\x04\x6e\x6f\x70\x65\x07\x65\x78\x61\x6d\x70\x6c\x65\x00\x00\x01\x00\x01\xc0\x11\x00\x06\x00\x01\x00\x00\x0e\x10\x00\x18\x03\x6e\x73\x31\x07\x65\x78\x61\x6d\x70\x6c\x65\x00\x01\x68\x07\x65\x78\x61\x6d\x70\x6c\x65\x00";
        assert_eq!(layout(soa), Err(ResponseError::Malformed));
        // A name whose pointer leads to a pointer stored in a TTL field:
        // rewriting the TTL would rewrite the name.
        let chain = b"\xab\xcd\x81\x80\x00\x01\x00\x02\x00\x00\x00\x00\x07\x65\x78\x61\x6d\x70\x6c\x65\x03\x63\x6f\x6d\x00\x00\x01\x00\x01\xc0\x0c\x00\x01\x00\x01\x00\x00\xc0\x0c\x00\x04\x01\x02\x03\x04\xc0\x25\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\x05\x06\x07\x08";
        assert_eq!(layout(chain), Err(ResponseError::Malformed));
    }

    #[test]
    fn names_in_the_rdata_of_every_compressible_type_are_read() {
        // example.com MX, answered by an AFSDB record (preference 10) whose
        // name `mail` continues at offset 0, the header: copied as it is,
        // it would spell another name once the client's ID is there.
        let mut m = b"\xab\xcd\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00".to_vec();
        m.extend(b"\x07example\x03com\x00\x00\x0f\x00\x01");
        m.extend(b"\xc0\x0c\x00\x12\x00\x01\x00\x00\x01\x2c\x00\x09");
        m.extend(b"\x00\x0a\x04mail\xc0\x00");
        assert_eq!(layout(&m), Err(ResponseError::Malformed));
        // The same record pointing at the question's `com` is read.
        let len = m.len();
        m[len - 1] = 20;
        assert!(layout(&m).is_ok());
    }

    #[test]
    fn pointer_into_a_ttl_field_is_malformed() {
        let mut m = sample();
        // The SOA's owner name (offset 39) points at the answer's TTL
        // (offset 29), whose first byte 00 spells a valid root name.
        assert_eq!(&m[39..41], b"\xc0\x10");
        m[40] = 29;
        assert_eq!(layout(&m), Err(ResponseError::Malformed));
    }

    #[test]
    fn truncated_record_is_malformed() {
        let m = sample();
        assert_eq!(layout(&m[..m.len() - 3]), Err(ResponseError::Malformed));
    }

    #[test]
    fn extended_rcode_from_opt() {
        let mut m = sample();
        let n = m.len();
        m[n - 6] = 1; // extended rcode high bits = 1 -> 16 | low
        assert_eq!(layout(&m).unwrap().rcode, 16);
    }
}
