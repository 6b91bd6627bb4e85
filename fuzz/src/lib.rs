//! Helpers shared by the fuzz targets: an independent, deliberately simple
//! reader of DNS messages, used as an oracle for what nodens writes.
//!
//! It is written from RFC 1035 alone and shares no code with `nodens::wire`,
//! so a defect in nodens' walker is not mirrored here.

pub const HEADER_LEN: usize = 12;

pub const QR: u16 = 0x8000;
pub const TC: u16 = 0x0200;
pub const RD: u16 = 0x0100;
pub const RA: u16 = 0x0080;
pub const AD: u16 = 0x0020;
pub const CD: u16 = 0x0010;
pub const OPT: u16 = 41;

pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Reads a possibly compressed name at `at`. Returns the name expanded to
/// uncompressed wire form with ASCII letters lower-cased, and the offset
/// just past the name where it appears. Lax on purpose (any pointer target
/// inside the message, forwards too): it only needs to say what the bytes
/// spell, not whether they are acceptable.
pub fn read_name(msg: &[u8], mut at: usize) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut end = None;
    let mut hops = 0;
    loop {
        let len = *msg.get(at)? as usize;
        match len & 0xc0 {
            0 => {
                let label = msg.get(at + 1..at + 1 + len)?;
                out.push(len as u8);
                out.extend(label.iter().map(u8::to_ascii_lowercase));
                at += 1 + len;
                if out.len() > 255 {
                    return None;
                }
                if len == 0 {
                    return Some((out, end.unwrap_or(at)));
                }
            }
            0xc0 => {
                let target = ((len & 0x3f) << 8) | *msg.get(at + 1)? as usize;
                end.get_or_insert(at + 2);
                hops += 1;
                if hops > 255 {
                    return None;
                }
                at = target;
            }
            _ => return None,
        }
    }
}

/// One resource record, with its names expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub owner: Vec<u8>,
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    /// Offset of the TTL field in the message.
    pub ttl_at: usize,
    /// RDATA, with the names of the types whose names may be compressed
    /// (RFC 3597 section 4, and SRV, DNAME) expanded, so that two encodings
    /// of one record compare equal.
    pub rdata: Vec<u8>,
}

impl Record {
    /// The record without its TTL: what rendering must never change.
    pub fn content(&self) -> (&[u8], u16, u16, &[u8]) {
        (&self.owner, self.rtype, self.class, &self.rdata)
    }
}

#[derive(Debug, Clone)]
pub struct Message {
    pub id: u16,
    pub flags: u16,
    /// The question in wire form as written (case kept), if QDCOUNT is 1.
    pub question: Option<Vec<u8>>,
    pub answer: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
    pub end: usize,
}

impl Message {
    /// Non-OPT records of the additional section.
    pub fn additional_without_opt(&self) -> Vec<&Record> {
        self.additional.iter().filter(|r| r.rtype != OPT).collect()
    }

    pub fn opt(&self) -> Option<&Record> {
        self.additional.iter().find(|r| r.rtype == OPT)
    }
}

fn expand_rdata(msg: &[u8], rtype: u16, rdata: usize, end: usize) -> Option<Vec<u8>> {
    let (prefix, names, suffix) = match rtype {
        2 | 5 | 12 | 39 => (0, 1, false), // NS CNAME PTR DNAME
        6 => (0, 2, true),                // SOA: two names then 20 bytes
        15 => (2, 1, false),              // MX
        33 => (6, 1, false),              // SRV
        // MD MF MB MG MR (one name), MINFO RP (two), AFSDB RT KX (a
        // preference, a name): RFC 3597 lets them be compressed too. RDATA
        // that is no name makes the record unreadable: copied as it is, a
        // pointer in it would read other bytes in another message.
        3 | 4 | 7..=9 => (0, 1, false),
        14 | 17 => (0, 2, false),
        18 | 21 | 36 => (2, 1, false),
        _ => return Some(msg[rdata..end].to_vec()),
    };
    expand_names(msg, rdata, end, prefix, names, suffix)
}

fn expand_names(
    msg: &[u8],
    rdata: usize,
    end: usize,
    prefix: usize,
    names: usize,
    suffix: bool,
) -> Option<Vec<u8>> {
    let mut out = msg.get(rdata..rdata + prefix)?.to_vec();
    let mut at = rdata + prefix;
    for _ in 0..names {
        let (name, next) = read_name(msg, at)?;
        out.extend(name);
        at = next;
    }
    if at > end {
        return None;
    }
    if suffix || at < end {
        out.extend(&msg[at..end]);
    }
    Some(out)
}

/// Parses a whole message with this module's reader: header, at most one
/// question, and every record of the three sections.
pub fn parse_message(msg: &[u8]) -> Option<Message> {
    if msg.len() < HEADER_LEN {
        return None;
    }
    let qd = u16_at(msg, 4);
    let mut at = HEADER_LEN;
    let mut question = None;
    for _ in 0..qd {
        let (_, next) = read_name(msg, at)?;
        let q_end = next + 4;
        if q_end > msg.len() {
            return None;
        }
        if qd == 1 {
            question = Some(msg[at..q_end].to_vec());
        }
        at = q_end;
    }
    let mut sections: [Vec<Record>; 3] = Default::default();
    for (i, count_at) in [6, 8, 10].into_iter().enumerate() {
        for _ in 0..u16_at(msg, count_at) {
            let (owner, next) = read_name(msg, at)?;
            if next + 10 > msg.len() {
                return None;
            }
            let rtype = u16_at(msg, next);
            let class = u16_at(msg, next + 2);
            let ttl = u32_at(msg, next + 4);
            let rdlen = u16_at(msg, next + 8) as usize;
            let rdata = next + 10;
            let end = rdata + rdlen;
            if end > msg.len() {
                return None;
            }
            let rdata = expand_rdata(msg, rtype, rdata, end)?;
            sections[i].push(Record {
                owner,
                rtype,
                class,
                ttl,
                ttl_at: next + 4,
                rdata,
            });
            at = end;
        }
    }
    let [answer, authority, additional] = sections;
    Some(Message {
        id: u16_at(msg, 0),
        flags: u16_at(msg, 2),
        question,
        answer,
        authority,
        additional,
        end: at,
    })
}

/// Labels of an uncompressed wire name, or None if it is not one.
pub fn labels(name: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let len = *name.get(at)? as usize;
        if len > 63 {
            return None;
        }
        if len == 0 {
            return (at + 1 == name.len()).then_some(out);
        }
        out.push(name.get(at + 1..at + 1 + len)?);
        at += 1 + len;
    }
}

/// A small deterministic generator for choices derived from fuzz input.
pub struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
}

/// Whether a known, reported and not yet fixed defect may be skipped, so that
/// a run can look for others: `NODENS_FUZZ_ALLOW=tag1,tag2`. Unset (the
/// default, and what `fuzz/run` uses) checks everything.
pub fn allowed(tag: &str) -> bool {
    static ALLOW: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ALLOW
        .get_or_init(|| {
            std::env::var("NODENS_FUZZ_ALLOW")
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .iter()
        .any(|t| t == tag)
}
