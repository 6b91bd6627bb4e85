//! One resource record in presentation form (`name [ttl] [class] type
//! rdata`), as a `template` answer writes it, turned into wire form: the
//! types templates are used for (A, AAAA, CNAME, NS, PTR, MX, SRV, TXT,
//! SOA). A TTL left out is 3600 and a class left out IN, as CoreDNS's
//! parser (miekg/dns) has them; a name without a final dot is taken as
//! fully qualified, as there is no `$ORIGIN`.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::wire::{class, name, rtype};

/// A record ready to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rr {
    pub(crate) owner: Vec<u8>,
    pub(crate) rtype: u16,
    pub(crate) class: u16,
    pub(crate) ttl: u32,
    pub(crate) rdata: Vec<u8>,
}

const DEFAULT_TTL: u32 = 3600;

/// Why a record's text is not one nodens can write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadRecord {
    #[error("`{0}`: a quote is not closed")]
    OpenQuote(String),
    #[error("record `{text}`: {why}")]
    Field { text: String, why: BadField },
}

/// What is wrong in a record's fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadField {
    #[error("empty")]
    Empty,
    #[error("no type")]
    NoType,
    #[error("TTL `{0}`")]
    Ttl(String),
    #[error("`{0}` is not a type nodens can answer with")]
    UnknownType(String),
    #[error("{0} missing")]
    Missing(&'static str),
    #[error("{what} `{text}` is not a number in range")]
    NotANumber { what: &'static str, text: String },
    #[error("{0}")]
    Name(#[from] name::BadName),
    #[error("no text")]
    NoText,
    #[error("a string longer than 255 bytes")]
    LongString,
}

/// The fields of `text`: runs of non-space, or "quoted strings" (quotes off).
fn fields(text: &str) -> Result<Vec<String>, BadRecord> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut field = String::new();
        if c == '"' {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => field.extend(chars.next()),
                    Some(c) => field.push(c),
                    None => return Err(BadRecord::OpenQuote(text.to_string())),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                field.push(c);
                chars.next();
            }
        }
        out.push(field);
    }
    Ok(out)
}

/// A type's number from its mnemonic (the ones a template may answer).
pub(crate) fn type_code(text: &str) -> Option<u16> {
    Some(match text.to_ascii_uppercase().as_str() {
        "A" => rtype::A,
        "NS" => rtype::NS,
        "CNAME" => rtype::CNAME,
        "SOA" => rtype::SOA,
        "PTR" => rtype::PTR,
        "MX" => rtype::MX,
        "TXT" => rtype::TXT,
        "AAAA" => rtype::AAAA,
        "SRV" => rtype::SRV,
        _ => return None,
    })
}

/// A class's number from its mnemonic.
pub(crate) fn class_code(text: &str) -> Option<u16> {
    Some(match text.to_ascii_uppercase().as_str() {
        "IN" => class::IN,
        "CH" => class::CH,
        "HS" => 4,
        "NONE" => 254,
        "ANY" => 255,
        _ => return None,
    })
}

fn wire_name(text: &str) -> Result<Vec<u8>, BadField> {
    if text == "." {
        return Ok(vec![0]);
    }
    Ok(name::from_text(text)?)
}

fn number<T: std::str::FromStr>(text: Option<&String>, what: &'static str) -> Result<T, BadField> {
    let text = text.ok_or(BadField::Missing(what))?;
    text.parse().map_err(|_| BadField::NotANumber {
        what,
        text: text.clone(),
    })
}

