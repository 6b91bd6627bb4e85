//! `policy-conntrack`: a network policy engine that lets answers back in
//! by their conntrack state, next to a node cache's NOTRACK rules
//! (kubernetes/kubernetes#98758). Two things break for a pod under a
//! policy:
//!
//! - its answers: NOTRACK'd, they are not `ESTABLISHED`, so an ingress
//!   policy that denies what it did not ask for drops them;
//! - its queries: with no DNAT they keep the cluster DNS Service IP (or
//!   169.254.20.10) as their destination and reach a host-network process,
//!   so an egress rule allowing DNS to the CoreDNS pods by selector no
//!   longer matches.
//!
//! Both are fixed by rules naming the cache's addresses, which the
//! finding spells out.

use std::collections::BTreeMap;

use super::firewall::Ruleset;
use super::notrack::Notrack;
use super::{CacheAddresses, Out, join};
use crate::doctor::{Finding, Severity};

pub(crate) struct Context<'a> {
    pub(crate) cache: &'a CacheAddresses,
    pub(crate) rulesets: &'a [Ruleset],
    pub(crate) notrack: &'a Notrack,
}

/// A policy engine, known by the chains or tables it writes.
struct Engine {
    name: &'static str,
    /// Prefixes of its iptables chains (and nft chains).
    chain_prefixes: &'static [&'static str],
    /// Its own nftables tables ("family name").
    tables: &'static [&'static str],
}

const ENGINES: [Engine; 4] = [
    Engine {
        name: "Calico",
        chain_prefixes: &["cali-"],
        tables: &["ip calico", "ip6 calico"],
    },
    Engine {
        name: "kube-router",
        chain_prefixes: &["KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-"],
        tables: &[],
    },
    Engine {
        name: "Antrea",
        chain_prefixes: &["ANTREA-"],
        tables: &[],
    },
    Engine {
        name: "Weave Net",
        chain_prefixes: &["WEAVE-NPC"],
        tables: &[],
    },
];

/// Engine name -> what shows it is there.
fn engines_found(rulesets: &[Ruleset]) -> BTreeMap<&'static str, Vec<String>> {
    let mut found: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for ruleset in rulesets {
        let Some(listing) = ruleset.listing() else {
            continue;
        };
        for engine in &ENGINES {
            let chains = listing
                .chains
                .iter()
                .filter_map(|c| c.split(' ').next_back())
                .filter(|c| engine.chain_prefixes.iter().any(|p| c.starts_with(p)))
                .count();
            if chains > 0 {
                found.entry(engine.name).or_default().push(format!(
                    "{}: {chains} {} chains",
                    ruleset.backend.name(),
                    engine.chain_prefixes.join("/")
                ));
            }
            for table in engine.tables {
                if listing.tables.contains(*table) {
                    found
                        .entry(engine.name)
                        .or_default()
                        .push(format!("{}: table {table}", ruleset.backend.name()));
                }
            }
        }
    }
    found
}

pub(crate) fn check(cx: &Context, out: &mut Out) {
    let engines = engines_found(cx.rulesets);
    if engines.is_empty() {
        return;
    }
    let names: Vec<&str> = engines.keys().copied().collect();
    out.fact(format!("network policy engine: {}", join(&names)));
    let cache = cx.notrack.cache_backends();
    if cache.is_empty() {
        return;
    }
    let mut f = Finding::new(
        "policy-conntrack",
        Severity::Warning,
        format!(
            "{} filters by conntrack state and the node cache's DNS is NOTRACK'd: pods under a network policy may lose their lookups",
            join(&names)
        ),
    );
    for (engine, lines) in &engines {
        for line in lines {
            f = f.evidence(format!("{engine}: {line}"));
        }
    }
    for line in Notrack::cache_evidence(&cache) {
        f = f.evidence(line);
    }
    let blocks: String = cx
        .cache
        .ips()
        .iter()
        .map(|ip| {
            let prefix = if ip.is_ipv4() { 32 } else { 128 };
            format!("\n      - ipBlock: {{cidr: {ip}/{prefix}}}")
        })
        .collect();
    out.finding(f.fix(format!(
        "A NOTRACK'd answer is not ESTABLISHED, so a policy denying a pod's ingress drops it, \
         and with no DNAT a query keeps the cache's address as its destination, so egress \
         allowed to the CoreDNS pods by selector does not match it. In the policies of pods \
         that have egress or ingress rules, allow the cache's addresses both ways:\n\
         \x20 egress:\n\
         \x20   - to:{blocks}\n\
         \x20     ports: [{{protocol: UDP, port: 53}}, {{protocol: TCP, port: 53}}]\n\
         \x20 ingress:\n\
         \x20   - from:{blocks}\n\
         (docs/deploy.md#network-policies)."
    )));
}
