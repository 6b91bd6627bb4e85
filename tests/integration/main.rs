//! The integration tests: one binary, one module per area, each against
//! real software (nodens's own binary, CoreDNS, dnsmasq, unbound, a
//! kube-apiserver, `ip`/`nft`/`iptables` in network namespaces). The harness
//! is the `support` crate (tests/support/), compiled once.
//!
//! One binary because each of the 34 it replaces compiled and linked the
//! harness, kube, rustls and tokio on its own (decision 56). Tests that need
//! root or a tool the machine lacks fail saying what to install, or, with
//! `NODENS_ALLOW_SKIP=1`, pass at once and print `skipped: needs X`.
//!
//! Run one area with `cargo test --test integration abuse::`, one test by
//! (part of) its name. `tests/hit_no_alloc.rs` stays a binary of its own: it
//! counts the process's allocations with a global allocator.

// The tests read replies with the harness's hickory-proto (0.25), not the
// product's (Cargo.toml's [dev-dependencies]).
extern crate hickory_proto_tests as hickory_proto;

mod abuse;
mod autopath;
mod autopath_memory;
mod budgets;
mod bulkheads;
mod cluster_schema;
mod cluster_spec;
mod coalescing;
mod control;
mod convert_corefile;
mod deprecated_keys;
mod differential;
mod dnstap;
mod dnstap_peer;
mod doctor;
mod doctor_node;
mod dot;
mod endpoint_discovery;
mod fail_open;
mod flood_liveness;
mod follow_api;
mod follow_api_memory;
mod forwarding;
mod handover;
mod http_bounds;
mod ipv4_pods;
mod last_good;
mod lifecycle;
mod local_records;
mod malformed;
mod metrics;
mod minimal;
mod near_endpoints;
mod negative;
mod node;
mod node_setup;
mod privileges;
mod query_log;
mod querygen;
mod replay;
mod rewrite_dns64;
mod search_rules;
mod snapshot_trust;
mod stale_prefetch;
mod startup_taint;
mod tcp;
mod transport_fallback;
mod truncation;
mod udp_worker;
mod upstream_faults;
mod upstream_health;
mod upstream_pool;
mod upstream_service;
mod views;
mod warm_restart;
mod watch_resume;
mod wire_robustness;
mod workloads;
mod zone_cache;
