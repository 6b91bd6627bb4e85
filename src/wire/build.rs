//! The few messages nodens writes itself: queries to upstreams, error
//! replies to clients, and the OPT record it appends to its answers.

use super::query::{Edns, Query, Reject};
use super::soa::Soa;
use super::{HEADER_LEN, flag, rcode, rtype, write_u16};

/// The UDP payload size nodens advertises upstream and to clients
/// (DNS flag day 2020: avoids IP fragmentation on any common path).
pub const ADVERTISED_UDP_SIZE: u16 = 1232;

/// A query for `question` (name, type, class in wire form) with ID `id`,
/// recursion desired, and an OPT record asking for `ADVERTISED_UDP_SIZE`.
pub fn upstream_query(
    id: u16,
    question: &[u8],
    dnssec_ok: bool,
    checking_disabled: bool,
) -> Vec<u8> {
    query_of_parts(id, [question, &[]], Some(dnssec_ok), checking_disabled)
}

/// [`upstream_query`] for a question in parts (`name` in wire form): the
/// caller need not put the question together first.
pub fn query_for(
    id: u16,
    name: &[u8],
    qtype: u16,
    qclass: u16,
    dnssec_ok: bool,
    checking_disabled: bool,
) -> Vec<u8> {
    let [t0, t1] = qtype.to_be_bytes();
    let [c0, c1] = qclass.to_be_bytes();
    let parts = [name, &[t0, t1, c0, c1]];
    query_of_parts(id, parts, Some(dnssec_ok), checking_disabled)
}

/// [`query_for`] without an OPT record: a plain DNS query, whose answer
/// over UDP is truncated past 512 bytes.
pub fn plain_query_for(id: u16, name: &[u8], qtype: u16, qclass: u16) -> Vec<u8> {
    let [t0, t1] = qtype.to_be_bytes();
    let [c0, c1] = qclass.to_be_bytes();
    query_of_parts(id, [name, &[t0, t1, c0, c1]], None, false)
}

