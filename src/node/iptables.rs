//! The iptables backend, for nodes whose other agents speak iptables:
//! `iptables`/`ip6tables` in the flavour kube-proxy uses (legacy or
//! nf_tables, detected as kube-proxy's wrapper does: whichever holds more
//! `KUBE-` rules). nodens's rules live in chains of its own
//! (`NODENS-PREROUTING`, `NODENS-OUTPUT` in raw; `NODENS-INPUT`,
//! `NODENS-OUTPUT` in filter), each reached by exactly one jump, so a
//! repair rewrites only them and a removal leaves nothing behind.

use std::collections::BTreeSet;
use std::error::Error;
use std::process::Command;

use iptables::IPTables;

use super::rules::{Rule, Side, Stage, Verdict};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// (table, built-in chain, nodens's chain)
const CHAINS: [(&str, &str, &str); 4] = [
    ("raw", "PREROUTING", "NODENS-PREROUTING"),
    ("raw", "OUTPUT", "NODENS-OUTPUT"),
    ("filter", "INPUT", "NODENS-INPUT"),
    ("filter", "OUTPUT", "NODENS-OUTPUT"),
];
const JUMP_COMMENT: &str = "nodens: jump";

fn chain_of(stage: Stage) -> (&'static str, &'static str) {
    match stage {
        Stage::RawPrerouting => ("raw", "NODENS-PREROUTING"),
        Stage::RawOutput => ("raw", "NODENS-OUTPUT"),
        Stage::FilterInput => ("filter", "NODENS-INPUT"),
        Stage::FilterOutput => ("filter", "NODENS-OUTPUT"),
    }
}

fn jump(chain: &str) -> String {
    format!("-m comment --comment \"{JUMP_COMMENT}\" -j {chain}")
}

fn spec(rule: &Rule) -> String {
    let (addr, port) = match rule.side {
        Side::Destination => ("-d", "--dport"),
        Side::Source => ("-s", "--sport"),
    };
    let target = match rule.verdict {
        Verdict::Notrack => "NOTRACK",
        Verdict::Accept => "ACCEPT",
    };
    let l4 = rule.l4.name();
    format!(
        "-p {l4} {addr} {ip} -m {l4} {port} {p} -m comment --comment \"{comment}\" -j {target}",
        ip = rule.addr.ip(),
        p = rule.addr.port(),
        comment = rule.comment(),
    )
}

/// The `iptables` and `ip6tables` commands of one flavour.
pub struct Iptables {
    v4: IPTables,
    v6: IPTables,
    pub flavour: &'static str,
    /// Whether this flavour holds kube-proxy's `KUBE-SERVICES` chain (the
    /// kubelet's own `KUBE-*` chains alone do not count): what `auto`
    /// follows.
    pub kube_proxy: bool,
}

fn command(cmd: &'static str) -> IPTables {
    IPTables {
        cmd,
        has_check: true,
        has_wait: true,
        // `-S` refuses `-n`; it prints numbers anyway.
        is_numeric: false,
    }
}

/// Whether `chain` exists in `table`. Not the crate's `chain_exists`: that
/// lists with `-L`, which without `-n` looks up a name for every address in
/// the chain's rules (DNS queries from the node, seconds of timeouts), and
/// `-n` cannot be set for the `-S` listings used everywhere else.
fn chain_present(ipt: &IPTables, table: &str, chain: &str) -> Result<bool> {
    Ok(ipt.list_chains(table)?.iter().any(|c| c == chain))
}

/// What a `*-save` output shows of Kubernetes: its number of `KUBE-`
/// lines and whether kube-proxy's `KUBE-SERVICES` chain is among them;
/// nothing if the command is missing.
#[derive(Default, Clone, Copy)]
struct KubeRules {
    lines: usize,
    services: bool,
}

