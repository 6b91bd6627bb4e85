//! The reply autopath gives (CoreDNS's autopath format): the client's
//! question, answered by `<question> CNAME <target>` followed by the
//! target's own reply. glibc, musl and Go follow it like any CNAME chain.
//!
//! The target's reply is copied record by record with every name written
//! out uncompressed: its compression pointers point at offsets that move
//! once the question is another name and a record is put in front. Names
//! inside RDATA are decompressed for the types RFC 3597 section 4 allows
//! to be compressed; any other RDATA is copied as it is (no conforming
//! server compresses it).

use thiserror::Error;

use super::build::push_opt;
use super::name::{self, NameError};
use super::query::Query;
use super::rdata;
use super::{HEADER_LEN, class, flag, read_u16, read_u32, rtype, write_u16};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ChainError {
    #[error("target reply is malformed: {0}")]
    Name(#[from] NameError),
    #[error("target reply is malformed")]
    Malformed,
    #[error("the reply would be longer than 65,535 bytes")]
    TooLong,
}

/// Writes into `out` the reply to `query` whose answer is
/// `<query's name> CNAME <target's question name>` followed by every
/// record of `target`, a reply without OPT record, with the target's
/// response code. Cut to `limit` bytes as a cached reply would be (the
/// additional section first, else TC), an OPT record added if the client
/// sent one. Returns the response code.
pub fn cname_reply(
    query: &Query<'_>,
    target: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<u16, ChainError> {
    if target.len() < HEADER_LEN || read_u16(target, 4) != 1 {
        return Err(ChainError::Malformed);
    }
    let mut target_name = Vec::with_capacity(64);
    let question_end = name::read_into(target, HEADER_LEN, &mut target_name)? + 4;
    if question_end > target.len() {
        return Err(ChainError::Malformed);
    }
    let counts = [6, 8, 10].map(|at| read_u16(target, at));

    // The records first, to know the CNAME's TTL: the answer's smallest,
    // or the negative TTL of a NODATA reply's SOA.
    let mut records = Vec::with_capacity(target.len() * 2);
    let mut at = question_end;
    let mut additional_at = 0;
    let (mut answer_ttl, mut soa_ttl) = (None::<u32>, None::<u32>);
    for (section, &count) in counts.iter().enumerate() {
        if section == 2 {
            additional_at = records.len();
        }
        for _ in 0..count {
            let (ttl, rrtype, end) = copy_record(target, at, &mut records)?;
            match section {
                0 => answer_ttl = Some(answer_ttl.map_or(ttl, |t| t.min(ttl))),
                1 if rrtype == rtype::SOA => soa_ttl = soa_ttl.or(Some(ttl)),
                _ => {}
            }
            at = end;
        }
    }
    let cname_ttl = answer_ttl.or(soa_ttl).unwrap_or(0);

    out.clear();
    let flags = read_u16(target, 2) & !(flag::AA | flag::TC | flag::AD);
    out.extend(query.id.to_be_bytes());
    out.extend(flags.to_be_bytes());
    out.extend(1u16.to_be_bytes());
    out.extend(
        counts[0]
            .checked_add(1)
            .ok_or(ChainError::TooLong)?
            .to_be_bytes(),
    );
    out.extend(counts[1].to_be_bytes());
    out.extend(counts[2].to_be_bytes());
    out.extend_from_slice(query.question());
    let question_len = out.len();
    // The owner is the question's name: a pointer to it.
    out.extend([0xc0, HEADER_LEN as u8]);
    out.extend(rtype::CNAME.to_be_bytes());
    out.extend(class::IN.to_be_bytes());
    out.extend(cname_ttl.to_be_bytes());
    out.extend((target_name.len() as u16).to_be_bytes());
    out.extend_from_slice(&target_name);
    let records_at = out.len();
    out.extend_from_slice(&records);
    // Names written out whole make a reply longer than its target: one
    // that would not be a DNS message is an error, not a wrapped length.
    if out.len() > super::MAX_MESSAGE {
        out.clear();
        return Err(ChainError::TooLong);
    }

    let opt_len = if query.edns.is_some() { 11 } else { 0 };
    if out.len() + opt_len > limit {
        // RFC 2181 9: leaving out additional data needs no TC bit.
        if records_at + additional_at + opt_len <= limit {
            out.truncate(records_at + additional_at);
        } else {
            out.truncate(question_len);
            write_u16(out, 6, 0);
            write_u16(out, 8, 0);
            write_u16(out, 2, flags | flag::TC);
        }
        write_u16(out, 10, 0);
    }
    let code = flags & flag::RCODE_MASK;
    if let Some(edns) = query.edns {
        push_opt(out, edns.dnssec_ok, code, None);
        let arcount = read_u16(out, 10) + 1;
        write_u16(out, 10, arcount);
    }
    Ok(code)
}

/// Copies the record at `at` of `msg` into `out` with its names
/// uncompressed; returns its TTL, type and where the next record starts.
fn copy_record(msg: &[u8], at: usize, out: &mut Vec<u8>) -> Result<(u32, u16, usize), ChainError> {
    let fixed = name::read_into(msg, at, out)?;
    let rdata_at = fixed + 10;
    if rdata_at > msg.len() {
        return Err(ChainError::Malformed);
    }
    let rrtype = read_u16(msg, fixed);
    let ttl = read_u32(msg, fixed + 4);
    let rdata_end = rdata_at + usize::from(read_u16(msg, fixed + 8));
    if rdata_end > msg.len() {
        return Err(ChainError::Malformed);
    }
    out.extend_from_slice(&msg[fixed..fixed + 8]);
    let length_at = out.len();
    out.extend([0, 0]);
    match rdata::names(rrtype) {
        Some((prefix, names)) => {
            let mut from = rdata_at + prefix;
            if from > rdata_end {
                return Err(ChainError::Malformed);
            }
            out.extend_from_slice(&msg[rdata_at..from]);
            for _ in 0..names {
                from = name::read_into(msg, from, out)?;
            }
            if from > rdata_end {
                return Err(ChainError::Malformed);
            }
            out.extend_from_slice(&msg[from..rdata_end]);
        }
        None => out.extend_from_slice(&msg[rdata_at..rdata_end]),
    }
    let rdlength = out.len() - length_at - 2;
    let rdlength = u16::try_from(rdlength).map_err(|_| ChainError::Malformed)?;
    write_u16(out, length_at, rdlength);
    Ok((ttl, rrtype, rdata_end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::query;

    /// A client's query for `Api.Example.Com.team-a.svc.cluster.local A`.
    fn client_query(edns: bool) -> Vec<u8> {
        let mut p = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)];
        p.extend(
            b"\x03Api\x07Example\x03Com\x06team-a\x03svc\x07cluster\x05local\x00\x00\x01\x00\x01",
        );
        if edns {
            p.extend([0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
        }
        p
    }

    /// The target's reply: `api.example.com. CNAME cdn.example.net.` (the
    /// target compressed against the owner... of another name) and an A
    /// record for `cdn.example.net.` whose owner points into the CNAME's RDATA.
    fn target_reply() -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0];
        m.extend(b"\x03api\x07example\x03com\x00\x00\x01\x00\x01");
        // CNAME at 33: owner -> 12, RDATA `cdn.example.net.` at 45.
        m.extend(b"\xc0\x0c\x00\x05\x00\x01\x00\x00\x00\x3c\x00\x11");
        m.extend(b"\x03cdn\x07example\x03net\x00");
        // A: owner -> 45 (`cdn.example.net.`), TTL 30.
        m.extend(b"\xc0\x2d\x00\x01\x00\x01\x00\x00\x00\x1e\x00\x04\xc0\x00\x02\x0a");
        m
    }

    #[test]
    fn the_chain_reads_as_one_answer() {
        let packet = client_query(true);
        let q = query::parse(&packet).unwrap();
        let mut out = Vec::new();
        let code = cname_reply(&q, &target_reply(), 1232, &mut out).unwrap();
        assert_eq!(code, 0);
        let msg = hickory_proto::op::Message::from_vec(&out).unwrap();
        assert_eq!(msg.metadata.id, 0x1234);
        assert_eq!(
            msg.queries[0].name().to_ascii(),
            "Api.Example.Com.team-a.svc.cluster.local."
        );
        let answers: Vec<String> = msg
            .answers
            .iter()
            .map(|r| format!("{} {} {} {}", r.name, r.ttl, r.record_type(), r.data))
            .collect();
        assert_eq!(
            answers,
            [
                "Api.Example.Com.team-a.svc.cluster.local. 30 CNAME api.example.com.",
                "api.example.com. 60 CNAME cdn.example.net.",
                "cdn.example.net. 30 A 192.0.2.10",
            ]
        );
        assert!(msg.edns.is_some(), "OPT for an EDNS client");
    }

    #[test]
    fn too_long_for_the_client_is_truncated() {
        let packet = client_query(false);
        let q = query::parse(&packet).unwrap();
        let mut out = Vec::new();
        cname_reply(&q, &target_reply(), 60, &mut out).unwrap();
        assert_eq!(read_u16(&out, 2) & flag::TC, flag::TC);
        assert_eq!(out.len(), HEADER_LEN + q.question().len());
        assert_eq!([6, 8, 10].map(|at| read_u16(&out, at)), [0, 0, 0]);
    }

    #[test]
    fn a_broken_target_is_an_error_not_a_panic() {
        let packet = client_query(false);
        let q = query::parse(&packet).unwrap();
        let full = target_reply();
        for cut in 0..full.len() {
            let _ = cname_reply(&q, &full[..cut], 1232, &mut Vec::new());
        }
        let mut looped = full.clone();
        looped[63] = 0x3f; // the A's owner points at itself
        assert!(cname_reply(&q, &looped, 1232, &mut Vec::new()).is_err());
    }
}
