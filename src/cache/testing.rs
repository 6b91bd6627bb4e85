//! What the cache's unit tests share: one TTL policy, the lookup key of an
//! A question, and a snapshot reader's policy that takes every name.

use super::TtlPolicy;
use super::key::KeyRef;

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

/// A snapshot reader's policy: [`POLICY`] for every name.
pub(crate) fn every_name(_: &[u8]) -> Option<TtlPolicy> {
    Some(POLICY)
}