/// The query: an OPT record when `edns` is set (its DO bit from it).
fn query_of_parts(
    id: u16,
    question: [&[u8]; 2],
    edns: Option<bool>,
    checking_disabled: bool,
) -> Vec<u8> {
    let question_len = question[0].len() + question[1].len();
    let mut q = Vec::with_capacity(HEADER_LEN + question_len + 11);
    let mut flags = flag::RD;
    if checking_disabled {
        flags |= flag::CD;
    }
    q.extend(id.to_be_bytes());
    q.extend(flags.to_be_bytes());
    q.extend([0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    q.extend(question[0]);
    q.extend(question[1]);
    if let Some(dnssec_ok) = edns {
        push_opt(&mut q, dnssec_ok, 0, None);
    }
    q
}

/// Appends an OPT record (without touching ARCOUNT). `ext_rcode` is the
/// full response code; its upper 8 bits go into the OPT TTL field.
/// `ede` adds an Extended DNS Error option (RFC 8914) with that info code.
pub fn push_opt(out: &mut Vec<u8>, dnssec_ok: bool, ext_rcode: u16, ede: Option<u16>) {
    out.push(0);
    out.extend(rtype::OPT.to_be_bytes());
    out.extend(ADVERTISED_UDP_SIZE.to_be_bytes());
    out.push((ext_rcode >> 4) as u8);
    out.push(0); // version
    out.push(if dnssec_ok { 0x80 } else { 0 });
    out.push(0);
    match ede {
        Some(code) => {
            out.extend(6u16.to_be_bytes()); // RDLENGTH
            out.extend(15u16.to_be_bytes()); // OPTION-CODE: Extended DNS Error
            out.extend(2u16.to_be_bytes()); // OPTION-LENGTH
            out.extend(code.to_be_bytes());
        }
        None => out.extend(0u16.to_be_bytes()),
    }
}

/// The reply to a query that was rejected with a response code: the
/// client's header with QR set, the question if it could be read, and an
/// OPT record if the client sent one.
pub fn error_reply(packet: &[u8], reject: &Reject, out: &mut Vec<u8>) -> bool {
    let Reject::Answer {
        rcode: code,
        question_end,
        edns,
        ..
    } = *reject
    else {
        return false;
    };
    reply_with_rcode(packet, code, question_end, edns, None, out);
    true
}

/// A reply with no records: the query's header and question, `code` as the
/// response code, recursion available, an OPT (with an optional EDE) when
/// the client used EDNS.
pub fn reply_with_rcode(
    packet: &[u8],
    code: u16,
    question_end: Option<usize>,
    edns: Option<Edns>,
    ede: Option<u16>,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&packet[..HEADER_LEN]);
    let request_flags = u16::from_be_bytes([packet[2], packet[3]]);
    let flags = flag::QR
        | (request_flags & (flag::OPCODE_MASK | flag::RD | flag::CD))
        | flag::RA
        | (code & flag::RCODE_MASK);
    write_u16(out, 2, flags);
    let qdcount = u16::from(question_end.is_some());
    write_u16(out, 4, qdcount);
    write_u16(out, 6, 0);
    write_u16(out, 8, 0);
    write_u16(out, 10, 0);
    if let Some(end) = question_end {
        out.extend_from_slice(&packet[HEADER_LEN..end]);
    }
    if let Some(e) = edns {
        push_opt(out, e.dnssec_ok, code, ede);
        write_u16(out, 10, 1);
    }
}

/// An NXDOMAIN nodens answers itself: the query's header and question, the
/// zone's SOA in the authority section with `ttl` (RFC 2308 section 3), an
/// OPT record when the client used EDNS. The SOA is left out only when it
/// would not fit in `limit` (the client's UDP size).
pub fn nxdomain(query: &Query<'_>, soa: &Soa, ttl: u32, limit: usize, out: &mut Vec<u8>) {
    negative(query, rcode::NXDOMAIN, soa, ttl, limit, out);
}

/// NOERROR with no answer (NODATA, RFC 2308 section 2.2) and `soa` in the
/// authority section with `ttl`: the name exists, the type does not (or,
/// for `no_aaaa_for_ipv4_pods`, not for this client).
pub fn nodata(query: &Query<'_>, soa: &Soa, ttl: u32, limit: usize, out: &mut Vec<u8>) {
    negative(query, rcode::NOERROR, soa, ttl, limit, out);
}

fn negative(query: &Query<'_>, code: u16, soa: &Soa, ttl: u32, limit: usize, out: &mut Vec<u8>) {
    reply_with_rcode(
        query.packet,
        code,
        Some(query.name_end + 4),
        None,
        None,
        out,
    );
    let opt_len = if query.edns.is_some() { 11 } else { 0 };
    if out.len() + soa.wire_len() + opt_len <= limit {
        soa.write(ttl, out);
        write_u16(out, 8, 1);
    }
    if let Some(e) = query.edns {
        push_opt(out, e.dnssec_ok, code, None);
        write_u16(out, 10, 1);
    }
}

/// The answer to a CHAOS TXT query about the server itself: the question,
/// one TXT record with `text` (cut to 255 bytes) and TTL 0, and an OPT
/// record when the client used EDNS. Always small enough for 512 bytes.
pub fn chaos_txt(query: &Query<'_>, text: &str, out: &mut Vec<u8>) {
    reply_with_rcode(
        query.packet,
        rcode::NOERROR,
        Some(query.name_end + 4),
        None,
        None,
        out,
    );
    let text = &text.as_bytes()[..text.len().min(255)];
    out.extend([0xc0, HEADER_LEN as u8]);
    out.extend(rtype::TXT.to_be_bytes());
    out.extend(super::class::CH.to_be_bytes());
    out.extend(0u32.to_be_bytes());
    out.extend((text.len() as u16 + 1).to_be_bytes());
    out.push(text.len() as u8);
    out.extend(text);
    write_u16(out, 6, 1);
    if let Some(e) = query.edns {
        push_opt(out, e.dnssec_ok, rcode::NOERROR, None);
        write_u16(out, 10, 1);
    }
}

/// SERVFAIL for a query that could not be resolved.
pub fn servfail(
    packet: &[u8],
    question_end: usize,
    edns: Option<Edns>,
    ede: Option<u16>,
    out: &mut Vec<u8>,
) {
    reply_with_rcode(packet, rcode::SERVFAIL, Some(question_end), edns, ede, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{query, read_u16};

    #[test]
    fn badvers_reply_carries_extended_rcode() {
        let mut p = vec![0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1];
        p.extend(b"\x01a\x00\x00\x01\x00\x01");
        p.extend([0, 0, 41, 4, 0, 0, 1, 0, 0, 0, 0]);
        let reject = query::parse(&p).unwrap_err();
        let mut out = Vec::new();
        assert!(error_reply(&p, &reject, &mut out));
        assert_eq!(read_u16(&out, 2) & 0x800f, 0x8000); // low rcode bits 0
        assert_eq!(read_u16(&out, 10), 1);
        assert_eq!(out[out.len() - 6], 1); // extended rcode 16 >> 4
    }
}
