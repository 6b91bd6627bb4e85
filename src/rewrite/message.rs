//! An upstream answer taken apart into records and put back together,
//! for the rare answers whose names or records change (a rewrite written
//! back, a dns64 synthesis). Every name comes out uncompressed: RDATA
//! names of the types RFC 3597 section 4 allows to be compressed are
//! decompressed, any other RDATA is copied as it is.

use crate::wire::name::{self, MAX_NAME_LEN};
use crate::wire::{HEADER_LEN, MAX_MESSAGE, rdata, read_u16, read_u32, rtype};

/// One resource record, names uncompressed.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) owner: Vec<u8>,
    pub(crate) rtype: u16,
    pub(crate) class: u16,
    pub(crate) ttl: u32,
    pub(crate) rdata: Vec<u8>,
}

/// A response: its header's first four bytes (ID and flags), its
/// question (name, type, class) and its three sections.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub(crate) id_flags: [u8; 4],
    pub(crate) question: Vec<u8>,
    pub(crate) sections: [Vec<Record>; 3],
}

impl Message {
    /// `None` for a message that is not one question and whole records.
    pub(crate) fn parse(msg: &[u8]) -> Option<Message> {
        if msg.len() < HEADER_LEN || read_u16(msg, 4) != 1 {
            return None;
        }
        let mut question = Vec::with_capacity(64);
        let mut at = name::read_into(msg, HEADER_LEN, &mut question).ok()?;
        question.extend_from_slice(msg.get(at..at + 4)?);
        at += 4;
        let mut sections: [Vec<Record>; 3] = Default::default();
        for (section, count_at) in sections.iter_mut().zip([6, 8, 10]) {
            for _ in 0..read_u16(msg, count_at) {
                let (record, end) = parse_record(msg, at)?;
                section.push(record);
                at = end;
            }
        }
        Some(Message {
            id_flags: msg[..4].try_into().ok()?,
            question,
            sections,
        })
    }

    /// The message in wire form; `None` when it would be longer than a
    /// DNS message can be (65,535 bytes), which an upstream answer of a few
    /// thousand records, legal over TCP, becomes once rewritten or
    /// synthesized. An owner name that is the question's name (any letter
    /// case aside, as CoreDNS's compression matches it) points at the
    /// question, as the answers of every server do: a dns64 AAAA record is
    /// then 28 bytes, as CoreDNS's are, and what fits there fits here.
    /// Every other name is written out whole.
    pub(crate) fn encode(&self) -> Option<Vec<u8>> {
        let question_name = &self.question[..self.question.len().saturating_sub(4)];
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(&self.id_flags);
        out.extend(1u16.to_be_bytes());
        for section in &self.sections {
            out.extend(u16::try_from(section.len()).ok()?.to_be_bytes());
        }
        out.extend_from_slice(&self.question);
        for record in self.sections.iter().flatten() {
            if record.owner.len() > 1 && record.owner.eq_ignore_ascii_case(question_name) {
                out.extend([0xc0, HEADER_LEN as u8]);
            } else {
                out.extend_from_slice(&record.owner);
            }
            out.extend(record.rtype.to_be_bytes());
            out.extend(record.class.to_be_bytes());
            out.extend(record.ttl.to_be_bytes());
            out.extend(u16::try_from(record.rdata.len()).ok()?.to_be_bytes());
            out.extend_from_slice(&record.rdata);
            if out.len() > MAX_MESSAGE {
                return None;
            }
        }
        Some(out)
    }

    pub(crate) fn rcode(&self) -> u16 {
        u16::from(self.id_flags[3] & 0x0f)
    }

    pub(crate) fn set_rcode(&mut self, rcode: u16) {
        self.id_flags[3] = (self.id_flags[3] & 0xf0) | (rcode as u8 & 0x0f);
    }
}

fn parse_record(msg: &[u8], at: usize) -> Option<(Record, usize)> {
    let mut owner = Vec::with_capacity(64);
    let fixed = name::read_into(msg, at, &mut owner).ok()?;
    let rdata_at = fixed + 10;
    if rdata_at > msg.len() {
        return None;
    }
    let rtype = read_u16(msg, fixed);
    let rdata_end = rdata_at + usize::from(read_u16(msg, fixed + 8));
    if rdata_end > msg.len() {
        return None;
    }
    let mut data = Vec::with_capacity(rdata_end - rdata_at + 32);
    match rdata::names(rtype) {
        Some((prefix, names)) if rdata_at + prefix <= rdata_end => {
            let mut from = rdata_at + prefix;
            data.extend_from_slice(&msg[rdata_at..from]);
            for _ in 0..names {
                from = name::read_into(msg, from, &mut data).ok()?;
            }
            if from > rdata_end {
                return None;
            }
            data.extend_from_slice(&msg[from..rdata_end]);
        }
        Some(_) => return None,
        None => data.extend_from_slice(&msg[rdata_at..rdata_end]),
    }
    let record = Record {
        owner,
        rtype,
        class: read_u16(msg, fixed + 2),
        ttl: read_u32(msg, fixed + 4),
        rdata: data,
    };
    Some((record, rdata_end))
}

