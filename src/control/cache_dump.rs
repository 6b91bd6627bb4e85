//! `nodens cache dump`: every cached entry, one line each, then the count.
//! The entries are taken first (references, no copies of the messages) and
//! described while writing: a slow reader holds no lock of the cache.

use std::io::{self, Write};
use std::time::Instant;

use super::Served;
use super::protocol::Reply;
use super::records::describe;
use super::write_reply;

pub(super) fn run(served: &dyn Served, out: &mut impl Write) -> io::Result<()> {
    let now = Instant::now();
    let mut all = served.cache().entries(|_| true);
    all.sort_by(|(a, _), (b, _)| {
        (a.name(), a.qtype(), a.view(), a.flags()).cmp(&(b.name(), b.qtype(), b.view(), b.flags()))
    });
    for (key, entry) in &all {
        write_reply(out, &Reply::Entry(describe(served, key, entry, now)))?;
    }
    write_reply(out, &Reply::Done { entries: all.len() })
}
