//! A minimal raw DNS reader, for what hickory-proto would normalise or
//! reject: replies to malformed or deliberately odd queries (their header
//! fields and counts exactly as sent, an OPT record hickory would refuse),
//! and the question section byte for byte (its letter case, for the 0x20
//! and case-preservation tests, and its exact length). Everything that only
//! reads a well-formed answer uses hickory-proto ([`super::dns::Reply`]).

/// The OPT pseudo-record of a message.
#[derive(Clone, Debug)]
pub struct RawOpt {
    pub udp_size: u16,
    pub ext_rcode: u8,
    pub version: u8,
    pub flags: u16,
    /// (option code, data)
    pub options: Vec<(u16, Vec<u8>)>,
}

impl RawOpt {
    /// The INFO-CODEs of the Extended DNS Error options (RFC 8914, option code 15).
    pub fn ede_codes(&self) -> Vec<u16> {
        self.options
            .iter()
            .filter(|(code, data)| *code == 15 && data.len() >= 2)
            .map(|(_, data)| u16::from_be_bytes([data[0], data[1]]))
            .collect()
    }
}

/// A message parsed by hand: the header, and the OPT record if any.
#[derive(Clone, Debug)]
pub struct RawMsg {
    pub id: u16,
    pub flags: u16,
    pub qdcount: u16,
    pub ancount: u16,
    pub nscount: u16,
    pub arcount: u16,
    pub opt: Option<RawOpt>,
}

impl RawMsg {
    pub fn parse(raw: &[u8]) -> Option<RawMsg> {
        if raw.len() < 12 {
            return None;
        }
        let u16_at = |i: usize| u16::from_be_bytes([raw[i], raw[i + 1]]);
        let mut m = RawMsg {
            id: u16_at(0),
            flags: u16_at(2),
            qdcount: u16_at(4),
            ancount: u16_at(6),
            nscount: u16_at(8),
            arcount: u16_at(10),
            opt: None,
        };
        let mut pos = 12;
        for _ in 0..m.qdcount {
            pos = skip_name(raw, pos)? + 4;
        }
        let records = m.ancount as usize + m.nscount as usize + m.arcount as usize;
        for i in 0..records {
            let name_start = pos;
            pos = skip_name(raw, pos)?;
            if pos + 10 > raw.len() {
                return None;
            }
            let rtype = u16::from_be_bytes([raw[pos], raw[pos + 1]]);
            let class = u16::from_be_bytes([raw[pos + 2], raw[pos + 3]]);
            let ttl = u32::from_be_bytes([raw[pos + 4], raw[pos + 5], raw[pos + 6], raw[pos + 7]]);
            let rdlen = u16::from_be_bytes([raw[pos + 8], raw[pos + 9]]) as usize;
            let rdata = raw.get(pos + 10..pos + 10 + rdlen)?;
            pos += 10 + rdlen;
            let in_additional = i >= m.ancount as usize + m.nscount as usize;
            if in_additional && rtype == 41 {
                if m.opt.is_some() || raw[name_start] != 0 {
                    return None; // not a well-formed reply
                }
                let mut options = Vec::new();
                let mut o = 0;
                while o + 4 <= rdata.len() {
                    let code = u16::from_be_bytes([rdata[o], rdata[o + 1]]);
                    let len = u16::from_be_bytes([rdata[o + 2], rdata[o + 3]]) as usize;
                    options.push((code, rdata.get(o + 4..o + 4 + len)?.to_vec()));
                    o += 4 + len;
                }
                m.opt = Some(RawOpt {
                    udp_size: class,
                    ext_rcode: (ttl >> 24) as u8,
                    version: (ttl >> 16) as u8,
                    flags: ttl as u16,
                    options,
                });
            }
        }
        Some(m)
    }
    pub fn qr(&self) -> bool {
        self.flags & 0x8000 != 0
    }
    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xf) as u8
    }
    pub fn tc(&self) -> bool {
        self.flags & 0x0200 != 0
    }
    /// The full RCODE, with the OPT record's upper 8 bits.
    pub fn rcode(&self) -> u16 {
        let high = self.opt.as_ref().map_or(0, |o| u16::from(o.ext_rcode));
        (high << 4) | (self.flags & 0xf)
    }
}

/// The offset just past the name at `pos` (a pointer ends the name).
fn skip_name(raw: &[u8], mut pos: usize) -> Option<usize> {
    for _ in 0..128 {
        let len = *raw.get(pos)?;
        match len & 0xc0 {
            0x00 if len == 0 => return Some(pos + 1),
            0x00 => pos += 1 + len as usize,
            0xc0 => {
                raw.get(pos + 1)?;
                return Some(pos + 2);
            }
            _ => return None,
        }
    }
    None
}

/// The bytes of the first question of a message (empty if none).
pub fn question_bytes(raw: &[u8]) -> Vec<u8> {
    if raw.len() < 12 || u16::from_be_bytes([raw[4], raw[5]]) == 0 {
        return Vec::new();
    }
    match skip_name(raw, 12) {
        Some(end) if end + 4 <= raw.len() => raw[12..end + 4].to_vec(),
        _ => Vec::new(),
    }
}
