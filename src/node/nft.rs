//! The native nftables backend: one table, `inet nodens`, owned by nodens
//! and replaced whole in one transaction (`nft -j -f -`), so nothing else's
//! rules are touched, no xtables lock is taken and nothing is duplicated.

use std::borrow::Cow;
use std::collections::BTreeSet;

use nftables::batch::Batch;
use nftables::expr::{Expression, NamedExpression, Payload, PayloadField};
use nftables::helper::{self, NftablesError};
use nftables::schema::{Chain, NfListObject, NfObject, Rule as NftRule, Table};
use nftables::stmt::{Match, Operator, Statement};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook};

use super::rules::{Rule, Side, Stage, Verdict};

const TABLE: &str = "nodens";
/// netfilter's raw priority: before conntrack (-200).
const PRIORITY_RAW: i32 = -300;
const PRIORITY_FILTER: i32 = 0;

fn chain_of(stage: Stage) -> (&'static str, NfHook, i32) {
    match stage {
        Stage::RawPrerouting => ("prerouting", NfHook::Prerouting, PRIORITY_RAW),
        Stage::RawOutput => ("output_raw", NfHook::Output, PRIORITY_RAW),
        Stage::FilterInput => ("input", NfHook::Input, PRIORITY_FILTER),
        Stage::FilterOutput => ("output", NfHook::Output, PRIORITY_FILTER),
    }
}

const STAGES: [Stage; 4] = [
    Stage::RawPrerouting,
    Stage::RawOutput,
    Stage::FilterInput,
    Stage::FilterOutput,
];

fn table() -> NfListObject<'static> {
    NfListObject::Table(Table {
        family: NfFamily::INet,
        name: TABLE.into(),
        ..Table::default()
    })
}

fn field(protocol: &'static str, name: &'static str) -> Expression<'static> {
    Expression::Named(NamedExpression::Payload(Payload::PayloadField(
        PayloadField {
            protocol: protocol.into(),
            field: name.into(),
        },
    )))
}

fn equals(left: Expression<'static>, right: Expression<'static>) -> Statement<'static> {
    Statement::Match(Match {
        left,
        right,
        op: Operator::EQ,
    })
}

fn statements(rule: &Rule) -> Vec<Statement<'static>> {
    let family = if rule.addr.is_ipv4() { "ip" } else { "ip6" };
    let (addr_field, port_field) = match rule.side {
        Side::Destination => ("daddr", "dport"),
        Side::Source => ("saddr", "sport"),
    };
    vec![
        equals(
            field(family, addr_field),
            Expression::String(Cow::Owned(rule.addr.ip().to_string())),
        ),
        equals(
            field(rule.l4.name(), port_field),
            Expression::Number(u32::from(rule.addr.port())),
        ),
        match rule.verdict {
            Verdict::Notrack => Statement::Notrack,
            Verdict::Accept => Statement::Accept(None),
        },
    ]
}

/// Replaces the table with one holding exactly `rules`, atomically.
pub(crate) fn apply(rules: &[Rule]) -> Result<(), NftablesError> {
    let mut batch = Batch::new();
    // Add then delete: the table is gone whether or not it was there, and
    // the whole batch is one transaction, so there is no moment without it.
    batch.add(table());
    batch.delete(table());
    batch.add(table());
    for stage in STAGES {
        let (name, hook, prio) = chain_of(stage);
        batch.add(NfListObject::Chain(Chain {
            family: NfFamily::INet,
            table: TABLE.into(),
            name: name.into(),
            _type: Some(NfChainType::Filter),
            hook: Some(hook),
            prio: Some(prio),
            policy: Some(NfChainPolicy::Accept),
            ..Chain::default()
        }));
    }
    for rule in rules {
        batch.add(NfListObject::Rule(NftRule {
            family: NfFamily::INet,
            table: TABLE.into(),
            chain: chain_of(rule.stage).0.into(),
            expr: statements(rule).into(),
            comment: Some(rule.comment().into()),
            ..NftRule::default()
        }));
    }
    apply_batch(batch)
}

/// Runs `batch` as one `nft -j -f -` transaction. The crate writes the
/// `notrack` statement as the bare string "notrack", which nft 1.0 rejects
/// ("expected object"): it is rewritten to `{"notrack": null}` here.
fn apply_batch(batch: Batch<'_>) -> Result<(), NftablesError> {
    let mut json =
        serde_json::to_value(batch.to_nftables()).map_err(NftablesError::NftInvalidJson)?;
    fix_notrack(&mut json);
    helper::apply_ruleset_raw(&json.to_string(), helper::DEFAULT_NFT, helper::DEFAULT_ARGS)
        .map(drop)
}

fn fix_notrack(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) if s == "notrack" => {
            *value = serde_json::json!({ "notrack": null });
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(fix_notrack),
        serde_json::Value::Object(map) => map.values_mut().for_each(fix_notrack),
        _ => {}
    }
}

/// The comments of the rules in the table, by chain; `None` when the table
/// does not exist.
fn present() -> Result<Option<BTreeSet<(String, String)>>, NftablesError> {
    let listed = match helper::get_current_ruleset_with_args(
        helper::DEFAULT_NFT,
        ["list", "table", "inet", TABLE],
    ) {
        Ok(listed) => listed,
        // nft fails when the table does not exist.
        Err(NftablesError::NftFailed { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut found = BTreeSet::new();
    for object in listed.objects.iter() {
        if let NfObject::ListObject(NfListObject::Rule(rule)) = object {
            let comment = rule.comment.as_deref().unwrap_or_default().to_string();
            found.insert((rule.chain.to_string(), comment));
        }
    }
    Ok(Some(found))
}

/// Whether the table holds exactly `rules` (and nothing else).
pub(crate) fn matches(rules: &[Rule]) -> Result<bool, NftablesError> {
    let Some(found) = present()? else {
        return Ok(false);
    };
    let wanted: BTreeSet<(String, String)> = rules
        .iter()
        .map(|r| (chain_of(r.stage).0.to_string(), r.comment()))
        .collect();
    Ok(found == wanted && wanted.len() == rules.len())
}

/// Whether the table exists at all.
pub(crate) fn exists() -> Result<bool, NftablesError> {
    Ok(present()?.is_some())
}

/// Deletes the table (and so every nodens rule); nothing if it is not there.
pub(crate) fn remove() -> Result<(), NftablesError> {
    let mut batch = Batch::new();
    batch.add(table());
    batch.delete(table());
    apply_batch(batch)
}

/// Whether kube-proxy runs in nftables mode here: its tables (`ip
/// kube-proxy`, `ip6 kube-proxy`) exist. False when `nft` cannot list.
pub(crate) fn kube_proxy_tables() -> bool {
    let Ok(listed) = helper::get_current_ruleset_with_args(helper::DEFAULT_NFT, ["list", "tables"])
    else {
        return false;
    };
    listed.objects.iter().any(|o| {
        matches!(o, NfObject::ListObject(NfListObject::Table(t))
            if t.name == "kube-proxy" && matches!(t.family, NfFamily::IP | NfFamily::IP6))
    })
}

/// Whether `nft` can be run here (it lists the ruleset).
pub(crate) fn available() -> bool {
    helper::get_current_ruleset_with_args(helper::DEFAULT_NFT, ["list", "tables"]).is_ok()
}
