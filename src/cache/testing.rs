//! What the cache's unit tests share: one TTL policy, the lookup key of an
//! A question, an A answer as an upstream sends it, and a snapshot
//! reader's policy that takes every name.

use std::sync::Arc;
use std::time::Instant;

use super::key::KeyRef;
use super::{Entry, TtlPolicy};

pub(crate) const POLICY: TtlPolicy = TtlPolicy {
    min_ttl: 0,
    max_ttl: 3600,
    negative_max_ttl: 1800,
    failure_ttl: 5,
};

/// The key of `name` A IN, as a client without views asks it.
pub(crate) fn key(name: &[u8]) -> KeyRef<'_> {
    KeyRef {
        name,
        qtype: 1,
        qclass: 1,
        flags: 0,
    }
}

/// An A answer (192.0.2.1) for `name` (wire form) with TTL `ttl`,
/// received at `now`.
pub(crate) fn answer(name: &[u8], ttl: u8, now: Instant) -> Arc<Entry> {
    let mut m = vec![0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
    m.extend(name);
    m.extend([
        0, 1, 0, 1, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, ttl, 0, 4, 192, 0, 2, 1,
    ]);
    let layout = crate::wire::response::layout(&m).expect("a well-formed answer");
    Arc::new(Entry::from_response(&m, &layout, &POLICY, now).expect("a cacheable answer"))
}

/// A snapshot reader's policy: [`POLICY`] for every name.
pub(crate) fn every_name(_: &[u8]) -> Option<TtlPolicy> {
    Some(POLICY)
}
