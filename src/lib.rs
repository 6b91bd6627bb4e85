//! nodens: a node-local DNS cache for Kubernetes.
//!
//! The request path, in the order a query meets it: [`listen`] (UDP
//! workers, TCP) → [`serve`] (admit, parse, route, cache hit; on a miss
//! [`coalesce`] (identical misses wait for one fetch)) → [`upstream`] (UDP then TCP) → [`cache`]
//! insert → reply. [`config`] compiles the file into the settings every
//! area reads; [`server`] wires the areas together and handles signals;
//! [`tasks`] says where work runs. [`convert`] is not on the request path:
//! it turns a NodeLocal DNSCache Corefile into a configuration file
//! (`nodens convert-corefile`). docs/architecture.md has the map.

pub mod admission;
pub mod cache;
pub mod coalesce;
pub mod config;
pub mod convert;
pub mod cpus;
pub mod doctor;
pub mod http;
pub mod kubernetes;
pub mod limits;
pub mod listen;
pub mod liveness;
pub mod lock;
pub mod log_limit;
pub mod logging;
pub mod metrics;
pub mod node;
pub mod privileges;
pub mod search;
pub mod serve;
pub mod server;
pub mod stub;
pub mod tasks;
pub mod trust;
pub mod upstream;
pub mod wire;