/// Parses one record.
pub(crate) fn parse(text: &str) -> Result<Rr, BadRecord> {
    let f = fields(text)?;
    let bad = |why: BadField| BadRecord::Field {
        text: text.to_string(),
        why,
    };
    let owner = wire_name(f.first().ok_or_else(|| bad(BadField::Empty))?).map_err(bad)?;
    let mut ttl = None;
    let mut rclass = None;
    let mut at = 1;
    let rtype = loop {
        let Some(word) = f.get(at) else {
            return Err(bad(BadField::NoType));
        };
        at += 1;
        if ttl.is_none() && word.bytes().all(|b| b.is_ascii_digit()) {
            ttl = Some(
                word.parse::<u32>()
                    .map_err(|_| bad(BadField::Ttl(word.clone())))?,
            );
        } else if rclass.is_none()
            && let Some(c) = class_code(word)
        {
            rclass = Some(c);
        } else if let Some(t) = type_code(word) {
            break t;
        } else {
            return Err(bad(BadField::UnknownType(word.clone())));
        }
    };
    let rest = &f[at..];
    let mut rdata = Vec::new();
    let arg = |i: usize| rest.get(i);
    match rtype {
        rtype::A => {
            let ip: Ipv4Addr = number(arg(0), "address").map_err(bad)?;
            rdata.extend(ip.octets());
        }
        rtype::AAAA => {
            let ip: Ipv6Addr = number(arg(0), "address").map_err(bad)?;
            rdata.extend(ip.octets());
        }
        rtype::CNAME | rtype::NS | rtype::PTR => {
            let target = arg(0).ok_or_else(|| bad(BadField::Missing("target")))?;
            rdata = wire_name(target).map_err(bad)?;
        }
        rtype::MX => {
            let preference: u16 = number(arg(0), "preference").map_err(bad)?;
            rdata.extend(preference.to_be_bytes());
            let target = arg(1).ok_or_else(|| bad(BadField::Missing("exchange")))?;
            rdata.extend(wire_name(target).map_err(bad)?);
        }
        rtype::SRV => {
            for (i, what) in ["priority", "weight", "port"].into_iter().enumerate() {
                let n: u16 = number(arg(i), what).map_err(bad)?;
                rdata.extend(n.to_be_bytes());
            }
            let target = arg(3).ok_or_else(|| bad(BadField::Missing("target")))?;
            rdata.extend(wire_name(target).map_err(bad)?);
        }
        rtype::TXT => {
            if rest.is_empty() {
                return Err(bad(BadField::NoText));
            }
            for s in rest {
                if s.len() > 255 {
                    return Err(bad(BadField::LongString));
                }
                rdata.push(s.len() as u8);
                rdata.extend(s.as_bytes());
            }
        }
        rtype::SOA => {
            for i in 0..2 {
                let n = arg(i).ok_or_else(|| bad(BadField::Missing("SOA names")))?;
                rdata.extend(wire_name(n).map_err(bad)?);
            }
            for (i, what) in ["serial", "refresh", "retry", "expire", "minimum"]
                .into_iter()
                .enumerate()
            {
                let n: u32 = number(arg(i + 2), what).map_err(bad)?;
                rdata.extend(n.to_be_bytes());
            }
        }
        _ => unreachable!("type_code gives only the types above"),
    }
    Ok(Rr {
        owner,
        rtype,
        class: rclass.unwrap_or(class::IN),
        ttl: ttl.unwrap_or(DEFAULT_TTL),
        rdata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_in_presentation_form() {
        let a = parse("a.example.org. 60 IN A 10.1.2.3").unwrap();
        assert_eq!(a.owner, b"\x01a\x07example\x03org\x00");
        assert_eq!((a.rtype, a.class, a.ttl), (rtype::A, class::IN, 60));
        assert_eq!(a.rdata, [10, 1, 2, 3]);
        let soa = parse("example.org IN SOA ns.example.org. h.example.org. 1 2 3 4 5").unwrap();
        assert_eq!(soa.ttl, 3600);
        assert_eq!(soa.rdata.len(), 16 + 15 + 20);
        let txt = parse(r#"x. 5 TXT "hello world" b"#).unwrap();
        assert_eq!(txt.rdata, b"\x0bhello world\x01b");
        let srv = parse("_x._tcp.a. 1 IN SRV 0 10 53 t.a.").unwrap();
        assert_eq!(&srv.rdata[..6], [0, 0, 0, 10, 0, 53]);
        assert!(parse("a. 60 IN A 10.1.2").is_err());
        assert!(parse("a. 60 IN HINFO x y").is_err());
        assert!(parse("a. 60 IN").is_err());
        assert!(parse("a. IN TXT \"open").is_err());
    }
}
