//! nodens: a node-local DNS cache for Kubernetes.
//!
//! The request path, in the order a query meets it: `listen` (UDP workers,
//! TCP) → `serve` (admit, parse, route, cache hit; on a miss `coalesce`:
//! identical misses wait for one fetch) → `upstream` (UDP then TCP) →
//! `cache` insert → reply. [`config`] compiles the file into the settings
//! every area reads; [`server`] wires the areas together and handles
//! signals; `tasks` says where work runs. [`convert`], [`doctor`] and
//! [`stub`] (`querygen`) are not on the request path; [`node`] sets up the
//! node's interface and rules and fails open; [`control`] serves the local
//! control socket (`nodens cache`, `nodens top`), reading what `workloads`
//! counts where replies are counted: `answered` is the event each reply's
//! observers (the query log, dnstap, `workloads`) are told, and the one queue
//! of the two that write. docs/architecture.md has the map.
//!
//! The layout (mini-redis's shape): the areas the command line calls are
//! public modules, each re-exporting from its private files what a caller
//! needs; the request path is private, and the few of its items that the
//! tests, benchmarks and fuzz targets drive directly are re-exported here by
//! name. A `pub` item anywhere else is `pub(crate)` at most, and the
//! `unreachable_pub` lint keeps it so.

// Without the `kubernetes` feature (the fuzz targets' build) the server is
// left out, and what only it calls is unused there; the default build, which
// clippy checks, keeps every lint.
#![cfg_attr(
    not(feature = "kubernetes"),
    allow(dead_code, unused_imports, unreachable_pub)
)]

// What the command line (src/cli/) calls: public areas, each with the
// surface its `mod.rs` re-exports.
pub mod config;
pub mod control;
pub mod convert;
pub mod cpus;
pub mod doctor;
pub mod limits;
pub mod liveness;
pub mod logging;
pub mod node;
pub mod privileges;
#[cfg(feature = "kubernetes")]
pub mod server;
pub mod stub;
pub mod trust;
// The DNS wire format: what the fuzz targets and benchmarks parse and build.
pub mod wire;

// The request path and the services around it: private. What the tests,
// benchmarks and fuzz targets drive directly is re-exported by name below.
mod admission;
mod answered;
mod cache;
mod coalesce;
mod dnstap;
mod http;
mod ifaddrs;
mod kubernetes;
mod listen;
mod lock;
mod log_limit;
mod metrics;
mod minimal;
mod querylog;
mod records;
mod rewrite;
mod search;
mod serve;
mod tasks;
mod upstream;
mod vocab;
mod workloads;

pub use cache::key::NameBuf;
pub use cache::snapshot::{Rules as SnapshotRules, read as read_snapshot, write as write_snapshot};
pub use cache::{Cache, Entry, Freshness, KeyRef, Kind, Lookup, TtlPolicy};
#[cfg(feature = "kubernetes")]
pub use kubernetes::client as kubernetes_client;
pub use listen::handover::{Named as HandedName, parse_names as parse_handover_names};
pub use listen::{Arrival, Handled, ListenerInfo, Proto, Service};
pub use search::Rule;
pub use serve::Shared;
pub use upstream::rules::fuzz_rebuild;
