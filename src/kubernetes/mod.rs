//! What nodens reads from the Kubernetes API: narrow watches, each feeding
//! one feature, none on the request path. A watch publishes what it knows
//! to the server's main loop, which rebuilds the settings the request path
//! reads; when the API cannot be reached, each feature falls back to what
//! the configuration file says (the ClusterIP for upstreams).
//!
//! Configuration: `[kubernetes]` and the features that read the API
//! (`config.rs`: the plans, and `Wanted`, what a configuration needs of the
//! watches, which `config` builds). Off the request path: tasks on the main
//! runtime.

pub(crate) mod config;
#[cfg(feature = "kubernetes")]
pub(crate) mod endpoints;
#[cfg(feature = "kubernetes")]
pub(crate) mod follow;
#[cfg(feature = "kubernetes")]
pub(crate) mod metrics;
#[cfg(feature = "kubernetes")]
pub(crate) mod namespaces;
#[cfg(feature = "kubernetes")]
mod near;
#[cfg(feature = "kubernetes")]
mod pod_view;
#[cfg(feature = "kubernetes")]
pub(crate) mod pods;
#[cfg(feature = "kubernetes")]
pub(crate) mod startup_taint;
#[cfg(feature = "kubernetes")]
mod watch;
#[cfg(feature = "kubernetes")]
mod watches;

pub(crate) use config::Wanted;
pub use config::{FollowApiPlan, FollowEndpoints, KubernetesPlan};
#[cfg(feature = "kubernetes")]
pub(crate) use watches::Watches;
#[cfg(feature = "kubernetes")]
pub use watches::client;
