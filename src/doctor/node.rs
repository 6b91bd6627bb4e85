//! Node checks: conntrack, NOTRACK rules, kube-proxy, listeners, the DNS
//! cache process's CPU quota. (Being written.)

use std::net::IpAddr;
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
}

/// Runs every node check that can run here. Returns the facts read (for
/// the report's node section) and the findings.
pub fn check(_options: &NodeOptions) -> (Vec<String>, Vec<Finding>) {
    (Vec::new(), Vec::new())
}
