//! On the node: the interface that holds the listen addresses (169.254.20.10,
//! the cluster DNS Service IP) and the rules that keep their DNS traffic out
//! of conntrack, set up at start, repaired while running, removed on exit
//! (docs/node.md).
//!
//! Configuration: `[node]` (`config.rs`). Off the request path: set up by
//! `server::start` before the listeners, repaired from the server's main
//! loop; `supervisor.rs` is the fail-open parent process.

pub(crate) mod config;
pub(crate) mod guard;
pub(crate) mod iptables;
pub(crate) mod link;
pub(crate) mod metrics;
pub(crate) mod nft;
pub(crate) mod presence;
mod probe;
pub(crate) mod rules;
pub(crate) mod supervisor;

pub use guard::guard;
pub use supervisor::supervise;

use std::sync::Arc;

use config::{Backend, NodePlan};
use metrics::{BackendLabels, NodeMetrics, WhatLabels};
use rules::Rule;

/// Whether a nodens serves the node setup of `plan` now: its interface
/// exists and its first address answers a probe (blocking, at most 250 ms).
/// Without the interface an answer is not nodens's: the Service IP is then
/// answered by the cluster DNS, through kube-proxy's DNAT.
pub fn serving(plan: &NodePlan) -> bool {
    std::path::Path::new("/sys/class/net")
        .join(&plan.interface)
        .exists()
        && probe::answers(plan.addresses[0])
}

