//! Writes the replies nodens synthesises itself (local records, templates,
//! `local`): the query's header and question, records appended section by
//! section, an OPT when the client sent one, and TC with no records when
//! the whole does not fit the client's limit.

use crate::wire::query::Query;
use crate::wire::{HEADER_LEN, build};

/// The authoritative-answer bit in the header's third byte.
const AA: u8 = 0x04;
/// The truncation bit in the header's third byte.
const TC: u8 = 0x02;

/// Where a record goes (sections must be filled in this order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Section {
    Answer = 0,
    Authority = 1,
    Additional = 2,
}

/// A record's owner: the question's name (a pointer to it, so the client
/// sees its own letter case) or a name in wire form.
pub(crate) enum Owner<'a> {
    Question,
    /// The question's name from this many bytes in (a suffix of it).
    QuestionFrom(usize),
    Name(&'a [u8]),
}

/// A reply being written into the caller's buffer.
pub(crate) struct Reply<'q, 'o> {
    query: &'q Query<'q>,
    rcode: u16,
    counts: [u16; 3],
    out: &'o mut Vec<u8>,
}

impl<'q, 'o> Reply<'q, 'o> {
    pub(crate) fn new(
        query: &'q Query<'q>,
        rcode: u16,
        authoritative: bool,
        out: &'o mut Vec<u8>,
    ) -> Self {
        build::reply_with_rcode(
            query.packet,
            rcode,
            Some(query.name_end + 4),
            None,
            None,
            out,
        );
        if authoritative {
            out[2] |= AA;
        }
        Reply {
            query,
            rcode,
            counts: [0; 3],
            out,
        }
    }

    pub(crate) fn add(
        &mut self,
        section: Section,
        owner: Owner<'_>,
        rtype: u16,
        class: u16,
        ttl: u32,
        rdata: &[u8],
    ) {
        match owner {
            Owner::Question => self.out.extend([0xc0, HEADER_LEN as u8]),
            Owner::QuestionFrom(at) => {
                self.out
                    .extend((0xc000 | (HEADER_LEN + at) as u16).to_be_bytes());
            }
            Owner::Name(name) => self.out.extend_from_slice(name),
        }
        self.out.extend(rtype.to_be_bytes());
        self.out.extend(class.to_be_bytes());
        self.out.extend(ttl.to_be_bytes());
        self.out.extend((rdata.len() as u16).to_be_bytes());
        self.out.extend_from_slice(rdata);
        self.counts[section as usize] += 1;
    }

    /// Sets the counts, adds the OPT, and truncates to `limit`.
    pub(crate) fn finish(self, limit: usize) {
        let question_end = self.query.name_end + 4;
        let opt_len = if self.query.edns.is_some() { 11 } else { 0 };
        let mut counts = self.counts;
        if self.out.len() + opt_len > limit {
            self.out.truncate(question_end);
            self.out[2] |= TC;
            counts = [0; 3];
        }
        for (i, count) in counts.iter().enumerate() {
            self.out[6 + 2 * i..8 + 2 * i].copy_from_slice(&count.to_be_bytes());
        }
        if let Some(e) = self.query.edns {
            build::push_opt(self.out, e.dnssec_ok, self.rcode, None);
            self.out[10..12].copy_from_slice(&(counts[2] + 1).to_be_bytes());
        }
    }
}
