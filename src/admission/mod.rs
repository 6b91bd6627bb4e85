//! Who may ask: the source-address allow list and the per-client rate
//! limit, checked before anything else is done for a query; and the
//! per-namespace budgets, checked there and again before a miss.

pub(crate) mod acl;
pub(crate) mod budget;
pub(crate) mod rate;

pub(crate) use acl::Acl;
pub(crate) use budget::Budgets;
pub(crate) use rate::RateLimiter;
