//! Domain names in wire format: validation, case folding, text form.
//!
//! Names are compared in their uncompressed wire form with ASCII letters
//! folded to lower case. Folding the whole byte string is safe because label
//! length bytes are at most 63 and never fall in `A..=Z` (65..=90).

use thiserror::Error;

/// The longest name in wire format (RFC 1035 3.1).
pub const MAX_NAME_LEN: usize = 255;
const MAX_LABEL_LEN: usize = 63;
/// Compression pointers followed while reading one name: more means a loop.
pub const MAX_POINTERS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum NameError {
    #[error("name runs past the end of the message")]
    Truncated,
    #[error("name longer than 255 octets")]
    NameTooLong,
    #[error("compression pointer where none is allowed")]
    UnexpectedPointer,
    #[error("bad compression pointer")]
    BadPointer,
    /// Label types 01 and 10, which also covers every length above 63.
    #[error("reserved label type or label longer than 63 octets")]
    ReservedLabelType,
}

/// Reads an uncompressed name starting at `start` (the question of a query)
/// and returns the offset just past it.
pub fn parse_uncompressed(msg: &[u8], start: usize) -> Result<usize, NameError> {
    let mut at = start;
    loop {
        let len = *msg.get(at).ok_or(NameError::Truncated)? as usize;
        match len & 0xc0 {
            0x00 => {}
            0xc0 => return Err(NameError::UnexpectedPointer),
            _ => return Err(NameError::ReservedLabelType),
        }
        at += 1 + len;
        if at - start > MAX_NAME_LEN {
            return Err(NameError::NameTooLong);
        }
        if at > msg.len() {
            return Err(NameError::Truncated);
        }
        if len == 0 {
            return Ok(at);
        }
    }
}

/// One piece of a possibly compressed name, as [`walk`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Where it is in the message.
    pub at: usize,
    /// Its bytes: a label's length byte and its characters (1 for the
    /// root), or 2 for a compression pointer.
    pub len: usize,
    pub pointer: bool,
    /// Reached through a compression pointer: these bytes belong to some
    /// other part of the message.
    pub jumped: bool,
}

/// The one walker of compressed names: reads the possibly compressed name
/// at `start`, calls `each` for every label and pointer in the order they
/// are read, and returns the offset just past the name where it starts.
/// Pointers must point backwards, past the header and inside the message,
/// and what is read through one must end before it (a name it points to
/// lies wholly earlier: one that runs on past the pointer would read bytes
/// a reply rewrites, the additional section or the OPT); at most
/// [`MAX_POINTERS`] are followed (more means a loop), and the name they
/// spell is at most [`MAX_NAME_LEN`] octets. `each` sees only pieces that
/// lie inside the message.
#[inline]
pub fn walk(msg: &[u8], start: usize, mut each: impl FnMut(Piece)) -> Result<usize, NameError> {
    let mut at = start;
    let mut end = None;
    let mut total = 0usize;
    let mut pointers = 0;
    // The earliest pointer followed so far: nothing read after it may
    // reach it.
    let mut bound = usize::MAX;
    loop {
        let len = *msg.get(at).ok_or(NameError::Truncated)? as usize;
        match len & 0xc0 {
            0x00 => {
                total += 1 + len;
                if total > MAX_NAME_LEN {
                    return Err(NameError::NameTooLong);
                }
                if at + 1 + len > msg.len() {
                    return Err(NameError::Truncated);
                }
                if at + 1 + len > bound {
                    return Err(NameError::BadPointer);
                }
                each(Piece {
                    at,
                    len: 1 + len,
                    pointer: false,
                    jumped: end.is_some(),
                });
                at += 1 + len;
                if len == 0 {
                    return Ok(end.unwrap_or(at));
                }
            }
            0xc0 => {
                let second = *msg.get(at + 1).ok_or(NameError::Truncated)? as usize;
                let target = ((len & 0x3f) << 8) | second;
                // Into the header: those bytes are rewritten on every reply.
                if target >= at || target < super::HEADER_LEN || at + 2 > bound {
                    return Err(NameError::BadPointer);
                }
                bound = at;
                pointers += 1;
                if pointers > MAX_POINTERS {
                    return Err(NameError::BadPointer);
                }
                each(Piece {
                    at,
                    len: 2,
                    pointer: true,
                    jumped: end.is_some(),
                });
                end.get_or_insert(at + 2);
                at = target;
            }
            _ => return Err(NameError::ReservedLabelType),
        }
    }
}

