//! The search-list tax: a pod's resolver tries `<name>.<ns>.svc.<zone>`,
//! `<name>.svc.<zone>`, `<name>.<zone>` and the cloud domains before the
//! name itself, one after another. Most of those names cannot exist, and
//! nodens knows which ([`rules`]) or has already been told ([`learned`]).

pub mod clients;
pub mod learned;
pub(crate) mod names;
pub mod namespaces;
pub mod rules;

pub use clients::Clients;
pub use learned::Learned;
pub use namespaces::Namespaces;
pub use rules::{CloudSuffix, ClusterRules, Rule};
