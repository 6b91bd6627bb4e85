//! The rules the node setup must hold (NodeLocal DNSCache's NOTRACK and
//! ACCEPT rules for every held address), and how a rule as `nft` or
//! `iptables-save` prints it is matched against them.

use std::net::{IpAddr, SocketAddr};

/// Where a rule lives: the four hooks of NodeLocal DNSCache's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    RawPrerouting,
    RawOutput,
    FilterInput,
    FilterOutput,
}

pub const HOOKS: [Hook; 4] = [
    Hook::RawPrerouting,
    Hook::RawOutput,
    Hook::FilterInput,
    Hook::FilterOutput,
];

impl Hook {
    /// The chain in `table inet nodens`.
    pub fn nft_chain(self) -> &'static str {
        match self {
            Hook::RawPrerouting => "prerouting",
            Hook::RawOutput => "output_raw",
            Hook::FilterInput => "input",
            Hook::FilterOutput => "output",
        }
    }
    /// The nft hook and priority of that chain.
    pub fn nft_hook(self) -> (&'static str, &'static str) {
        match self {
            Hook::RawPrerouting => ("prerouting", "raw"),
            Hook::RawOutput => ("output", "raw"),
            Hook::FilterInput => ("input", "filter"),
            Hook::FilterOutput => ("output", "filter"),
        }
    }
    /// iptables: (table, built-in chain, nodens's chain).
    pub fn ipt(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Hook::RawPrerouting => ("raw", "PREROUTING", "NODENS-PREROUTING"),
            Hook::RawOutput => ("raw", "OUTPUT", "NODENS-OUTPUT"),
            Hook::FilterInput => ("filter", "INPUT", "NODENS-INPUT"),
            Hook::FilterOutput => ("filter", "OUTPUT", "NODENS-OUTPUT"),
        }
    }
}

/// Which end of the packet a rule matches: destination IP + dport, or
/// source IP + sport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Dst,
    Src,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    NoTrack,
    Accept,
}

/// One rule the spec asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleWant {
    pub hook: Hook,
    pub ip: IpAddr,
    pub port: u16,
    pub proto: &'static str,
    pub side: Side,
    pub verdict: Verdict,
}

/// Every rule the spec asks for the held addresses: for each (IP, port)
/// and both udp and tcp, NOTRACK in raw prerouting (dst), NOTRACK in raw
/// output (src and dst), ACCEPT in filter input (dst), ACCEPT in filter
/// output (src).
pub fn wanted_rules(held: &[SocketAddr]) -> Vec<RuleWant> {
    let mut v = Vec::new();
    for a in held {
        for proto in ["udp", "tcp"] {
            for (hook, side, verdict) in [
                (Hook::RawPrerouting, Side::Dst, Verdict::NoTrack),
                (Hook::RawOutput, Side::Src, Verdict::NoTrack),
                (Hook::RawOutput, Side::Dst, Verdict::NoTrack),
                (Hook::FilterInput, Side::Dst, Verdict::Accept),
                (Hook::FilterOutput, Side::Src, Verdict::Accept),
            ] {
                v.push(RuleWant {
                    hook,
                    ip: a.ip(),
                    port: a.port(),
                    proto,
                    side,
                    verdict,
                });
            }
        }
    }
    v
}

/// The values after token `i`: one token, or the elements of a `{ ... }` set.
fn values_at<'a>(t: &[&'a str], i: usize) -> Vec<&'a str> {
    match t.get(i) {
        Some(&"{") => t[i + 1..]
            .iter()
            .take_while(|w| **w != "}")
            .copied()
            .collect(),
        Some(w) => vec![*w],
        None => Vec::new(),
    }
}

fn ip_eq(text: &str, ip: IpAddr) -> bool {
    let bare = text.trim_matches('"');
    let (addr, len) = match bare.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (bare, None),
    };
    let full = if ip.is_ipv4() { "32" } else { "128" };
    addr.parse::<IpAddr>().ok() == Some(ip) && len.is_none_or(|l| l == full)
}