fn kube_rules(save: &str) -> KubeRules {
    let Some(out) = Command::new(save)
        .output()
        .ok()
        .filter(|o| o.status.success())
    else {
        return KubeRules::default();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    KubeRules {
        lines: text.lines().filter(|l| l.contains("KUBE-")).count(),
        services: text.lines().any(|l| l.starts_with(":KUBE-SERVICES ")),
    }
}

fn exists(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

const LEGACY: (&str, &str, &str) = ("iptables-legacy", "ip6tables-legacy", "legacy");
const NFT: (&str, &str, &str) = ("iptables-nft", "ip6tables-nft", "nft");
const SYSTEM: (&str, &str, &str) = ("iptables", "ip6tables", "system");

impl Iptables {
    /// The flavour kube-proxy uses: the one whose ruleset has more `KUBE-`
    /// rules; with none anywhere, the system's `iptables`.
    pub fn detect() -> Option<Iptables> {
        let legacy = exists("iptables-legacy").then(|| kube_rules("iptables-legacy-save"));
        let nft = exists("iptables-nft").then(|| kube_rules("iptables-nft-save"));
        let (l, n) = (legacy.unwrap_or_default(), nft.unwrap_or_default());
        let ((v4, v6, flavour), kube_proxy) = match (legacy, nft) {
            (Some(_), Some(_)) if l.lines > n.lines => (LEGACY, l.services),
            (Some(_), Some(_)) if n.lines > l.lines => (NFT, n.services),
            _ if exists("iptables") => (SYSTEM, l.services || n.services),
            (Some(_), _) => (LEGACY, l.services),
            (_, Some(_)) => (NFT, n.services),
            _ => return None,
        };
        Some(Iptables {
            v4: command(v4),
            v6: command(v6),
            flavour,
            kube_proxy,
        })
    }

    fn families(&self) -> [(&IPTables, bool); 2] {
        [(&self.v4, false), (&self.v6, true)]
    }

    /// Makes nodens's chains hold exactly `rules`, each reached by one jump.
    pub fn apply(&self, rules: &[Rule]) -> Result<()> {
        for (ipt, v6) in self.families() {
            let mine: Vec<&Rule> = rules.iter().filter(|r| r.addr.is_ipv6() == v6).collect();
            if mine.is_empty() {
                remove_family(ipt)?;
                continue;
            }
            for (table, builtin, chain) in CHAINS {
                if !chain_present(ipt, table, chain)? {
                    ipt.new_chain(table, chain)?;
                }
                ipt.flush_chain(table, chain)?;
                ipt.delete_all(table, builtin, &jump(chain))?;
                ipt.insert(table, builtin, &jump(chain), 1)?;
            }
            for rule in mine {
                let (table, chain) = chain_of(rule.stage);
                ipt.append(table, chain, &spec(rule))?;
            }
        }
        Ok(())
    }

    /// Whether the chains hold exactly `rules` and each has one jump.
    pub fn matches(&self, rules: &[Rule]) -> Result<bool> {
        for (ipt, v6) in self.families() {
            let mine: Vec<&Rule> = rules.iter().filter(|r| r.addr.is_ipv6() == v6).collect();
            if mine.is_empty() {
                continue;
            }
            for (table, builtin, chain) in CHAINS {
                if !chain_present(ipt, table, chain)? {
                    return Ok(false);
                }
                let jumps = ipt
                    .list(table, builtin)?
                    .iter()
                    .filter(|l| l.contains(&format!("-j {chain}")))
                    .count();
                if jumps != 1 {
                    return Ok(false);
                }
                let found: Vec<String> = ipt
                    .list(table, chain)?
                    .iter()
                    .filter(|l| l.starts_with("-A "))
                    .map(|l| comment_of(l).unwrap_or_default())
                    .collect();
                let wanted: BTreeSet<String> = mine
                    .iter()
                    .filter(|r| chain_of(r.stage) == (table, chain))
                    .map(|r| r.comment())
                    .collect();
                let found_set: BTreeSet<String> = found.iter().cloned().collect();
                if found.len() != wanted.len() || found_set != wanted {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Whether any of nodens's chains exists.
    pub fn exists(&self) -> Result<bool> {
        for (ipt, _) in self.families() {
            for (table, _, chain) in CHAINS {
                if chain_present(ipt, table, chain)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Removes the jumps and nodens's chains, in both families.
    pub fn remove(&self) -> Result<()> {
        for (ipt, _) in self.families() {
            remove_family(ipt)?;
        }
        Ok(())
    }
}

fn remove_family(ipt: &IPTables) -> Result<()> {
    for (table, builtin, chain) in CHAINS {
        if chain_present(ipt, table, chain)? {
            ipt.delete_all(table, builtin, &jump(chain))?;
            ipt.flush_chain(table, chain)?;
            ipt.delete_chain(table, chain)?;
        }
    }
    Ok(())
}

/// The text of `--comment "..."` in an `iptables -S` line.
fn comment_of(line: &str) -> Option<String> {
    let start = line.find("--comment \"")? + "--comment \"".len();
    let len = line[start..].find('"')?;
    Some(line[start..start + len].to_string())
}
