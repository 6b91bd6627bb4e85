//! Who may ask: the source-address allow list and the per-client rate
//! limit, checked before anything else is done for a query; and the
//! per-namespace budgets, checked there and again before a miss.
//!
//! Configuration: `[server] allow`, `client_rate_limit` and `client_rate_burst`
//! (compiled by `config`), `[budget]` (`budget/config.rs`). Request path:
//! first, in `serve::admit`; the budgets again in `serve::budget` before a
//! miss.

pub(crate) mod acl;
pub(crate) mod budget;
pub(crate) mod rate;

pub(crate) use acl::Acl;
pub(crate) use budget::Budgets;
pub(crate) use rate::RateLimiter;
