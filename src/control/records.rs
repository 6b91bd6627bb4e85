//! A cached entry in the words an operator reads: its question, state and
//! records in presentation format (hickory-proto's, the text `dig` prints).

use std::time::Instant;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{DNSClass, RecordType};

use super::Served;
use super::protocol::CachedEntry;
use crate::cache::{Entry, Key, Kind};

/// `entry`, stored under `key`, as it stands at `now`.
pub(super) fn describe(served: &dyn Served, key: &Key, entry: &Entry, now: Instant) -> CachedEntry {
    // The window the zone serving this name gives stale answers, as the
    // hit path would judge it.
    let stale_max_age = served.stale_window(key.view(), key.name());
    let parts = entry.parts(now);
    let age = parts.age.as_secs();
    let kind = match (parts.kind, parts.rcode) {
        (Kind::Success, _) => "answer",
        (Kind::Denial, 3) => "nxdomain",
        (Kind::Denial, _) => "nodata",
        (Kind::Failure, _) => "failure",
    };
    let (name, records) = match Message::from_vec(parts.wire) {
        Ok(msg) => {
            let name = msg
                .queries
                .first()
                .map_or_else(String::new, |q| q.name().to_string());
            let records = msg
                .answers
                .iter()
                .chain(&msg.authorities)
                .map(|r| {
                    let mut r = r.clone();
                    r.ttl = r.ttl.saturating_sub(age.min(u32::MAX.into()) as u32);
                    r.to_string()
                })
                .collect();
            (name, records)
        }
        // A failure entry holds only the question; and nothing stored is
        // left unreadable for it.
        Err(_) => (crate::wire::name::to_text(key.name()), Vec::new()),
    };
    CachedEntry {
        name,
        qtype: RecordType::from(key.qtype()).to_string(),
        class: DNSClass::from(key.qclass()).to_string(),
        view: key.view(),
        dnssec_ok: key.dnssec_ok(),
        checking_disabled: key.checking_disabled(),
        kind: kind.into(),
        rcode: ResponseCode::from(0, parts.rcode as u8).to_string(),
        state: served
            .cache()
            .state_of(entry, now, stale_max_age)
            .label()
            .into(),
        ttl_left: entry.remaining(now).as_secs(),
        age,
        records,
    }
}

/// A name an operator typed that is none.
#[derive(Debug, thiserror::Error)]
#[error("{name:?}: {error}")]
pub(super) struct NotAName {
    name: String,
    error: crate::wire::name::BadName,
}

/// A name as an operator types it (`Example.COM`, with or without the
/// final dot) in the cache's form: lower-case wire.
pub(super) fn folded(name: &str) -> Result<Box<[u8]>, NotAName> {
    let mut wire = crate::wire::name::from_text(name).map_err(|error| NotAName {
        name: name.to_string(),
        error,
    })?;
    wire.make_ascii_lowercase();
    Ok(wire.into_boxed_slice())
}
