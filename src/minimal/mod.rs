//! Minimal responses (CoreDNS's `minimal`): an answer keeps its answer
//! section and loses its authority and additional sections (the zone's NS
//! records and their glue, which a stub resolver never reads), so replies
//! and cache entries are smaller. A denial (NXDOMAIN, NODATA: its SOA is
//! what negative caching needs), an error and a referral are kept whole, as
//! CoreDNS keeps them.
//!
//! Configuration: `minimal = true` in a `[[zone]]` (off by default).
//! Request path: once per upstream answer, on a miss, before it is cached
//! (`serve::fetch`); a cache hit serves what was stored and pays nothing.
//!
//! The answer section comes first and a compression pointer only points
//! backwards, so the message cut after its answers is still whole: no name
//! is rewritten. The OPT record goes with the additional section, as in
//! CoreDNS; nodens writes its own on every reply (decision 5).

use crate::upstream::forward::Forwarded;
use crate::wire::{HEADER_LEN, name, rcode, read_u16, response};

/// Makes `answer` minimal, if it is an answer with more than its answer
/// section; its layout is taken again from the cut message.
pub(crate) fn apply(answer: &mut Forwarded) {
    if let Some(cut) = minimize(&answer.msg)
        && let Ok(layout) = response::layout(&cut)
    {
        answer.msg = cut;
        answer.layout = layout;
    }
}

/// `msg` without its authority and additional sections, when it is an
/// answer (NOERROR with answers) that has any; `None` to keep it as it is
/// (another kind of response, nothing to drop, or a message it cannot walk:
/// the cache's own checks judge that one).
pub(crate) fn minimize(msg: &[u8]) -> Option<Vec<u8>> {
    if msg.len() < HEADER_LEN || u16::from(msg[3] & 0x0f) != rcode::NOERROR {
        return None;
    }
    let (questions, answers) = (read_u16(msg, 4), read_u16(msg, 6));
    let (authority, additional) = (read_u16(msg, 8), read_u16(msg, 10));
    if answers == 0 || (authority == 0 && additional == 0) {
        return None;
    }
    let mut at = HEADER_LEN;
    for _ in 0..questions {
        at = name::skip(msg, at).ok()? + 4;
    }
    for _ in 0..answers {
        let fixed = name::skip(msg, at).ok()?;
        let rdlength = msg.get(fixed + 8..fixed + 10)?;
        at = fixed + 10 + usize::from(u16::from_be_bytes([rdlength[0], rdlength[1]]));
    }
    // A record that runs past the end leaves nothing to cut.
    let mut out = msg.get(..at)?.to_vec();
    out[8..12].fill(0);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer as an authoritative server sends it: www A, the zone's NS
    /// in authority, the server's address and an OPT in additional.
    fn answer(rcode: u8, answers: u16) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x84, rcode, 0, 1];
        m.extend(answers.to_be_bytes());
        m.extend([0, 1, 0, 2]);
        m.extend(b"\x03www\x07example\x00\x00\x01\x00\x01");
        for _ in 0..answers {
            m.extend([0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, 1]);
        }
        // example. NS ns.example.
        m.extend([
            0xc0, 16, 0, 2, 0, 1, 0, 0, 0x0e, 0x10, 0, 5, 2, b'n', b's', 0xc0, 16,
        ]);
        // ns.example. A 192.0.2.53, then OPT.
        let ns_at = (m.len() - 5) as u8;
        m.extend([
            0xc0, ns_at, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, 53,
        ]);
        m.extend([0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        m
    }

    #[test]
    fn an_answer_keeps_only_its_answers_and_other_responses_are_kept() {
        let full = answer(0, 2);
        let cut = minimize(&full).expect("an answer with authority");
        assert_eq!(&cut[4..12], &[0, 1, 0, 2, 0, 0, 0, 0]);
        let answers_end = 12 + 17 + 2 * 16;
        assert_eq!(cut.len(), answers_end);
        assert_eq!(cut[..8], full[..8]);
        assert_eq!(cut[12..], full[12..answers_end]);
        // NODATA and NXDOMAIN keep their authority; so does a cut message.
        assert_eq!(minimize(&answer(0, 0)), None);
        assert_eq!(minimize(&answer(3, 0)), None);
        assert_eq!(minimize(&full[..40]), None);
        // Nothing to drop: kept.
        assert_eq!(minimize(&cut), None);
    }
}
