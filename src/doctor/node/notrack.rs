//! NOTRACK rules for the node cache's addresses: without them, every query
//! to the cache goes through conntrack, and the UDP insert race the cache
//! is there to avoid is still on the path.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use super::firewall::{Backend, Hook, NotrackRule, Ruleset};
use super::interfaces::{self, Link};
use super::sockets::Listener;
use super::{CacheAddresses, Out};
use crate::doctor::{Finding, Severity};

pub(crate) struct Context<'a> {
    pub(crate) cache: &'a CacheAddresses,
    pub(crate) rulesets: &'a [Ruleset],
    pub(crate) sockets: Option<&'a [Listener]>,
    pub(crate) links: Option<&'a [Link]>,
    /// The DNS addresses the given nodens configuration listens on.
    pub(crate) configured: &'a [SocketAddr],
    /// conntrack's insert_failed (0 when unknown).
    pub(crate) insert_failed: u64,
}

/// Who wrote a rule, as far as its shape and comment tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Origin {
    Nodens,
    NodeLocalDns,
    Other,
}

impl Origin {
    fn of(rule: &NotrackRule) -> Origin {
        let comment = rule.comment.as_deref().unwrap_or_default();
        if comment.starts_with("nodens")
            || rule.chain.contains("NODENS-")
            || rule.chain.starts_with("inet nodens ")
        {
            Origin::Nodens
        } else if comment.contains("NodeLocal DNS")
            || rule.dport.contains(&53)
            || rule.sport.contains(&53)
        {
            Origin::NodeLocalDns
        } else {
            Origin::Other
        }
    }

    fn name(self) -> &'static str {
        match self {
            Origin::Nodens => "nodens",
            Origin::NodeLocalDns => "node-local-dns",
            Origin::Other => "other",
        }
    }
}

/// The NOTRACK rules found for each node cache address.
#[derive(Debug, Default)]
pub(crate) struct Notrack {
    /// Whether at least one backend was read (else nothing is known).
    pub(crate) checked: bool,
    /// Rules for queries to the address, reached from prerouting.
    pub(crate) queries: BTreeMap<SocketAddr, Vec<NotrackRule>>,
    /// Rules for answers from the address, reached from output.
    pub(crate) answers: BTreeMap<SocketAddr, Vec<NotrackRule>>,
    /// What says a node cache is meant to serve each address (empty: nothing).
    pub(crate) presence: BTreeMap<SocketAddr, Vec<String>>,
}

impl Notrack {
    pub(crate) fn has_rule_for(&self, addr: SocketAddr) -> bool {
        self.queries.get(&addr).is_some_and(|r| !r.is_empty())
    }

    /// The backends holding a node cache's (nodens's or node-local-dns's)
    /// NOTRACK rules for these addresses.
    /// A finding's evidence of where the node cache's NOTRACK rules are,
    /// one line per backend.
    pub(crate) fn cache_evidence(cache: &BTreeMap<Backend, Vec<String>>) -> Vec<String> {
        cache
            .iter()
            .map(|(b, chains)| format!("{}: NOTRACK rules in {}", b.name(), chains.join(", ")))
            .collect()
    }

    pub(crate) fn cache_backends(&self) -> BTreeMap<Backend, Vec<String>> {
        let mut found: BTreeMap<Backend, Vec<String>> = BTreeMap::new();
        for rule in self.queries.values().chain(self.answers.values()).flatten() {
            let origin = Origin::of(rule);
            if origin != Origin::Other {
                let what = format!("{} ({})", rule.chain, origin.name());
                let list = found.entry(rule.backend).or_default();
                if !list.contains(&what) {
                    list.push(what);
                }
            }
        }
        found
    }
}

fn contains(nets: &[ipnet::IpNet], ip: IpAddr) -> bool {
    nets.is_empty() || nets.iter().any(|n| n.contains(&ip))
}

fn has_port(ports: &[u16], port: u16) -> bool {
    ports.is_empty() || ports.contains(&port)
}

/// Whether `rule` takes queries to `addr` out of conntrack.
fn covers_queries(rule: &NotrackRule, addr: SocketAddr) -> bool {
    rule.hooks.contains(&Hook::Prerouting)
        && contains(&rule.daddr, addr.ip())
        && has_port(&rule.dport, addr.port())
}

/// Whether `rule` takes answers from `addr` out of conntrack.
fn covers_answers(rule: &NotrackRule, addr: SocketAddr) -> bool {
    rule.hooks.contains(&Hook::Output)
        && contains(&rule.saddr, addr.ip())
        && has_port(&rule.sport, addr.port())
}

