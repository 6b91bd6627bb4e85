//! `dns64`: `[zone.dns64]` with its prefix and `translate_all`. CoreDNS
//! leaves clients that ask over IPv4 alone unless `allow_ipv4` is set;
//! nodens caches one answer per question whoever asks, so it synthesizes
//! for every client, and a `dns64` without `allow_ipv4` is listed.

use std::fmt::Write as _;

use super::super::corefile::Directive;
use super::Plan;
use super::block_out::{BlockOut, describe};

pub(super) fn dns64(d: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = d.line();
    let mut prefix = d.args.first().map(|t| t.text.clone());
    let (mut translate_all, mut allow_ipv4) = (false, false);
    for option in d.block.iter().flatten() {
        match (option.name.text.as_str(), option.args.first()) {
            ("prefix", Some(p)) => prefix = Some(p.text.clone()),
            ("translate_all", None) => translate_all = true,
            ("allow_ipv4", None) => allow_ipv4 = true,
            _ => {
                plan.untranslated.add(
                    option.line(),
                    format!(
                        "dns64 option {}: unknown; dns64 not translated",
                        describe(option)
                    ),
                );
                return;
            }
        }
    }
    if let Some(p) = &prefix {
        let ok = p.parse::<ipnet::Ipv6Net>().is_ok_and(|n| {
            let len = n.prefix_len();
            len % 8 == 0 && (32..=96).contains(&len)
        });
        if !ok {
            plan.untranslated.add(
                line,
                format!("dns64 prefix `{p}`: not an IPv6 prefix of 32 to 96 bits; not translated"),
            );
            return;
        }
    }
    if !allow_ipv4 {
        plan.notes.add(
            line,
            "dns64 without allow_ipv4: CoreDNS synthesizes only for clients asking over IPv6; nodens synthesizes for every client of the zone (its cache holds one answer per question): the same answers where the block's clients are IPv6 (an IPv6-only cluster)",
        );
    }
    let mut toml = String::new();
    if let Some(p) = prefix {
        let _ = writeln!(toml, "prefix = \"{p}\"");
    }
    if translate_all {
        let _ = writeln!(toml, "translate_all = true");
    }
    out.rules.dns64 = Some((toml, line));
}
