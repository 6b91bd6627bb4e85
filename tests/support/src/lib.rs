//! Harness shared by the integration tests: real processes (nodens, CoreDNS,
//! dnsmasq) behind guards that kill them on drop, a small DNS client, an
//! HTTP GET for the metrics endpoint, and the test zone. One concern a
//! module; everything is re-exported here so tests `use support::*`.
//!
//! Every test takes its own loopback block with [`Net::alloc`] (see
//! [`net`]). Nothing here sends a packet outside 127.0.0.0/8 and ::1 (or a
//! network namespace a test made itself). Every wait has a deadline; no
//! readiness check is a fixed sleep.

//!
//! A crate of its own, so that it is compiled once and not into each test
//! binary; a test that needs what a machine may lack (root, CoreDNS, a tool)
//! says so first with [`needs!`], which skips it only where
//! `NODENS_ALLOW_SKIP=1` allows (see [`skip`]).

mod cgroup;
mod compared;
mod config;
mod coredns;
mod corefile_server;
mod dns;
mod dot;
mod fixture;
mod http;
mod intruder;
mod kube;
mod listing;
mod net;
mod netns;
mod node;
mod node_section;
mod nodens;
mod pod;
mod proc;
mod prom;
mod raw;
mod rules;
mod silent;
mod skip;
mod ss;
mod stub;
mod tools;
mod wait;
mod zone;

/// RCODE values: the library's own constants.
pub use ::nodens::wire::rcode;
pub use cgroup::CpuCgroup;
pub use compared::Compared;
pub use config::{Cfg, Pool, Transport, Zone};
pub use coredns::{CoreDns, ERRATIC_A, LOG_SETTLE, LoggedQuery};
pub use corefile_server::CorefileServer;
pub use dns::{
    EdeCodes, Q, Reply, Rt, Tcp, TcpRead, ipv4, question_of, take_frame, tcp_query,
    tcp_query_timeout, udp_exchange, udp_exchange_from, udp_query, udp_query_timeout,
};
pub use dot::{Issued, Pki, Stall, Unbound};
pub use fixture::{
    delayed_force_tcp, ms, secs, setup, setup_custom, setup_with, silent_first, silent_first_with,
};
pub use http::http_get;
pub use intruder::intruder;
pub use kube::{ApiRequest, COREDNS_IP, Kube, KubeDns};
pub use listing::{IptSave, NftTable, strip_counters};
pub use net::Net;
pub use netns::{Netns, euid, in_netns, run_ok};
pub use node::{Link, NodeNs, output_within};
pub use node_section::{NodeSection, TEST_STATE_DIR};
pub use nodens::Nodens;
pub use pod::{PodAddrs, PodNet};
pub use proc::Proc;
pub use prom::{Sample, has_series, parse_metrics, sum_metric};
pub use raw::{RawMsg, RawOpt, question_bytes};
pub use rules::{
    HOOKS, Hook, RuleWant, Side, Verdict, ipt_comment, ipt_rule_matches, nft_comment,
    nft_rule_matches, split_quoted, wanted_rules,
};
pub use silent::Silent;
pub use skip::{ALLOW_SKIP, Need, Turn, begin, skip_because, skip_for};
pub use ss::{SsConn, ss_established, ss_established_via, udp_connected_to};
pub use stub::{build_go_lookup, build_musl_lookup};
pub use tools::{
    AS_THE_CHART_RUNS_IT, Converted, convert_corefile, coredns_bin, doctor_against,
    doctor_json_against, finding, nodens_bin, private_dir, random_u64, tool, world_runnable_nodens,
    wrapped_command,
};
pub use wait::{in_parallel, sample_during, sleep_until, wait_until};
pub use zone::{BIG_TXT_COUNT, MID_TXT_COUNT, test_records, test_zone, zone_file};
