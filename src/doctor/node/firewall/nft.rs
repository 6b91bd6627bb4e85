//! The nftables side: `nft -j list ruleset`, parsed by the `nftables`
//! crate, its NOTRACK statements and the base chains that reach them.

use super::*;

/// conntrack's priority: a NOTRACK in a chain of lower priority takes effect.
const PRIORITY_CONNTRACK: i32 = -200;

pub(super) fn read_nft() -> Ruleset {
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