/// Skips a possibly compressed name and returns the offset just past it in
/// the message, checked as [`walk`] checks it.
pub fn skip(msg: &[u8], start: usize) -> Result<usize, NameError> {
    walk(msg, start, |_| {})
}

/// Like [`skip`], and calls `jumped(at, len)` for each label and each
/// further pointer read through a compression pointer: those bytes belong
/// to some other part of the message, which the caller may need to know is
/// never rewritten (a TTL field).
pub fn skip_visiting(
    msg: &[u8],
    start: usize,
    mut jumped: impl FnMut(usize, usize),
) -> Result<usize, NameError> {
    walk(msg, start, |p| {
        if p.jumped {
            jumped(p.at, p.len);
        }
    })
}

/// Copies an uncompressed wire name into `out` with ASCII letters lower-cased
/// and returns its length. `out` must hold [`MAX_NAME_LEN`] bytes.
#[inline]
pub fn fold_into(name: &[u8], out: &mut [u8; MAX_NAME_LEN]) -> usize {
    let n = name.len().min(MAX_NAME_LEN);
    for (o, b) in out[..n].iter_mut().zip(name) {
        *o = b.to_ascii_lowercase();
    }
    n
}

/// The presentation form of an uncompressed wire name ("www.example.", ".").
pub fn to_text(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut at = 0;
    while at < wire.len() {
        let len = wire[at] as usize;
        if len == 0 || at + 1 + len > wire.len() {
            break;
        }
        for &b in &wire[at + 1..at + 1 + len] {
            match b {
                b'.' | b'\\' => {
                    out.push('\\');
                    out.push(b as char);
                }
                0x21..=0x7e => out.push(b as char),
                _ => out.push_str(&format!("\\{b:03}")),
            }
        }
        out.push('.');
        at += 1 + len;
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

/// A name in presentation form that is not a valid domain name, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadName(pub String);

/// The wire form of a presentation name without escapes, lower-cased.
pub fn from_text(text: &str) -> Result<Vec<u8>, BadName> {
    let trimmed = text.trim_end_matches('.');
    let mut wire = Vec::with_capacity(trimmed.len() + 2);
    if !trimmed.is_empty() {
        for label in trimmed.split('.') {
            if label.is_empty() {
                return Err(BadName(format!("`{text}` has an empty label")));
            }
            if label.len() > MAX_LABEL_LEN {
                return Err(BadName(format!(
                    "`{text}` has a label longer than 63 characters"
                )));
            }
            if label.bytes().any(|b| b.is_ascii_whitespace() || b == b'\\') {
                return Err(BadName(format!("`{text}` has a space or escape in it")));
            }
            wire.push(label.len() as u8);
            wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
        }
    }
    wire.push(0);
    if wire.len() > MAX_NAME_LEN {
        return Err(BadName(format!("`{text}` is longer than 255 octets")));
    }
    Ok(wire)
}

/// A zone name as written in the configuration, normalised to lower case
/// with a trailing dot.
pub fn normalize_zone(text: &str) -> Result<String, BadName> {
    if text.is_empty() {
        return Err(BadName(
            "a zone name cannot be empty (the root zone is \".\")".into(),
        ));
    }
    Ok(to_text(&from_text(text)?))
}

/// Offsets at which each label of an uncompressed name starts, the root
/// label included; used to try every suffix of a name, longest first.
pub fn label_starts(wire: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut at = Some(0usize);
    std::iter::from_fn(move || {
        let here = at?;
        let len = *wire.get(here)? as usize;
        at = if len == 0 { None } else { Some(here + 1 + len) };
        Some(here)
    })
}

/// Reads a possibly compressed name at `start` into `out` (uncompressed,
/// case kept) and returns the offset just past it in the message. Checked
/// as [`walk`] checks it; `out` is left as it was when the name is refused.
pub fn read_into(msg: &[u8], start: usize, out: &mut Vec<u8>) -> Result<usize, NameError> {
    let before = out.len();
    let read = walk(msg, start, |p| {
        if !p.pointer {
            out.extend_from_slice(&msg[p.at..p.at + p.len]);
        }
    });
    if read.is_err() {
        out.truncate(before);
    }
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_into_follows_pointers() {
        // Header, then `a.b.` at 12 and `x` + pointer to `b.` at 17.
        let mut msg = vec![0u8; 12];
        msg.extend(b"\x01a\x01b\x00\x01x\xc0\x0e");
        let mut out = Vec::new();
        assert_eq!(read_into(&msg, 17, &mut out), Ok(21));
        assert_eq!(out, b"\x01x\x01b\x00");
        let mut bad = msg.clone();
        bad[20] = 17; // points at itself
        let mut kept = b"\x01k".to_vec();
        assert!(read_into(&bad, 17, &mut kept).is_err());
        assert_eq!(kept, b"\x01k", "a refused name adds nothing");
    }

    #[test]
    fn text_round_trip() {
        let w = from_text("WWW.Example.").unwrap();
        assert_eq!(w, b"\x03www\x07example\x00");
        assert_eq!(to_text(&w), "www.example.");
        assert_eq!(to_text(b"\x00"), ".");
        assert_eq!(normalize_zone("Cluster.Local").unwrap(), "cluster.local.");
        assert_eq!(normalize_zone(".").unwrap(), ".");
        assert!(normalize_zone("a..b").is_err());
    }

    #[test]
    fn uncompressed_rejects_pointers_and_long_labels() {
        assert_eq!(
            parse_uncompressed(b"\xc0\x0c", 0),
            Err(NameError::UnexpectedPointer)
        );
        let mut long = vec![64u8];
        long.extend([b'a'; 64]);
        long.push(0);
        assert_eq!(
            parse_uncompressed(&long, 0),
            Err(NameError::ReservedLabelType)
        );
        assert_eq!(parse_uncompressed(b"\x03ab", 0), Err(NameError::Truncated));
        assert_eq!(parse_uncompressed(b"\x01a\x00rest", 0), Ok(3));
    }

    #[test]
    fn name_too_long() {
        let mut n = Vec::new();
        for _ in 0..5 {
            n.push(63);
            n.extend([b'a'; 63]);
        }
        n.push(0);
        assert_eq!(parse_uncompressed(&n, 0), Err(NameError::NameTooLong));
    }

    #[test]
    fn skip_follows_only_backward_pointers() {
        let mut msg = vec![0u8; 12];
        msg.extend(b"\x01a\x00\xc0\x0c");
        assert_eq!(skip(&msg, 15), Ok(17));
        let mut seen = Vec::new();
        assert_eq!(
            skip_visiting(&msg, 15, |at, len| seen.push((at, len))),
            Ok(17)
        );
        assert_eq!(seen, vec![(12, 2), (14, 1)]);
        // A pointer reached through a pointer is reported too.
        msg.extend(b"\xc0\x0f");
        seen.clear();
        assert_eq!(
            skip_visiting(&msg, 17, |at, len| seen.push((at, len))),
            Ok(19)
        );
        assert_eq!(seen, vec![(15, 2), (12, 2), (14, 1)]);
        msg[16] = 15;
        assert_eq!(
            skip(&msg, 15),
            Err(NameError::BadPointer),
            "pointer to itself"
        );
        msg[16] = 2;
        assert_eq!(
            skip(&msg, 15),
            Err(NameError::BadPointer),
            "pointer into the header"
        );
        assert_eq!(skip(&msg[..16], 15), Err(NameError::Truncated));
    }

    #[test]
    fn a_name_read_through_a_pointer_ends_before_the_pointer() {
        // `\x01b` + pointer to 13: the two bytes before the name, a length
        // 4 label running over the name itself and on past the pointer.
        let mut msg = vec![0u8; 12];
        msg.extend(b"\x00\x04\x01b\xc0\x0d\xc0\x0c");
        assert_eq!(skip(&msg, 14), Err(NameError::BadPointer));
        // The same pointer to a name that ends before it is fine.
        let mut msg = vec![0u8; 12];
        msg.extend(b"\x01a\x00\x01b\xc0\x0c");
        assert_eq!(skip(&msg, 15), Ok(19));
    }

    #[test]
    fn label_starts_walks_suffixes() {
        let w = from_text("a.bc.").unwrap();
        assert_eq!(label_starts(&w).collect::<Vec<_>>(), vec![0, 2, 5]);
    }
}
