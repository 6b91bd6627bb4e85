//! The node's firewall rules as the checks need them, from each backend's
//! own dump: `iptables-legacy-save`/`ip6tables-legacy-save`,
//! `iptables-nft-save`/`ip6tables-nft-save`, and `nft -j list ruleset`
//! (parsed by the `nftables` crate). The kernel evaluates all three; a tool
//! that speaks one of them sees only its own rules.
//!
//! Kept per rule: whether it is a NOTRACK, the addresses and ports it
//! matches, and from which raw-stage hooks (before conntrack) it is reached
//! through jumps. Kept per backend: chain and table names (kube-proxy's).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Command;

use ipnet::IpNet;
use nftables::expr::{Expression, NamedExpression, Payload, SetItem};
use nftables::helper::{self, NftablesError};
use nftables::schema::{NfListObject, NfObject, Nftables};
use nftables::stmt::{Operator, Statement};
use nftables::types::{NfFamily, NfHook};
use serde::Deserialize;

mod iptables;
mod nft;

#[cfg(test)]
use iptables::parse_iptables_save;
use iptables::read_iptables;
pub use iptables::split_words;
use nft::read_nft;
#[cfg(test)]
use nft::{parse_nft, parse_nft_json};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Backend {
    IptablesLegacy,
    IptablesNft,
    Nftables,
}

impl Backend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::IptablesLegacy => "iptables-legacy",
            Backend::IptablesNft => "iptables-nft",
            Backend::Nftables => "nftables",
        }
    }
}

/// A hook before conntrack where a NOTRACK takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Hook {
    Prerouting,
    Output,
}

/// A NOTRACK rule, reached from at least one raw-stage hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotrackRule {
    pub(crate) backend: Backend,
    /// "raw NODENS-PREROUTING", "inet nodens prerouting".
    pub(crate) chain: String,
    pub(crate) hooks: BTreeSet<Hook>,
    pub(crate) daddr: Vec<IpNet>,
    pub(crate) saddr: Vec<IpNet>,
    pub(crate) dport: Vec<u16>,
    pub(crate) sport: Vec<u16>,
    pub(crate) comment: Option<String>,
}

/// What one backend holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listing {
    pub(crate) notrack: Vec<NotrackRule>,
    /// "table chain" (iptables) or "family table chain" (nft), every chain.
    pub(crate) chains: BTreeSet<String>,
    /// "family name" (nft only).
    pub(crate) tables: BTreeSet<String>,
    /// Objects of the nft listing that could not be read, and so were
    /// left out (rules with expressions the `nftables` crate has no type
    /// for, as kube-proxy's nftables mode writes).
    pub(crate) skipped: usize,
}

/// One backend, read or not (and why not).
#[derive(Debug)]
pub(crate) struct Ruleset {
    pub(crate) backend: Backend,
    pub(crate) listing: Result<Listing, NotRead>,
}

/// Why a backend's rules were not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotRead {
    #[error("{program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program}: {status}: {stderr}")]
    Failed {
        program: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("nft: {0}")]
    NftRun(std::io::Error),
    #[error("nft: {0}")]
    NftFailed(String),
    #[error(transparent)]
    Nft(NftablesError),
}

impl Ruleset {
    pub(crate) fn listing(&self) -> Option<&Listing> {
        self.listing.as_ref().ok()
    }
}

/// Reads every backend this node has a tool for.
pub(crate) fn read_all() -> Vec<Ruleset> {
    vec![
        read_iptables(
            Backend::IptablesLegacy,
            "iptables-legacy-save",
            "ip6tables-legacy-save",
        ),
        read_iptables(
            Backend::IptablesNft,
            "iptables-nft-save",
            "ip6tables-nft-save",
        ),
        read_nft(),
    ]
}

/// One fact line per backend: what was read.
pub(crate) fn describe(rulesets: &[Ruleset]) -> Vec<String> {
    rulesets
        .iter()
        .map(|r| match &r.listing {
            Ok(l) if l.skipped > 0 => format!(
                "{}: {} chains, {} NOTRACK rules before conntrack ({} objects not understood, left out)",
                r.backend.name(),
                l.chains.len(),
                l.notrack.len(),
                l.skipped
            ),
            Ok(l) => format!(
                "{}: {} chains, {} NOTRACK rules before conntrack",
                r.backend.name(),
                l.chains.len(),
                l.notrack.len()
            ),
            Err(e) => format!("{}: not read ({e})", r.backend.name()),
        })
        .collect()
}

// ---- iptables ----------------------------------------------------------------

fn run(program: &str, args: &[&str]) -> Result<String, NotRead> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| NotRead::Spawn {
            program: program.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(NotRead::Failed {
            program: program.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// "169.254.20.10/32", "fd00::10", ... as a network.
fn parse_net(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

/// For each chain reachable from a root (through jumps), the roots'
/// hooks that reach it.
fn reachability(
    roots: &[(String, Hook)],
    edges: &[(String, String)],
) -> BTreeMap<String, BTreeSet<Hook>> {
    let mut reach: BTreeMap<String, BTreeSet<Hook>> = BTreeMap::new();
    for (root, hook) in roots {
        let mut todo = vec![root.clone()];
        while let Some(chain) = todo.pop() {
            if !reach.entry(chain.clone()).or_default().insert(*hook) {
                continue;
            }
            let next = edges.iter().filter(|(from, _)| *from == chain);
            todo.extend(next.map(|(_, to)| to.clone()));
        }
    }
    reach
}

// ---- nftables ----------------------------------------------------------------

#[cfg(test)]
#[path = "firewall_tests.rs"]
mod tests;
