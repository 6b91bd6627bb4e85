//! The rules nodens puts on the node, independent of the firewall that
//! carries them: for each held address and port, UDP and TCP, what
//! NodeLocal DNSCache writes (kubernetes-sigs/node-local-dns, `cache_app.go`).

use std::fmt;
use std::net::SocketAddr;

/// Where a rule sits: a netfilter hook, before conntrack (raw) or in the
/// filter stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// raw PREROUTING: packets arriving for the address.
    RawPrerouting,
    /// raw OUTPUT: packets nodens sends, and queries from the node itself.
    RawOutput,
    /// filter INPUT.
    FilterInput,
    /// filter OUTPUT.
    FilterOutput,
}

/// Which end of the packet the address and port are matched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// `daddr`/`dport`: a query to nodens.
    Destination,
    /// `saddr`/`sport`: an answer from nodens.
    Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Skip connection tracking.
    Notrack,
    /// Accept: the filter rules NodeLocal DNSCache adds because untracked
    /// packets no longer match `ESTABLISHED` accept rules.
    Accept,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4 {
    Udp,
    Tcp,
}

impl L4 {
    pub fn name(self) -> &'static str {
        match self {
            L4::Udp => "udp",
            L4::Tcp => "tcp",
        }
    }
}

/// One rule: match protocol and address:port on one side, then the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    pub stage: Stage,
    pub l4: L4,
    pub side: Side,
    pub addr: SocketAddr,
    pub verdict: Verdict,
}

impl Rule {
    /// The comment that names the rule in the ruleset: how nodens finds its
    /// own rules and tells one from another.
    pub fn comment(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = match self.side {
            Side::Destination => "to",
            Side::Source => "from",
        };
        let verdict = match self.verdict {
            Verdict::Notrack => "notrack",
            Verdict::Accept => "accept",
        };
        let hook = match self.stage {
            Stage::RawPrerouting => "prerouting",
            Stage::FilterInput => "input",
            Stage::RawOutput | Stage::FilterOutput => "output",
        };
        write!(
            f,
            "nodens: {verdict} {} {side} {} in {hook}",
            self.l4.name(),
            self.addr
        )
    }
}

/// Every rule for `addrs`, in a stable order.
pub(crate) fn rules_for(addrs: &[SocketAddr]) -> Vec<Rule> {
    let shapes = [
        (Stage::RawPrerouting, Side::Destination, Verdict::Notrack),
        (Stage::FilterInput, Side::Destination, Verdict::Accept),
        (Stage::RawOutput, Side::Source, Verdict::Notrack),
        (Stage::FilterOutput, Side::Source, Verdict::Accept),
        (Stage::RawOutput, Side::Destination, Verdict::Notrack),
    ];
    let mut rules = Vec::new();
    for &addr in addrs {
        for (stage, side, verdict) in shapes {
            for l4 in [L4::Tcp, L4::Udp] {
                rules.push(Rule {
                    stage,
                    l4,
                    side,
                    addr,
                    verdict,
                });
            }
        }
    }
    rules
}
