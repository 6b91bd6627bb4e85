//! Node checks: conntrack, NOTRACK rules, kube-proxy, listeners, port
//! conflicts, forwarding loops, the DNS cache process's CPU quota.
//!
//! Each check reads what it needs (procfs, the firewall's own dump tools,
//! the kubelet's file) and, when that cannot be read, says so in one fact
//! line instead of guessing. A finding always carries what was read.

mod conntrack;
mod cpu;
mod firewall;

pub use firewall::split_words;
mod forwarding;
pub(crate) mod interfaces;
mod kube_proxy;
mod notrack;
mod policy;
mod ports;
mod sockets;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::Finding;

/// What the node checks look at.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The nodens configuration, when doctor was given one: its node
    /// addresses, HTTP port and upstreams.
    pub config: Option<crate::config::Config>,
    /// The node cache's addresses (169.254.20.10 unless told otherwise).
    pub local_ips: Vec<IpAddr>,
    /// The kubelet's configuration file (its clusterDNS).
    pub kubelet_config: PathBuf,
    /// Where /proc is (tests point it elsewhere).
    pub proc_root: PathBuf,
    /// Where the cgroup hierarchies are mounted (/sys/fs/cgroup).
    pub cgroup_root: PathBuf,
    /// The node's own resolv.conf, which a zone without upstreams forwards
    /// to (a loop when it names the node cache).
    pub node_resolv_conf: PathBuf,
}

/// NodeLocal DNSCache's well-known address.
const DEFAULT_LOCAL_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(169, 254, 20, 10));

/// The facts and findings the checks add to, in order.
#[derive(Debug, Default)]
pub(crate) struct Out {
    pub(crate) facts: Vec<String>,
    pub(crate) findings: Vec<Finding>,
}

impl Out {
    fn fact(&mut self, line: impl Into<String>) {
        self.facts.push(line.into());
    }
    fn finding(&mut self, finding: Finding) {
        self.findings.push(finding);
    }
}

/// The node cache's DNS addresses, and where that list came from.
#[derive(Debug, Clone)]
pub(crate) struct CacheAddresses {
    pub(crate) addrs: Vec<SocketAddr>,
    pub(crate) source: &'static str,
}

impl CacheAddresses {
    fn of(options: &NodeOptions) -> CacheAddresses {
        if !options.local_ips.is_empty() {
            let port = |ip: &IpAddr| configured_port(options, *ip).unwrap_or(53);
            let addrs = options
                .local_ips
                .iter()
                .map(|ip| SocketAddr::new(*ip, port(ip)))
                .collect();
            return CacheAddresses {
                addrs,
                source: "--local-ip",
            };
        }
        let node = options.config.as_ref().and_then(|c| c.node.as_ref());
        match node {
            Some(node) if !node.addresses.is_empty() => CacheAddresses {
                addrs: node.addresses.clone(),
                source: "the configuration's [node] addresses",
            },
            _ => CacheAddresses {
                addrs: vec![SocketAddr::new(DEFAULT_LOCAL_IP, 53)],
                source: "the default",
            },
        }
    }

    pub(crate) fn ips(&self) -> Vec<IpAddr> {
        self.addrs.iter().map(SocketAddr::ip).collect()
    }
}

/// The port the configuration listens on at `ip`, if it lists it.
fn configured_port(options: &NodeOptions, ip: IpAddr) -> Option<u16> {
    let config = options.config.as_ref()?;
    config
        .listen
        .iter()
        .find(|a| a.ip() == ip)
        .map(|a| a.port())
}

/// The DNS addresses the given configuration listens on (and holds).
fn configured_addresses(options: &NodeOptions) -> Vec<SocketAddr> {
    let Some(config) = &options.config else {
        return Vec::new();
    };
    let mut addrs = config.listen.clone();
    if let Some(node) = &config.node {
        addrs.extend(node.addresses.iter().copied());
    }
    addrs
}

/// Runs every node check that can run here. Returns the facts read (for
/// the report's node section) and the findings.
pub(crate) fn check(options: &NodeOptions) -> (Vec<String>, Vec<Finding>) {
    let mut out = Out::default();
    let cache = CacheAddresses::of(options);
    out.fact(format!(
        "node cache addresses ({}): {}",
        cache.source,
        join(&cache.addrs)
    ));
    let conntrack = conntrack::check(&options.proc_root, &mut out);
    let rulesets = firewall::read_all();
    for line in firewall::describe(&rulesets) {
        out.fact(line);
    }
    let sockets = sockets::read(&options.proc_root, &mut out);
    let links = interfaces::read(&mut out);
    let configured = configured_addresses(options);
    let notrack = notrack::check(
        &notrack::Context {
            cache: &cache,
            rulesets: &rulesets,
            sockets: sockets.as_deref(),
            links: links.as_deref(),
            configured: &configured,
            insert_failed: conntrack.map_or(0, |c| c.insert_failed),
        },
        &mut out,
    );
    kube_proxy::check(
        &kube_proxy::Context {
            cache: &cache,
            rulesets: &rulesets,
            notrack: &notrack,
            proc_root: &options.proc_root,
            links: links.as_deref(),
            kubelet_config: &options.kubelet_config,
        },
        &mut out,
    );
    policy::check(
        &policy::Context {
            cache: &cache,
            rulesets: &rulesets,
            notrack: &notrack,
        },
        &mut out,
    );
    if let Some(sockets) = &sockets {
        ports::check_listeners(&cache, sockets, &notrack, links.as_deref(), &mut out);
        ports::check_conflicts(options.config.as_ref(), sockets, &mut out);
    }
    forwarding::check(
        options.config.as_ref(),
        &options.node_resolv_conf,
        sockets.as_deref(),
        &mut out,
    );
    cpu::check(&options.proc_root, &options.cgroup_root, &mut out);
    (out.facts, out.findings)
}

pub(crate) fn join<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