/// Finds the rules, adds the facts, and `notrack-missing` where a node
/// cache is meant to be but its address has no NOTRACK rule.
pub(crate) fn check(cx: &Context, out: &mut Out) -> Notrack {
    let mut found = Notrack::default();
    let rules: Vec<&NotrackRule> = cx
        .rulesets
        .iter()
        .filter_map(Ruleset::listing)
        .flat_map(|l| l.notrack.iter())
        .collect();
    for &addr in &cx.cache.addrs {
        found.presence.insert(addr, presence(cx, addr));
    }
    found.checked = cx.rulesets.iter().any(|r| r.listing().is_some());
    if !found.checked {
        out.fact("NOTRACK rules: no firewall backend could be read; not checked");
        return found;
    }
    for &addr in &cx.cache.addrs {
        let queries: Vec<NotrackRule> = rules
            .iter()
            .filter(|r| covers_queries(r, addr))
            .map(|r| (*r).clone())
            .collect();
        let answers: Vec<NotrackRule> = rules
            .iter()
            .filter(|r| covers_answers(r, addr))
            .map(|r| (*r).clone())
            .collect();
        out.fact(format!(
            "NOTRACK for queries to {addr}: {}",
            summary(&queries)
        ));
        out.fact(format!(
            "NOTRACK for answers from {addr}: {}",
            summary(&answers)
        ));
        let presence = &found.presence[&addr];
        if queries.is_empty() && !presence.is_empty() {
            out.finding(missing(cx, addr, presence));
        }
        found.queries.insert(addr, queries);
        found.answers.insert(addr, answers);
    }
    found
}

/// "nftables inet nodens prerouting (nodens, 2 rules)", grouped.
fn summary(rules: &[NotrackRule]) -> String {
    if rules.is_empty() {
        return "none".into();
    }
    let mut groups: BTreeMap<(Backend, &str, Origin), usize> = BTreeMap::new();
    for r in rules {
        *groups
            .entry((r.backend, r.chain.as_str(), Origin::of(r)))
            .or_default() += 1;
    }
    groups
        .iter()
        .map(|((backend, chain, origin), n)| {
            let s = if *n == 1 { "" } else { "s" };
            format!(
                "{} {chain} ({}, {n} rule{s})",
                backend.name(),
                origin.name()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What says a node cache is meant to serve `addr` here.
fn presence(cx: &Context, addr: SocketAddr) -> Vec<String> {
    let mut seen = Vec::new();
    if let Some(name) = cx.links.and_then(|l| interfaces::holder(l, addr.ip())) {
        seen.push(format!("interface {name} holds {}", addr.ip()));
    }
    let listening: Vec<String> = cx
        .sockets
        .unwrap_or_default()
        .iter()
        .filter(|l| l.addr == addr)
        .map(|l| l.describe())
        .collect();
    if !listening.is_empty() {
        seen.push(format!("listening: {}", listening.join("; ")));
    }
    if cx.configured.contains(&addr) {
        seen.push(format!("the nodens configuration listens on {addr}"));
    }
    seen
}

fn missing(cx: &Context, addr: SocketAddr, presence: &[String]) -> Finding {
    let severity = if cx.insert_failed > 0 {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let read: Vec<&str> = cx
        .rulesets
        .iter()
        .filter(|r| r.listing().is_some())
        .map(|r| r.backend.name())
        .collect();
    let mut f = Finding::new(
        "notrack-missing",
        severity,
        format!(
            "no NOTRACK rule for the node cache's address {addr}: its queries go through conntrack"
        ),
    );
    for line in presence {
        f = f.evidence(line);
    }
    f = f.evidence(format!(
        "no raw-table NOTRACK rule for destination {addr} reached from prerouting in {}",
        read.join(", ")
    ));
    for r in cx.rulesets.iter().filter(|r| r.listing().is_none()) {
        if let Err(e) = &r.listing {
            f = f.evidence(format!("{} not read: {e}", r.backend.name()));
        }
    }
    if cx.insert_failed > 0 {
        f = f.evidence(format!(
            "conntrack insert_failed = {} on this node",
            cx.insert_failed
        ));
    }
    let ip = addr.ip();
    let port = addr.port();
    f.fix(format!(
        "With nodens: [node] setup = true (it writes and repairs these rules).\n\
         By hand, what node-local-dns writes (and the same for tcp, and ip6tables for IPv6):\n\
         \x20 iptables -t raw -A PREROUTING -d {ip} -p udp --dport {port} -j NOTRACK\n\
         \x20 iptables -t raw -A OUTPUT -s {ip} -p udp --sport {port} -j NOTRACK\n\
         with the iptables flavour (legacy or nft) that kube-proxy uses."
    ))
}
