//! Parsing a client query: header, the one question, and the OPT record.
//!
//! This runs for every packet, hits included, so it reads only what it must
//! and allocates nothing. Anything nodens cannot answer safely is turned into
//! a [`Reject`] that says how to answer (or whether to stay silent).

use super::{HEADER_LEN, class, flag, name, rcode, read_u16, read_u32, rtype};

/// A query that passed validation; it borrows the packet it came in.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    pub packet: &'a [u8],
    pub id: u16,
    pub flags: u16,
    /// End of the question name; the question is `packet[12..name_end + 4]`.
    pub name_end: usize,
    pub qtype: u16,
    pub qclass: u16,
    pub edns: Option<Edns>,
}

/// What the client's OPT record said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    /// The client's UDP payload size, raised to 512 if it said less.
    pub udp_size: u16,
    pub dnssec_ok: bool,
}

impl<'a> Query<'a> {
    /// The question name in wire format, in the client's case.
    #[inline]
    pub fn name(&self) -> &'a [u8] {
        &self.packet[HEADER_LEN..self.name_end]
    }

    /// The question section (name, type, class), in the client's case.
    #[inline]
    pub fn question(&self) -> &'a [u8] {
        &self.packet[HEADER_LEN..self.name_end + 4]
    }

    #[inline]
    pub fn checking_disabled(&self) -> bool {
        self.flags & flag::CD != 0
    }

    #[inline]
    pub fn dnssec_ok(&self) -> bool {
        self.edns.is_some_and(|e| e.dnssec_ok)
    }

    /// The largest UDP reply this client accepts, capped by our own maximum.
    #[inline]
    pub fn udp_limit(&self, server_max: u16) -> usize {
        match self.edns {
            Some(e) => e.udp_size.min(server_max).max(512) as usize,
            None => 512,
        }
    }
}

/// A validated query that owns its packet, for a miss that waits on
/// upstream: its parts are kept, so it is never parsed again.
#[derive(Debug, Clone)]
pub struct OwnedQuery {
    packet: Vec<u8>,
    id: u16,
    flags: u16,
    name_end: usize,
    qtype: u16,
    qclass: u16,
    edns: Option<Edns>,
}

impl OwnedQuery {
    pub fn new(query: &Query<'_>) -> OwnedQuery {
        OwnedQuery {
            packet: query.packet.to_vec(),
            id: query.id,
            flags: query.flags,
            name_end: query.name_end,
            qtype: query.qtype,
            qclass: query.qclass,
            edns: query.edns,
        }
    }

    pub fn get(&self) -> Query<'_> {
        Query {
            packet: &self.packet,
            id: self.id,
            flags: self.flags,
            name_end: self.name_end,
            qtype: self.qtype,
            qclass: self.qclass,
            edns: self.edns,
        }
    }
}

/// Why a packet is not answered normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Not worth an answer: too short for a header, or a response.
    Drop(&'static str),
    /// Answer with this response code. `question_end` is set when the
    /// question could be read, so the error reply can echo it; `edns` when
    /// the client's OPT could be read, so the reply carries one.
    Answer {
        rcode: u16,
        reason: &'static str,
        question_end: Option<usize>,
        edns: Option<Edns>,
    },
}

impl Reject {
    pub fn reason(&self) -> &'static str {
        match self {
            Reject::Drop(r) => r,
            Reject::Answer { reason, .. } => reason,
        }
    }
}

fn formerr(reason: &'static str, question_end: Option<usize>) -> Reject {
    Reject::Answer {
        rcode: rcode::FORMERR,
        reason,
        question_end,
        edns: None,
    }
}

/// The rejection reason of the liveness probe (`node::probe`): counted on
/// its own, so its steady four a second do not read as a misbehaving client.
pub const STATUS_PROBE: &str = "status probe";

/// Opcode STATUS (2) and a bare header: the shape of the fail-open probe.
fn is_status_probe(packet: &[u8]) -> bool {
    let flags = read_u16(packet, 2);
    (flags & flag::OPCODE_MASK) >> 11 == 2
        && packet.len() == HEADER_LEN
        && (4..HEADER_LEN)
            .step_by(2)
            .all(|at| read_u16(packet, at) == 0)
}

