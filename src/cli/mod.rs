//! The `nodens` command line: the clap definitions of the commands and the
//! dispatcher that runs one and hands its outcome to the one reporter.
//!
//! Each command lives in a file of its own, with its arguments beside the
//! code that reads them, and returns a [`report::Outcome`] or a
//! [`report::Failure`]; [`report::report`] alone prints failures and picks
//! the exit code. The command line belongs to the binary: the library
//! (`nodens::`) has no knowledge of flags or exit codes.

mod cache;
mod check_config;
mod convert_corefile;
mod doctor;
mod guard;
mod node;
mod probe;
mod querygen;
mod report;
mod run_as;
mod serve;
mod supervise;
mod top;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The target of the command line's own log lines: the binary's name, as
/// when they were written from the crate root, so a log filter or a search
/// for `nodens` keeps finding them.
const LOG_TARGET: &str = "nodens";

#[derive(Parser)]
#[command(version, about = "A node-local DNS cache for Kubernetes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DNS. Without --config, listens on 127.0.0.1:1053 and forwards
    /// everything to the nameservers of /etc/resolv.conf.
    Serve(serve::ServeArgs),
    /// The node setup ([node] in the configuration): what is in place, or remove it.
    Node {
        #[command(subcommand)]
        action: node::NodeAction,
    },
    /// Check a configuration file and exit: 0 if valid, 1 with the line of the error if not.
    CheckConfig { file: PathBuf },
    /// Convert a NodeLocal DNSCache Corefile into a nodens configuration: the
    /// TOML on stdout (or -o), what has no translation on stderr with its line.
    /// Exit 0 when converted (with or without warnings), 1 on an error (nothing
    /// written), 2 with --strict when something was not translated.
    ConvertCorefile(convert_corefile::ConvertArgs),
    /// Expand names (`NAME [TYPE]` per line) through a pod's resolv.conf into
    /// dnsperf input (`name TYPE`), in the order its resolver sends the
    /// queries: every search expansion, A and AAAA, each name taken to exist
    /// only as written.
    Querygen(querygen::QuerygenArgs),
    /// Name the DNS problems seen from here (a pod or a node): the resolver
    /// configuration's query cost, probes of its nameservers, the node's
    /// conntrack, rules and listeners. Findings ranked by severity, each with
    /// its evidence and fix. Exit 1 when a critical finding is present.
    Doctor(doctor::DoctorArgs),
    /// Resolve one name the way the pod's resolver would, printing every
    /// query, its answer code and latency. Exit 0 when the name resolved.
    Trace(trace::TraceArgs),
    /// A running nodens's cache, over its control socket: show a name's
    /// entries, flush a name, a zone or all, dump every entry.
    Cache(cache::CacheArgs),
    /// A running nodens's busiest workloads, live: queries a second, cache
    /// hits, NXDOMAIN and SERVFAIL, search-list expansions, names asked.
    Top(top::TopArgs),
    /// The kubelet's probes over the control socket: exit 0 when healthy
    /// (every serving thread runs) or ready (serving, not draining).
    Probe(probe::ProbeArgs),
}

/// Parses the command line, runs the command, reports how it ended.
pub(crate) fn run() -> ExitCode {
    let outcome = match Cli::parse().command {
        Command::Serve(args) => serve::run(args),
        Command::Node { action } => node::run(action),
        Command::CheckConfig { file } => check_config::run(&file),
        Command::ConvertCorefile(args) => convert_corefile::run(args),
        Command::Querygen(args) => querygen::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Trace(args) => trace::run(args),
        Command::Cache(args) => cache::run(args),
        Command::Top(args) => top::run(args),
        Command::Probe(args) => probe::run(args),
    };
    report::report(outcome)
}
