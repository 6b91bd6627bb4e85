//! `nodens cache show NAME [TYPE]`: every cached entry of a name (each
//! type, view and DO/CD flag), or of one type of it.

use std::io::{self, Write};
use std::time::Instant;

use super::Served;
use super::protocol::Reply;
use super::records::{describe, folded};
use super::write_reply;

pub(super) fn run(
    served: &dyn Served,
    name: &str,
    qtype: Option<&str>,
    out: &mut impl Write,
) -> io::Result<()> {
    let wire = match folded(name) {
        Ok(w) => w,
        Err(e) => return write_reply(out, &Reply::Error(e.to_string())),
    };
    let qtype = match qtype.map(|t| crate::records::rr::type_code(t).ok_or(t)) {
        None => None,
        Some(Ok(code)) => Some(code),
        Some(Err(t)) => return write_reply(out, &Reply::Error(format!("unknown type {t:?}"))),
    };
    let now = Instant::now();
    let mut found = served
        .cache()
        .entries(|key| key.name() == &*wire && qtype.is_none_or(|t| key.qtype() == t));
    found.sort_by_key(|(key, _)| (key.qtype(), key.view(), key.flags()));
    for (key, entry) in &found {
        write_reply(out, &Reply::Entry(describe(served, key, entry, now)))?;
    }
    write_reply(
        out,
        &Reply::Done {
            entries: found.len(),
        },
    )
}
