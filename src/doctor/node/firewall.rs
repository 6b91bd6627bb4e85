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

/// Both families of one iptables flavour; IPv6 is optional (a node
/// without ip6tables still has its IPv4 rules read).
fn read_iptables(backend: Backend, v4: &str, v6: &str) -> Ruleset {
    let listing = run(v4, &[]).map(|text| {
        let mut listing = parse_iptables_save(backend, &text);
        if let Ok(text6) = run(v6, &[]) {
            let six = parse_iptables_save(backend, &text6);
            listing.notrack.extend(six.notrack);
            listing.chains.extend(six.chains);
        }
        listing
    });
    Ruleset { backend, listing }
}

/// Parses `iptables-save` output: every chain's name, and the NOTRACK
/// rules of the raw table with the built-in hooks that reach them.
pub(crate) fn parse_iptables_save(backend: Backend, text: &str) -> Listing {
    let mut listing = Listing::default();
    let mut table = String::new();
    // The raw table's rules, as (chain, words).
    let mut raw: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
        } else if let Some(c) = line.strip_prefix(':') {
            let chain = c.split_whitespace().next().unwrap_or_default();
            listing.chains.insert(format!("{table} {chain}"));
        } else if let Some(rule) = line.strip_prefix("-A ")
            && table == "raw"
        {
            let words = split_words(rule);
            if let Some((chain, rest)) = words.split_first() {
                raw.push((chain.clone(), rest.to_vec()));
            }
        }
    }
    let edges: Vec<(String, String)> = raw
        .iter()
        .filter_map(|(chain, words)| Some((chain.clone(), target_of(words)?.to_string())))
        .collect();
    let roots = [("PREROUTING", Hook::Prerouting), ("OUTPUT", Hook::Output)];
    let reach = reachability(&roots.map(|(c, h)| (c.to_string(), h)), &edges);
    for (chain, words) in &raw {
        let Some(hooks) = reach.get(chain) else {
            continue;
        };
        if let Some(mut rule) = iptables_notrack(backend, words) {
            rule.chain = format!("raw {chain}");
            rule.hooks = hooks.clone();
            listing.notrack.push(rule);
        }
    }
    listing
}

/// The `-j`/`-g` target of a rule's words.
fn target_of(words: &[String]) -> Option<&str> {
    let i = words.iter().position(|w| w == "-j" || w == "-g")?;
    words.get(i + 1).map(String::as_str)
}

/// The rule if it is a NOTRACK (`-j NOTRACK`, `-j CT --notrack`).
fn iptables_notrack(backend: Backend, words: &[String]) -> Option<NotrackRule> {
    let notrack = match target_of(words)? {
        "NOTRACK" => true,
        "CT" => words.iter().any(|w| w == "--notrack"),
        _ => false,
    };
    if !notrack {
        return None;
    }
    let after = |flags: &[&str]| -> Vec<&str> {
        words
            .windows(2)
            .filter(|w| flags.contains(&w[0].as_str()))
            .map(|w| w[1].as_str())
            .collect()
    };
    let nets =
        |flag: &str| -> Vec<IpNet> { after(&[flag]).into_iter().filter_map(parse_net).collect() };
    let ports = |flags: &[&str]| -> Vec<u16> {
        after(flags)
            .into_iter()
            .flat_map(|v| {
                v.split(',')
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u16>>()
            })
            .collect()
    };
    let comment = after(&["--comment"]).first().map(|c| c.to_string());
    Some(NotrackRule {
        backend,
        chain: String::new(),
        hooks: BTreeSet::new(),
        daddr: nets("-d"),
        saddr: nets("-s"),
        dport: ports(&["--dport", "--dports"]),
        sport: ports(&["--sport", "--sports"]),
        comment,
    })
}

/// "169.254.20.10/32", "fd00::10", ... as a network.
fn parse_net(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

/// Splits an iptables-save rule into words, a `"..."` (with `\"` escapes)
/// being one word without its quotes.
pub fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let (mut in_word, mut quoted) = (false, false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            '\\' if quoted => cur.extend(chars.next()),
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
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

/// conntrack's priority: a NOTRACK in a chain of lower priority takes effect.
const PRIORITY_CONNTRACK: i32 = -200;

fn read_nft() -> Ruleset {
    let listing = match helper::get_current_ruleset_raw(helper::DEFAULT_NFT, ["list", "ruleset"]) {
        Ok(json) => parse_nft_json(&json),
        Err(NftablesError::NftExecution { inner, .. }) => Err(NotRead::NftRun(inner)),
        Err(NftablesError::NftFailed { stderr, .. }) => {
            Err(NotRead::NftFailed(stderr.trim().to_string()))
        }
        Err(e) => Err(NotRead::Nft(e)),
    };
    Ruleset {
        backend: Backend::Nftables,
        listing,
    }
}

/// `nft -j list ruleset`'s output, each object read on its own: one the
/// `nftables` crate has no type for (kube-proxy's nftables mode writes
/// such rules) is left out and counted, instead of losing the whole
/// ruleset, nodens's own NOTRACK rules with it.
pub(crate) fn parse_nft_json(json: &str) -> Result<Listing, NotRead> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| NotRead::Nft(NftablesError::NftInvalidJson(e)))?;
    let items = value
        .get("nftables")
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut objects = Vec::with_capacity(items.len());
    let mut skipped = 0;
    for item in items {
        match NfObject::deserialize(item) {
            Ok(object) => objects.push(object),
            Err(_) => skipped += 1,
        }
    }
    let mut listing = parse_nft(&Nftables {
        objects: objects.into(),
    });
    listing.skipped = skipped;
    Ok(listing)
}