/// Whether an nft rule (as `nft list` prints it) matches `w`: the address
/// (`ip daddr X` / `ip6 saddr X`, or X in a set), the protocol and port
/// (`udp dport 53`, or `meta l4proto udp` with `th dport 53`, sets
/// allowed) and the verdict.
pub fn nft_rule_matches(rule: &str, w: &RuleWant) -> bool {
    let spaced = nft_without_comment(rule).replace(',', " ");
    let t: Vec<&str> = spaced.split_whitespace().collect();
    let fam = if w.ip.is_ipv4() { "ip" } else { "ip6" };
    let (afield, pfield) = match w.side {
        Side::Dst => ("daddr", "dport"),
        Side::Src => ("saddr", "sport"),
    };
    let port = w.port.to_string();
    let at = |a: &str, b: &str| -> Vec<usize> {
        (0..t.len().saturating_sub(1))
            .filter(|&i| t[i] == a && t[i + 1] == b)
            .collect()
    };
    let addr_ok = at(fam, afield)
        .into_iter()
        .any(|i| values_at(&t, i + 2).iter().any(|v| ip_eq(v, w.ip)));
    let direct = at(w.proto, pfield)
        .into_iter()
        .any(|i| values_at(&t, i + 2).contains(&port.as_str()));
    let l4 = (0..t.len())
        .filter(|&i| t[i] == "l4proto")
        .any(|i| values_at(&t, i + 1).contains(&w.proto))
        && at("th", pfield)
            .into_iter()
            .any(|i| values_at(&t, i + 2).contains(&port.as_str()));
    let verdict = match w.verdict {
        Verdict::NoTrack => t.contains(&"notrack"),
        Verdict::Accept => t.contains(&"accept"),
    };
    addr_ok && (direct || l4) && verdict
}

/// Splits an iptables-save line into words, a `"..."` (with `\"` escapes)
/// being one word without its quotes (the doctor's reader of the rules).
pub fn split_quoted(line: &str) -> Vec<String> {
    nodens::doctor::split_words(line)
}

/// The words of an iptables rule with the comment's text left out.
pub(crate) fn ipt_words(rule: &str) -> Vec<String> {
    let mut w = split_quoted(rule);
    if let Some(i) = w.iter().position(|x| x == "--comment") {
        w.drain(i..(i + 2).min(w.len()));
    }
    w
}

/// Whether an iptables-save rule (the part after `-A CHAIN`) matches `w`
/// (the chain is checked by the caller).
pub fn ipt_rule_matches(rule: &str, w: &RuleWant) -> bool {
    let words = ipt_words(rule);
    let t: Vec<&str> = words.iter().map(String::as_str).collect();
    let (aflag, pflag, psflag) = match w.side {
        Side::Dst => ("-d", "--dport", "--dports"),
        Side::Src => ("-s", "--sport", "--sports"),
    };
    let after = |flag: &str| -> Vec<&str> {
        (0..t.len().saturating_sub(1))
            .filter(|&i| t[i] == flag)
            .map(|i| t[i + 1])
            .collect()
    };
    let port = w.port.to_string();
    let addr_ok = after(aflag).iter().any(|v| ip_eq(v, w.ip));
    let proto_ok = after("-p").contains(&w.proto);
    let port_ok = after(pflag).contains(&port.as_str())
        || after(psflag)
            .iter()
            .any(|v| v.split(',').any(|p| p == port));
    let target = after("-j");
    let verdict = match w.verdict {
        Verdict::NoTrack => {
            target.contains(&"NOTRACK") || (target.contains(&"CT") && t.contains(&"--notrack"))
        }
        Verdict::Accept => target.contains(&"ACCEPT"),
    };
    addr_ok && proto_ok && port_ok && verdict
}

/// The text of an iptables rule's `--comment`, if it has one.
pub fn ipt_comment(rule: &str) -> Option<String> {
    let w = split_quoted(rule);
    let i = w.iter().position(|x| x == "--comment")?;
    w.get(i + 1).cloned()
}

/// The text of an nft rule's `comment "..."`, if it has one.
pub fn nft_comment(rule: &str) -> Option<String> {
    let start = rule.find("comment \"")? + "comment \"".len();
    let mut out = String::new();
    let mut chars = rule[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// An nft rule without its comment (nft prints the comment last).
fn nft_without_comment(rule: &str) -> &str {
    match rule.find(" comment \"") {
        Some(i) => &rule[..i],
        None => rule,
    }
}
