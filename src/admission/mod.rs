//! Who may ask: the source-address allow list and the per-client rate
//! limit, checked before anything else is done for a query.

pub mod acl;
pub mod rate;

pub use acl::Acl;
pub use rate::RateLimiter;
