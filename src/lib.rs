//! nodens: a node-local DNS cache for Kubernetes.
//!
//! The request path, in the order a query meets it:
//! [`listen`] (UDP workers, TCP) → [`handler`] (parse, cache lookup, reply
//! on a hit) → on a miss [`inflight`] (coalescing) → [`upstream`] (zone
//! routing, UDP then TCP) → [`cache`] insert → reply.

pub mod cache;
pub mod config;
pub mod cpus;
pub mod guard;
pub mod handler;
pub mod inflight;
pub mod limits;
pub mod listen;
pub mod log_limit;
pub mod logging;
pub mod metrics;
pub mod privileges;
pub mod server;
pub mod stats;
pub mod upstream;
pub mod wire;