/// Why the node could not be set up, checked or cleaned.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("netlink: {0}")]
    Netlink(#[from] rtnetlink::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("nftables: {0}")]
    Nftables(#[from] nftables::helper::NftablesError),
    #[error("iptables: {0}")]
    Iptables(String),
    #[error("neither nft nor iptables can be run here")]
    NoFirewall,
}

fn iptables_error(e: Box<dyn std::error::Error>) -> NodeError {
    NodeError::Iptables(e.to_string())
}

/// The firewall interface that carries the rules.
pub enum Firewall {
    Nftables,
    Iptables(iptables::Iptables),
}

impl Firewall {
    /// The backend `backend` asks for; `auto` follows kube-proxy.
    pub fn choose(backend: Backend) -> Result<Firewall, NodeError> {
        let ipt = || iptables::Iptables::detect().map(Firewall::Iptables);
        match backend {
            Backend::Nftables => Ok(Firewall::Nftables),
            Backend::Iptables => ipt().ok_or(NodeError::NoFirewall),
            Backend::Auto => Self::follow_kube_proxy(),
        }
    }

    /// `auto`: the firewall kube-proxy writes its own rules with, so that
    /// the one listing an operator reads (`nft list ruleset`, or
    /// `iptables-save` in kube-proxy's flavour) shows both: nftables when
    /// kube-proxy's `kube-proxy` table exists (nftables mode), iptables when
    /// an iptables flavour holds `KUBE-SERVICES` (iptables and IPVS modes),
    /// and with no trace of kube-proxy (not started yet, or replaced by
    /// another datapath) nftables when `nft` works.
    fn follow_kube_proxy() -> Result<Firewall, NodeError> {
        let nft = nft::available();
        if nft && nft::kube_proxy_tables() {
            return Ok(Firewall::Nftables);
        }
        match iptables::Iptables::detect() {
            Some(ipt) if ipt.kube_proxy => Ok(Firewall::Iptables(ipt)),
            _ if nft => Ok(Firewall::Nftables),
            Some(ipt) => Ok(Firewall::Iptables(ipt)),
            None => Err(NodeError::NoFirewall),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Firewall::Nftables => "nftables",
            Firewall::Iptables(_) => "iptables",
        }
    }

    pub fn apply(&self, rules: &[Rule]) -> Result<(), NodeError> {
        match self {
            Firewall::Nftables => Ok(nft::apply(rules)?),
            Firewall::Iptables(ipt) => ipt.apply(rules).map_err(iptables_error),
        }
    }

    pub fn matches(&self, rules: &[Rule]) -> Result<bool, NodeError> {
        match self {
            Firewall::Nftables => Ok(nft::matches(rules)?),
            Firewall::Iptables(ipt) => ipt.matches(rules).map_err(iptables_error),
        }
    }

    /// Removes nodens's rules from the other backend, left there by a run
    /// configured with it (two rule sets would otherwise sit side by side).
    pub fn remove_others(&self) -> Result<(), NodeError> {
        match self {
            Firewall::Nftables => {
                if let Some(ipt) = iptables::Iptables::detect()
                    && ipt.exists().map_err(iptables_error)?
                {
                    ipt.remove().map_err(iptables_error)?;
                }
            }
            Firewall::Iptables(_) => {
                if nft::available() && nft::exists()? {
                    nft::remove()?;
                }
            }
        }
        Ok(())
    }

    pub fn remove(&self) -> Result<(), NodeError> {
        match self {
            Firewall::Nftables => Ok(nft::remove()?),
            Firewall::Iptables(ipt) => ipt.remove().map_err(iptables_error),
        }
    }
}

/// The node setup of a running server. Its work (netlink requests, `nft`
/// and `iptables` runs) is done on the main thread, the one that keeps
/// `CAP_NET_ADMIN` when node setup is on.
pub struct Node {
    plan: NodePlan,
    rules: Vec<Rule>,
    firewall: Firewall,
    metrics: Arc<NodeMetrics>,
}

impl Node {
    /// Creates the interface and writes the rules; call before the
    /// listeners bind (their addresses must exist).
    pub async fn set_up(plan: NodePlan, metrics: Arc<NodeMetrics>) -> Result<Node, NodeError> {
        let firewall = Firewall::choose(plan.backend)?;
        let rules = rules::rules_for(&plan.addresses);
        let wanted = &plan;
        let steps = link::with_netlink(|handle| async move {
            link::ensure(
                &handle,
                &wanted.interface,
                wanted.link_kind,
                &wanted.addresses,
            )
            .await
        })
        .await?;
        for step in steps {
            tracing::info!(interface = %plan.interface, "node: {step}");
        }
        firewall.remove_others()?;
        // Rules left in place (a handover, a killed predecessor) are kept as
        // they are: rewriting iptables chains opens a moment without them.
        if !firewall.matches(&rules)? {
            firewall.apply(&rules)?;
        }
        // The repair counters exist from the start, at 0.
        for what in ["interface", "rules"] {
            metrics.repairs.get(&WhatLabels { what });
        }
        tracing::info!(
            interface = %plan.interface,
            backend = firewall.name(),
            rules = rules.len(),
            "node: interface and rules in place"
        );
        let node = Node {
            plan,
            rules,
            firewall,
            metrics,
        };
        node.metrics.interface_present.set(1);
        node.rules_gauge().set(1);
        Ok(node)
    }

    fn rules_gauge(&self) -> prometheus::IntGauge {
        self.metrics.rules_present.get(&BackendLabels {
            backend: self.firewall.name(),
        })
    }

    /// Puts back whatever is missing: the interface, its addresses, the rules.
    pub async fn reconcile(&self) -> Result<(), NodeError> {
        let plan = &self.plan;
        let steps = link::with_netlink(|handle| async move {
            link::ensure(&handle, &plan.interface, plan.link_kind, &plan.addresses).await
        })
        .await;
        match steps {
            Ok(steps) if steps.is_empty() => self.metrics.interface_present.set(1),
            Ok(steps) => {
                self.metrics.interface_present.set(1);
                self.repaired("interface", &steps.join(", "));
            }
            Err(e) => {
                self.metrics.interface_present.set(0);
                return Err(e);
            }
        }
        if self.firewall.matches(&self.rules)? {
            self.rules_gauge().set(1);
            return Ok(());
        }
        self.rules_gauge().set(0);
        self.firewall.apply(&self.rules)?;
        self.rules_gauge().set(1);
        self.repaired("rules", self.firewall.name());
        Ok(())
    }

    fn repaired(&self, what: &'static str, detail: &str) {
        self.metrics.repairs.get(&WhatLabels { what }).inc();
        tracing::warn!(
            interface = %self.plan.interface,
            "node: {what} missing or changed by someone else: restored ({detail})"
        );
    }

    /// Removes the rules and the interface.
    pub async fn tear_down(&self) -> Result<(), NodeError> {
        self.firewall.remove()?;
        let name = &self.plan.interface;
        link::with_netlink(|handle| async move { link::remove(&handle, name).await }).await?;
        self.metrics.interface_present.set(0);
        self.rules_gauge().set(0);
        tracing::info!(interface = %self.plan.interface, "node: interface and rules removed");
        Ok(())
    }

    pub fn keep_on_exit(&self) -> bool {
        self.plan.keep_on_exit
    }

    /// How often [`Node::reconcile`] should run.
    pub fn reconcile_interval(&self) -> std::time::Duration {
        self.plan.reconcile_interval
    }

    pub fn plan(&self) -> &NodePlan {
        &self.plan
    }
}

/// Removes an interface called `interface` and nodens's rules from every
/// backend found here, whatever the configuration says now: for
/// `nodens node teardown` after a crash. Returns what was removed.
pub async fn teardown_everything(interface: &str) -> Result<Vec<String>, NodeError> {
    let mut removed = Vec::new();
    if nft::available() && nft::exists()? {
        nft::remove()?;
        removed.push("nftables table inet nodens".to_string());
    }
    if let Some(ipt) = iptables::Iptables::detect()
        && ipt.exists().map_err(iptables_error)?
    {
        ipt.remove().map_err(iptables_error)?;
        removed.push(format!("iptables ({}) chains NODENS-*", ipt.flavour));
    }
    if link::with_netlink(|handle| async move { link::remove(&handle, interface).await }).await? {
        removed.push(format!("link {interface}"));
    }
    Ok(removed)
}

/// Removes the interface and the rules so the cluster DNS takes the
/// traffic: what the supervisor and the guard do when the server is gone.
/// Not while another nodens holds the node setup (a server starting) or
/// still answers on its address (a successor serving the sockets it took
/// over, before it could claim): the claim is held for the time of the
/// removal, so a starting server waits for it instead of interleaving. A
/// holder of the claim that nothing answers for, for [`HOLDER_SILENCE`],
/// does not stop it: whatever holds the claim then is not serving the pods.
///
/// [`HOLDER_SILENCE`]: presence::HOLDER_SILENCE
pub async fn withdraw(plan: &NodePlan, who: &str) {
    let interface = plan.interface.as_str();
    let dir = plan.state_dir.as_path();
    let target = plan.addresses[0];
    let answers = move || async move {
        tokio::task::spawn_blocking(move || probe::answers(target))
            .await
            .unwrap_or(false)
    };
    let claim = match presence::Presence::try_claim(dir, interface) {
        Ok(Some(claim)) => Some(claim),
        Ok(None) => {
            // Someone holds the claim: a server starting or serving is
            // heard on the address within a moment; wait for that, or for
            // the claim to be let go, for HOLDER_SILENCE at most.
            let since = std::time::Instant::now();
            loop {
                if answers().await {
                    tracing::info!(
                        interface,
                        "{who}: another nodens holds the node setup and answers; leaving it in place"
                    );
                    return;
                }
                match presence::Presence::try_claim(dir, interface) {
                    Ok(Some(claim)) => break Some(claim),
                    Ok(None) if since.elapsed() < presence::HOLDER_SILENCE => {
                        tokio::time::sleep(probe::PROBE_EVERY).await;
                    }
                    Ok(None) => {
                        tracing::error!(
                            interface,
                            holder = ?presence::Presence::holder(dir, interface),
                            "{who}: the node setup's claim is held, but nothing has answered on its address for {:?}: withdrawing anyway",
                            presence::HOLDER_SILENCE
                        );
                        break None;
                    }
                    Err(e) => {
                        tracing::warn!(
                            "{who}: cannot tell who holds the node setup ({e}); withdrawing"
                        );
                        break None;
                    }
                }
            }
        }
        Err(e) => {
            tracing::warn!("{who}: cannot tell who holds the node setup ({e}); withdrawing");
            None
        }
    };
    if answers().await {
        tracing::info!(%target, "{who}: a nodens still answers; leaving the node setup in place");
        return;
    }
    match teardown_everything(interface).await {
        Ok(removed) => tracing::warn!(
            removed = ?removed,
            "{who}: withdrew the node setup: queries to its addresses now go where they would without nodens"
        ),
        Err(e) => tracing::error!("{who}: cannot withdraw the node setup: {e}"),
    }
    drop(claim);
}

/// What `nodens node status` reports.
pub struct Status {
    pub link: link::LinkState,
    pub backend: &'static str,
    pub rules_in_place: bool,
    pub missing_addresses: Vec<std::net::IpAddr>,
}

impl Status {
    pub fn complete(&self) -> bool {
        self.link.exists && self.link.up && self.missing_addresses.is_empty() && self.rules_in_place
    }
}

/// The state of the node against `plan`.
pub async fn status(plan: &NodePlan) -> Result<Status, NodeError> {
    let firewall = Firewall::choose(plan.backend)?;
    let name = &plan.interface;
    let link = link::with_netlink(|handle| async move { link::state(&handle, name).await }).await?;
    let missing_addresses = plan
        .addresses
        .iter()
        .map(|a| a.ip())
        .filter(|ip| !link.addresses.contains(ip))
        .collect();
    Ok(Status {
        rules_in_place: firewall.matches(&rules::rules_for(&plan.addresses))?,
        backend: firewall.name(),
        link,
        missing_addresses,
    })
}
