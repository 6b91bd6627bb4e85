//! DNS wire format, only as much as a cache needs.
//!
//! nodens never builds a full message tree. A client query is parsed as header,
//! question and OPT record ([`query`]); an upstream response is walked once to
//! find its sections, TTL fields and negative-caching TTL ([`response`]); the
//! few messages nodens writes itself are assembled byte by byte ([`build`]).

pub mod build;
pub mod chain;
pub mod framing;
pub mod name;
pub mod query;
pub(crate) mod rdata;
pub mod response;
pub(crate) mod reverse;
pub(crate) mod soa;

pub const HEADER_LEN: usize = 12;
/// The largest DNS message there is (RFC 1035 4.2.2: a TCP message's
/// length is two bytes). Nothing nodens builds, caches, loads or sends is
/// longer: offsets into a message are stored as `u16`.
pub const MAX_MESSAGE: usize = 65_535;

/// Record types nodens treats specially.
pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const PTR: u16 = 12;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const OPT: u16 = 41;
    pub const IXFR: u16 = 251;
    pub const AXFR: u16 = 252;
    pub const MAILB: u16 = 253;
    pub const MAILA: u16 = 254;
    pub const ANY: u16 = 255;
}

/// Response codes, including the extended ones carried in OPT.
/// Classes nodens tells apart.
pub mod class {
    pub const IN: u16 = 1;
    pub const CH: u16 = 3;
}

pub mod rcode {
    pub const NOERROR: u16 = 0;
    pub const FORMERR: u16 = 1;
    pub const SERVFAIL: u16 = 2;
    pub const NXDOMAIN: u16 = 3;
    pub const NOTIMP: u16 = 4;
    pub const REFUSED: u16 = 5;
    pub const BADVERS: u16 = 16;
}

/// Header flag bits (second 16-bit word of the header).
pub mod flag {
    pub const QR: u16 = 0x8000;
    pub const AA: u16 = 0x0400;
    pub const TC: u16 = 0x0200;
    pub const RD: u16 = 0x0100;
    pub const RA: u16 = 0x0080;
    pub const AD: u16 = 0x0020;
    pub const CD: u16 = 0x0010;
    pub const OPCODE_MASK: u16 = 0x7800;
    pub const RCODE_MASK: u16 = 0x000f;
}

/// Extended DNS Error info codes (RFC 8914) nodens sends.
pub mod ede {
    pub const STALE_ANSWER: u16 = 3;
    pub const NO_REACHABLE_AUTHORITY: u16 = 22;
}

#[inline]
pub fn read_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub fn write_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub fn write_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// The name CoreDNS uses for a response code in its metrics.
pub fn rcode_name(rcode: u16) -> &'static str {
    match rcode {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        6 => "YXDOMAIN",
        7 => "YXRRSET",
        8 => "NXRRSET",
        9 => "NOTAUTH",
        10 => "NOTZONE",
        16 => "BADVERS",
        23 => "BADCOOKIE",
        _ => "other",
    }
}

/// Query types with a name of their own in CoreDNS's metrics (its `type`
/// label) and in logs; any other type is "other", so a client asking random
/// types cannot blow up the series count. The position in this table is also the type's slot in the
/// request path's resolved handles.
pub const QTYPE_LABELS: [(u16, &str); 18] = [
    (1, "A"),
    (2, "NS"),
    (5, "CNAME"),
    (6, "SOA"),
    (12, "PTR"),
    (15, "MX"),
    (16, "TXT"),
    (28, "AAAA"),
    (33, "SRV"),
    (43, "DS"),
    (46, "RRSIG"),
    (47, "NSEC"),
    (48, "DNSKEY"),
    (50, "NSEC3"),
    (65, "HTTPS"),
    (251, "IXFR"),
    (252, "AXFR"),
    (255, "ANY"),
];
pub const QTYPE_OTHER: &str = "other";

/// The types of [`QTYPE_LABELS`] alone: the hit path searches these 36
/// bytes, not the table of names.
const QTYPES: [u16; QTYPE_LABELS.len()] = {
    let mut types = [0; QTYPE_LABELS.len()];
    let mut i = 0;
    while i < types.len() {
        types[i] = QTYPE_LABELS[i].0;
        i += 1;
    }
    types
};

/// The slot of `qtype` in [`QTYPE_LABELS`]; `QTYPE_LABELS.len()` for "other".
#[inline]
pub fn qtype_slot(qtype: u16) -> usize {
    QTYPES
        .iter()
        .position(|&t| t == qtype)
        .unwrap_or(QTYPES.len())
}

/// The name of `qtype` in metrics and logs (CoreDNS's `type` label).
pub fn qtype_label(qtype: u16) -> &'static str {
    QTYPE_LABELS
        .get(qtype_slot(qtype))
        .map_or(QTYPE_OTHER, |&(_, label)| label)
}