impl Record {
    /// Where the name CoreDNS's `answer value` and `answer auto` rewrite
    /// sits in the RDATA (the target of CNAME, DNAME, NS, PTR, MX, SRV, the
    /// primary server of SOA), and its length.
    fn value_range(&self) -> Option<std::ops::Range<usize>> {
        let start = match self.rtype {
            rtype::CNAME | rtype::NS | rtype::PTR | rtype::SOA | 39 => 0,
            rtype::MX => 2,
            rtype::SRV => 6,
            _ => return None,
        };
        let end = name::parse_uncompressed(&self.rdata, start).ok()?;
        Some(start..end)
    }

    /// The value name, uncompressed wire form.
    pub(crate) fn value(&self) -> Option<&[u8]> {
        self.value_range().map(|r| &self.rdata[r])
    }

    /// Replaces the value name (see [`Record::value`]).
    pub(crate) fn set_value(&mut self, wire: &[u8]) {
        if let Some(range) = self.value_range() {
            self.rdata.splice(range, wire.iter().copied());
        }
    }
}

/// The wire form of a name in presentation form, escapes (`\.`, `\DDD`)
/// read, case kept; `None` when it is not a domain name.
pub(crate) fn wire_from_text(text: &str) -> Option<Vec<u8>> {
    if text == "." {
        return Some(vec![0]);
    }
    let mut out = Vec::with_capacity(text.len() + 2);
    let mut label: Vec<u8> = Vec::with_capacity(63);
    let bytes = text.as_bytes();
    let mut i = 0;
    let push = |label: &mut Vec<u8>, out: &mut Vec<u8>| -> Option<()> {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        out.push(label.len() as u8);
        out.append(label);
        Some(())
    };
    while i < bytes.len() {
        match bytes[i] {
            b'.' => push(&mut label, &mut out)?,
            b'\\' => {
                let digits = bytes.get(i + 1..i + 4);
                match digits {
                    Some(d) if d.iter().all(u8::is_ascii_digit) => {
                        let v: u16 = std::str::from_utf8(d).ok()?.parse().ok()?;
                        label.push(u8::try_from(v).ok()?);
                        i += 3;
                    }
                    _ => {
                        label.push(*bytes.get(i + 1)?);
                        i += 1;
                    }
                }
            }
            b => label.push(b),
        }
        i += 1;
    }
    if !label.is_empty() {
        push(&mut label, &mut out)?;
    }
    out.push(0);
    (out.len() <= MAX_NAME_LEN).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_text_and_wire_agree() {
        for text in ["www.Example.org.", ".", "a\\.b.c.", "x\\032y.z."] {
            let wire = wire_from_text(text).unwrap();
            assert_eq!(name::to_text(&wire), text, "{text}");
        }
        assert!(wire_from_text("a..b.").is_none());
        assert!(wire_from_text(&format!("{}.", "a".repeat(64))).is_none());
    }

    /// 2,500 AAAA records of the question's name: 70,000 bytes written
    /// out whole, 70,000 + 12 + question with pointers: too long either way,
    /// so no message. 2,000 fit (56,000 bytes with pointers).
    #[test]
    fn a_message_longer_than_65535_bytes_is_not_built() {
        let question = b"\x04host\x07example\x00\x00\x1c\x00\x01".to_vec();
        let record = Record {
            owner: b"\x04HOST\x07example\x00".to_vec(),
            rtype: rtype::AAAA,
            class: 1,
            ttl: 60,
            rdata: vec![0x20; 16],
        };
        let message = |n: usize| Message {
            id_flags: [0, 1, 0x81, 0x80],
            question: question.clone(),
            sections: [vec![record.clone(); n], vec![], vec![]],
        };
        let fits = message(2_000).encode().unwrap();
        assert_eq!(fits.len(), 12 + question.len() + 2_000 * 28);
        assert!(crate::wire::response::layout(&fits).is_ok());
        assert!(message(2_500).encode().is_none());
    }

    #[test]
    fn a_compressed_answer_comes_back_uncompressed() {
        // www.example.org. CNAME web.example.org. (compressed), A 192.0.2.1
        let mut msg = vec![0, 1, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0];
        msg.extend_from_slice(b"\x03www\x07example\x03org\x00\x00\x01\x00\x01");
        msg.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 6]);
        msg.extend_from_slice(b"\x03web\xc0\x10");
        let web_at = msg.len() - 6;
        msg.extend_from_slice(&[
            0xc0,
            web_at as u8,
            0,
            1,
            0,
            1,
            0,
            0,
            0,
            60,
            0,
            4,
            192,
            0,
            2,
            1,
        ]);
        let parsed = Message::parse(&msg).unwrap();
        assert_eq!(parsed.sections[0].len(), 2);
        assert_eq!(
            name::to_text(parsed.sections[0][0].value().unwrap()),
            "web.example.org."
        );
        assert_eq!(
            name::to_text(&parsed.sections[0][1].owner),
            "web.example.org."
        );
        let again = Message::parse(&parsed.encode().unwrap()).unwrap();
        assert_eq!(again.sections[0][1].rdata, vec![192, 0, 2, 1]);
    }
}
