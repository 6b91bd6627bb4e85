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
use crate::wire::response::{self, Layout, Section};
use crate::wire::{rcode, read_u16};

/// Makes `answer` minimal, if it is an answer with more than its answer
/// section; the cut message is laid out again as any upstream answer is.
pub(crate) fn apply(answer: &mut Forwarded) {
    if let Some(cut) = minimize(&answer.msg, &answer.layout)
        && let Ok(layout) = response::layout(&cut)
    {
        answer.msg = cut;
        answer.layout = layout;
    }
}

/// `msg` (laid out as `layout`) without its authority and additional
/// sections, when it is an answer (NOERROR with answers) that has any;
/// `None` to keep it as it is. Where the answers end comes from the
/// layout: the last answer's TTL, then its RDLENGTH and RDATA.
fn minimize(msg: &[u8], layout: &Layout) -> Option<Vec<u8>> {
    if layout.rcode != rcode::NOERROR || layout.answer_count == 0 {
        return None;
    }
    let &(ttl_at, section) = layout.ttls.get(usize::from(layout.answer_count) - 1)?;
    if section != Section::Answer || msg.len() < ttl_at + 6 {
        return None;
    }
    let end = ttl_at + 6 + usize::from(read_u16(msg, ttl_at + 4));
    if end >= layout.end {
        return None;
    }
    let mut out = msg.get(..end)?.to_vec();
    out[8..12].fill(0);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`minimize`] of a message as the miss path has it: laid out first
    /// (a message that is not one is kept as it is).
    fn minimized(msg: &[u8]) -> Option<Vec<u8>> {
        minimize(msg, &response::layout(msg).ok()?)
    }

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
        let cut = minimized(&full).expect("an answer with authority");
        assert_eq!(&cut[4..12], &[0, 1, 0, 2, 0, 0, 0, 0]);
        let answers_end = 12 + 17 + 2 * 16;
        assert_eq!(cut.len(), answers_end);
        assert_eq!(cut[..8], full[..8]);
        assert_eq!(cut[12..], full[12..answers_end]);
        // NODATA and NXDOMAIN keep their authority; so does a cut message.
        assert_eq!(minimized(&answer(0, 0)), None);
        assert_eq!(minimized(&answer(3, 0)), None);
        assert_eq!(minimized(&full[..40]), None);
        // Nothing to drop: kept.
        assert_eq!(minimized(&cut), None);
    }
}
