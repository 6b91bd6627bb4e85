//! Who may ask: the source-address allow list and the per-client rate
//! limit, checked before anything else is done for a query.

pub(crate) mod acl;
pub(crate) mod rate;

pub(crate) use acl::Acl;
pub(crate) use rate::RateLimiter;