/// Validates a client query.
pub fn parse(packet: &[u8]) -> Result<Query<'_>, Reject> {
    if packet.len() < HEADER_LEN {
        return Err(Reject::Drop("shorter than a header"));
    }
    let id = read_u16(packet, 0);
    let flags = read_u16(packet, 2);
    if flags & flag::QR != 0 {
        return Err(Reject::Drop("a response, not a query"));
    }
    let opcode = (flags & flag::OPCODE_MASK) >> 11;
    if opcode != 0 {
        return Err(Reject::Answer {
            rcode: rcode::NOTIMP,
            reason: if is_status_probe(packet) {
                STATUS_PROBE
            } else {
                "opcode not supported"
            },
            question_end: None,
            edns: edns_of_any(packet),
        });
    }
    if read_u16(packet, 4) != 1 {
        return Err(with_edns_of(
            formerr("question count is not 1", None),
            packet,
        ));
    }
    if read_u16(packet, 6) != 0 || read_u16(packet, 8) != 0 {
        return Err(with_edns_of(
            formerr(
                "records in the answer or authority section of a query",
                None,
            ),
            packet,
        ));
    }
    let name_end = name::parse_uncompressed(packet, HEADER_LEN)
        .map_err(|_| formerr("bad question name", None))?;
    if name_end + 4 > packet.len() {
        return Err(formerr("question truncated", None));
    }
    let question_end = Some(name_end + 4);
    let qtype = read_u16(packet, name_end);
    let qclass = read_u16(packet, name_end + 2);

    let edns = parse_additional(packet, name_end + 4, read_u16(packet, 10), question_end)?;

    match qtype {
        rtype::OPT => {
            return Err(Reject::Answer {
                rcode: rcode::FORMERR,
                reason: "OPT as question type",
                question_end,
                edns,
            });
        }
        rtype::AXFR | rtype::IXFR => {
            return Err(Reject::Answer {
                rcode: rcode::REFUSED,
                reason: "zone transfer",
                question_end,
                edns,
            });
        }
        rtype::MAILA | rtype::MAILB => {
            return Err(Reject::Answer {
                rcode: rcode::NOTIMP,
                reason: "obsolete query type",
                question_end,
                edns,
            });
        }
        _ => {}
    }
    if !is_served_class(qclass) {
        return Err(Reject::Answer {
            rcode: rcode::REFUSED,
            reason: "class not served",
            question_end,
            edns,
        });
    }
    Ok(Query {
        packet,
        id,
        flags,
        name_end,
        qtype,
        qclass,
        edns,
    })
}

/// Classes a node cache forwards: IN, and CH for the server-identity
/// names (`version.bind`, `id.server`). Class 0 and NONE are never valid in
/// a query; HS, ANY and the unassigned classes have no server behind a
/// cluster DNS, and an upstream that gets them may answer without a
/// question section (NSD does): REFUSED here, never forwarded or cached.
pub fn is_served_class(qclass: u16) -> bool {
    matches!(qclass, class::IN | class::CH)
}

/// The OPT record of a packet rejected before its question was read
/// (another opcode, odd section counts), so that the error reply carries
/// one when the client sent one (RFC 6891 section 7). Best effort: `None`
/// when the packet cannot be walked or its OPT is not well formed.
fn edns_of_any(packet: &[u8]) -> Option<Edns> {
    let mut at = HEADER_LEN;
    for _ in 0..read_u16(packet, 4) {
        at = name::skip(packet, at).ok()? + 4;
    }
    for _ in 0..u32::from(read_u16(packet, 6)) + u32::from(read_u16(packet, 8)) {
        at = name::skip(packet, at).ok()?;
        let rdlen = packet.get(at + 8..at + 10)?;
        at += 10 + usize::from(u16::from_be_bytes([rdlen[0], rdlen[1]]));
    }
    if at > packet.len() {
        return None;
    }
    match parse_additional(packet, at, read_u16(packet, 10), None) {
        Ok(edns) => edns,
        Err(Reject::Answer { edns, .. }) => edns,
        Err(Reject::Drop(_)) => None,
    }
}

fn with_edns_of(reject: Reject, packet: &[u8]) -> Reject {
    match reject {
        Reject::Answer {
            rcode,
            reason,
            question_end,
            edns: None,
        } => Reject::Answer {
            rcode,
            reason,
            question_end,
            edns: edns_of_any(packet),
        },
        other => other,
    }
}

/// Walks the additional section and reads the OPT record, if any. Other
/// records (TSIG, SIG(0)) are skipped: nodens never forwards them.
fn parse_additional(
    packet: &[u8],
    start: usize,
    count: u16,
    question_end: Option<usize>,
) -> Result<Option<Edns>, Reject> {
    let mut at = start;
    let mut edns = None;
    for _ in 0..count {
        let owner_root = packet.get(at) == Some(&0);
        at = name::skip(packet, at)
            .map_err(|_| formerr("bad name in additional section", question_end))?;
        if at + 10 > packet.len() {
            return Err(formerr("additional record truncated", question_end));
        }
        let rrtype = read_u16(packet, at);
        let class = read_u16(packet, at + 2);
        let ttl = read_u32(packet, at + 4);
        let rdlen = read_u16(packet, at + 8) as usize;
        at += 10;
        if at + rdlen > packet.len() {
            return Err(formerr("additional record data truncated", question_end));
        }
        if rrtype == rtype::OPT {
            if edns.is_some() {
                return Err(formerr("more than one OPT record", question_end));
            }
            if !owner_root {
                return Err(formerr(
                    "OPT record with a name other than the root",
                    question_end,
                ));
            }
            if !options_fill(&packet[at..at + rdlen]) {
                return Err(formerr("malformed EDNS option", question_end));
            }
            let found = Edns {
                udp_size: class.max(512),
                dnssec_ok: ttl & 0x8000 != 0,
            };
            let version = (ttl >> 16) as u8;
            if version != 0 {
                return Err(Reject::Answer {
                    rcode: rcode::BADVERS,
                    reason: "EDNS version not supported",
                    question_end,
                    edns: Some(found),
                });
            }
            edns = Some(found);
        }
        at += rdlen;
    }
    Ok(edns)
}

/// EDNS options are (code, length, data) triples that must fill the RDATA exactly.
fn options_fill(mut rdata: &[u8]) -> bool {
    while !rdata.is_empty() {
        if rdata.len() < 4 {
            return false;
        }
        let len = read_u16(rdata, 2) as usize;
        if rdata.len() < 4 + len {
            return false;
        }
        rdata = &rdata[4 + len..];
    }
    true
}

#[cfg(test)]
#[path = "query_tests.rs"]
mod tests;
