//! The node setup's section (`[node]`) and its plan: the interface that
//! holds the listen addresses, the rules' backend, the repair interval,
//! fail-open, and where the claim on the node setup lives.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::vocab::{Invalid, key};

/// How nodens sits on the node: an interface holding the listen addresses
/// and the rules that keep their DNS out of conntrack (docs/node.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// `nodens serve` creates the interface and the rules at start.
    pub setup: bool,
    /// The interface that holds the listen addresses.
    pub interface: String,
    pub link_kind: LinkKind,
    pub backend: Backend,
    /// How often the interface and rules are checked and repaired.
    #[serde(with = "humantime_serde")]
    pub reconcile_interval: Duration,
    /// Leave the interface and rules in place on exit (for a handover).
    pub keep_on_exit: bool,
    /// Run the server under a small supervisor process that withdraws the
    /// interface and rules when the server dies or stops answering, so the
    /// pods' queries to the cluster DNS Service IP reach the cluster DNS.
    pub fail_open: bool,
    /// The directory of the claim on the node setup (`claim-<interface>`):
    /// private to nodens's uid (mode 0700), mounted by nodens's containers
    /// only (docs/security.md).
    pub state_dir: PathBuf,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            setup: false,
            interface: "nodelocaldns".into(),
            link_kind: LinkKind::Auto,
            backend: Backend::Auto,
            reconcile_interval: Duration::from_secs(10),
            keep_on_exit: false,
            fail_open: true,
            state_dir: PathBuf::from("/run/nodens"),
        }
    }
}

/// The kind of link that holds the addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// `dummy`, as NodeLocal DNSCache uses; `ifb` where the kernel has no dummy.
    Auto,
    Dummy,
    /// An intermediate functional block: holds addresses like a dummy.
    Ifb,
}

/// Which firewall interface writes the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// The one kube-proxy's own rules are in; with no trace of it,
    /// nftables when `nft` works, iptables otherwise.
    Auto,
    Nftables,
    Iptables,
}

impl NodeConfig {
    /// The first rule the section breaks, if any; `addresses`: the listen
    /// addresses the interface would hold.
    pub(crate) fn check(&self, addresses: &[SocketAddr]) -> Result<(), Invalid> {
        let node = self;
        if !node.setup {
            return Ok(());
        }
        let name = &node.interface;
        if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\t']) {
            return Err(key(
                &["node", "interface"],
                format!(
                    "node.interface: `{name}` is not an interface name (1 to 15 characters, no `/` or space)"
                ),
            ));
        }
        if node.reconcile_interval.is_zero() {
            return Err(key(
                &["node", "reconcile_interval"],
                "node.reconcile_interval: must be more than 0",
            ));
        }
        if addresses.is_empty() {
            return Err(key(
                &["node", "setup"],
                "node.setup: no listen address to hold (loopback and 0.0.0.0/:: are not put on the interface)",
            ));
        }
        Ok(())
    }
}

/// What `[node]` asks for (see `node`).
#[derive(Debug, Clone, PartialEq)]
pub struct NodePlan {
    pub interface: String,
    pub link_kind: LinkKind,
    pub backend: Backend,
    pub reconcile_interval: Duration,
    pub keep_on_exit: bool,
    pub fail_open: bool,
    /// Where the claim on the node setup lives (`node::presence`).
    pub state_dir: PathBuf,
    /// The listen addresses the interface holds, and whose port-53 traffic
    /// the rules take out of conntrack.
    pub addresses: Vec<SocketAddr>,
}