fn family_name(family: NfFamily) -> &'static str {
    match family {
        NfFamily::IP => "ip",
        NfFamily::IP6 => "ip6",
        NfFamily::INet => "inet",
        NfFamily::ARP => "arp",
        NfFamily::Bridge => "bridge",
        NfFamily::NetDev => "netdev",
    }
}

/// The tables iptables-nft makes: listed under iptables-nft, not here.
fn is_xtables_table(family: NfFamily, name: &str) -> bool {
    matches!(
        family,
        NfFamily::IP | NfFamily::IP6 | NfFamily::ARP | NfFamily::Bridge
    ) && matches!(name, "raw" | "filter" | "nat" | "mangle" | "security")
}

/// The NOTRACK rules of an nft ruleset, with the raw-stage base chains
/// (prerouting/output hooks below conntrack's priority) that reach them.
pub(crate) fn parse_nft(ruleset: &Nftables) -> Listing {
    let mut listing = Listing::default();
    let key = |family: NfFamily, table: &str, chain: &str| {
        format!("{} {table} {chain}", family_name(family))
    };
    let mut roots = Vec::new();
    let mut edges = Vec::new();
    let mut rules = Vec::new();
    for object in ruleset.objects.iter() {
        let NfObject::ListObject(object) = object else {
            continue;
        };
        match object {
            NfListObject::Table(t) if !is_xtables_table(t.family, &t.name) => {
                listing
                    .tables
                    .insert(format!("{} {}", family_name(t.family), t.name));
            }
            NfListObject::Chain(c) if !is_xtables_table(c.family, &c.table) => {
                let name = key(c.family, &c.table, &c.name);
                listing.chains.insert(name.clone());
                let hook = match c.hook {
                    Some(NfHook::Prerouting) => Some(Hook::Prerouting),
                    Some(NfHook::Output) => Some(Hook::Output),
                    _ => None,
                };
                if let Some(hook) = hook
                    && c.prio.is_some_and(|p| p < PRIORITY_CONNTRACK)
                {
                    roots.push((name, hook));
                }
            }
            NfListObject::Rule(r) if !is_xtables_table(r.family, &r.table) => {
                let from = key(r.family, &r.table, &r.chain);
                for stmt in r.expr.iter() {
                    if let Statement::Jump(t) | Statement::Goto(t) = stmt {
                        edges.push((from.clone(), key(r.family, &r.table, &t.target)));
                    }
                }
                rules.push((from, r));
            }
            _ => {}
        }
    }
    let reach = reachability(&roots, &edges);
    for (chain, rule) in rules {
        let Some(hooks) = reach.get(&chain) else {
            continue;
        };
        if !rule.expr.iter().any(|s| matches!(s, Statement::Notrack)) {
            continue;
        }
        let mut found = NotrackRule {
            backend: Backend::Nftables,
            chain: chain.clone(),
            hooks: hooks.clone(),
            daddr: Vec::new(),
            saddr: Vec::new(),
            dport: Vec::new(),
            sport: Vec::new(),
            comment: rule.comment.as_ref().map(|c| c.to_string()),
        };
        for stmt in rule.expr.iter() {
            if let Statement::Match(m) = stmt
                && matches!(m.op, Operator::EQ | Operator::IN)
            {
                add_match(&mut found, &m.left, &m.right);
            }
        }
        listing.notrack.push(found);
    }
    listing
}

/// Records `left == right` when left is an address or port field.
fn add_match(rule: &mut NotrackRule, left: &Expression, right: &Expression) {
    let Expression::Named(NamedExpression::Payload(Payload::PayloadField(field))) = left else {
        return;
    };
    let values = values_of(right);
    match (field.protocol.as_ref(), field.field.as_ref()) {
        ("ip" | "ip6", "daddr") => rule.daddr.extend(values.iter().filter_map(|v| v.net())),
        ("ip" | "ip6", "saddr") => rule.saddr.extend(values.iter().filter_map(|v| v.net())),
        ("udp" | "tcp" | "th", "dport") => {
            rule.dport.extend(values.iter().filter_map(|v| v.port()))
        }
        ("udp" | "tcp" | "th", "sport") => {
            rule.sport.extend(values.iter().filter_map(|v| v.port()))
        }
        _ => {}
    }
}

enum Value {
    Net(IpNet),
    Number(u32),
}

impl Value {
    fn net(&self) -> Option<IpNet> {
        match self {
            Value::Net(n) => Some(*n),
            Value::Number(_) => None,
        }
    }
    fn port(&self) -> Option<u16> {
        match self {
            Value::Number(n) => u16::try_from(*n).ok(),
            Value::Net(_) => None,
        }
    }
}

/// The addresses and numbers of a match's right side: one value, a prefix
/// or an anonymous set of them.
fn values_of(expr: &Expression) -> Vec<Value> {
    match expr {
        Expression::String(s) => parse_net(s).map(Value::Net).into_iter().collect(),
        Expression::Number(n) => vec![Value::Number(*n)],
        Expression::Named(NamedExpression::Prefix(p)) => match p.addr.as_ref() {
            Expression::String(s) => format!("{s}/{}", p.len)
                .parse::<IpNet>()
                .ok()
                .map(Value::Net)
                .into_iter()
                .collect(),
            _ => Vec::new(),
        },
        Expression::Named(NamedExpression::Set(items)) => items
            .iter()
            .flat_map(|item| match item {
                SetItem::Element(e) => values_of(e),
                _ => Vec::new(),
            })
            .collect(),
        Expression::List(items) => items.iter().flat_map(values_of).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
#[path = "firewall_tests.rs"]
mod tests;
