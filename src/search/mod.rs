//! The search-list tax: a pod's resolver tries `<name>.<ns>.svc.<zone>`,
//! `<name>.svc.<zone>`, `<name>.<zone>` and the cloud domains before the
//! name itself, one after another. Most of those names cannot exist, and
//! nodens knows which ([`rules`]) or has already been told ([`learned`]).
//!
//! Configuration: `[cluster]` (`rules.rs` compiles it). Request path:
//! `serve::local` and `serve::autopath` read it before the cache.

pub(crate) mod clients;
pub(crate) mod learned;
pub(crate) mod names;
pub(crate) mod namespaces;
pub(crate) mod rules;

pub(crate) use clients::Clients;
pub(crate) use learned::Learned;
pub(crate) use namespaces::Namespaces;
pub use rules::Rule;
pub(crate) use rules::{CloudSuffix, ClusterRules};
