//! What the test found, printed as a table and checked against
//! [`KNOWN`](super::cases::KNOWN).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use support::Compared;

use super::Untranslated;
use super::cases::KNOWN;

/// A query whose answers differ.
pub(super) struct Mismatch {
    pub(super) what: String,
    pub(super) server: SocketAddr,
    pub(super) tcp: bool,
    pub(super) coredns: Compared,
    pub(super) nodens: Compared,
}

/// What one Corefile gave.
pub(super) struct Report {
    pub(super) file: &'static str,
    pub(super) untranslated: Vec<Untranslated>,
    pub(super) asked: usize,
    pub(super) mismatches: Vec<Mismatch>,
    pub(super) took: Duration,
}

/// The table the test prints: per Corefile, its untranslated lines and the
/// queries answered differently.
pub(super) fn table(reports: &[Report]) -> String {
    let mut t = String::from(
        "\nDifferential test: CoreDNS 1.13 running each Corefile vs nodens running its conversion\n",
    );
    writeln!(
        t,
        "{:<30} {:>7} {:>13} {:>10} {:>6}",
        "Corefile", "queries", "untranslated", "differing", "secs"
    )
    .unwrap();
    for r in reports {
        let differing: BTreeSet<&str> = r.mismatches.iter().map(|m| m.what.as_str()).collect();
        writeln!(
            t,
            "{:<30} {:>7} {:>13} {:>10} {:>6.1}",
            r.file,
            r.asked,
            r.untranslated.len(),
            differing.len(),
            r.took.as_secs_f64()
        )
        .unwrap();
    }
    for r in reports {
        if r.untranslated.is_empty() && r.mismatches.is_empty() {
            continue;
        }
        writeln!(t, "\n{}:", r.file).unwrap();
        for u in &r.untranslated {
            writeln!(t, "  line {:<4} not translated: {}", u.line, u.message).unwrap();
        }
        // Queries nodens left unanswered, one line per address: the sign of
        // an address it does not listen on, not of a query's own answer.
        let silent: BTreeSet<String> = r
            .mismatches
            .iter()
            .filter(|m| m.nodens == Compared::NoAnswer)
            .map(|m| m.server.ip().to_string())
            .collect();
        for ip in &silent {
            let n = r
                .mismatches
                .iter()
                .filter(|m| m.nodens == Compared::NoAnswer && m.server.ip().to_string() == *ip)
                .count();
            writeln!(
                t,
                "  on {ip}: nodens answers none of {n} queries (UDP and TCP) that CoreDNS answers"
            )
            .unwrap();
        }
        let mut seen = BTreeSet::new();
        for m in r
            .mismatches
            .iter()
            .filter(|m| m.nodens != Compared::NoAnswer)
        {
            // One line per query and outcome pair (UDP and TCP, every address).
            let key = (m.what.clone(), m.coredns.to_string(), m.nodens.to_string());
            if !seen.insert(key) {
                continue;
            }
            let on: Vec<String> = r
                .mismatches
                .iter()
                .filter(|o| o.what == m.what && o.coredns == m.coredns && o.nodens == m.nodens)
                .map(|o| format!("{}/{}", o.server.ip(), if o.tcp { "tcp" } else { "udp" }))
                .collect();
            writeln!(
                t,
                "  {:<48} coredns: {}\n  {:<48} nodens:  {}   ({})",
                m.what,
                m.coredns,
                "",
                m.nodens,
                on.join(" ")
            )
            .unwrap();
        }
    }
    t
}

/// Checks the reports against [`KNOWN`]: what differs must be listed, and
/// what is listed must still differ.
pub(super) fn check_known(reports: &[Report]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut occurred = BTreeSet::new();
    for r in reports {
        let whats = r
            .untranslated
            .iter()
            .map(|u| format!("line {}", u.line))
            .chain(r.mismatches.iter().map(|m| m.what.clone()));
        let on_address = r.mismatches.iter().map(|m| format!("on {}", m.server.ip()));
        let listed = |what: &str| KNOWN.iter().any(|(f, w, _)| *f == r.file && *w == what);
        for on in on_address {
            if listed(&on) {
                occurred.insert((r.file, on));
            }
        }
        // A query that differs only on addresses listed as a whole is
        // covered by those entries.
        let whats = whats.filter(|w| {
            w.starts_with("line ")
                || r.mismatches
                    .iter()
                    .any(|m| &m.what == w && !listed(&format!("on {}", m.server.ip())))
        });
        for what in whats {
            if listed(&what) {
                occurred.insert((r.file, what));
            } else if occurred.insert((r.file, what.clone())) {
                problems.push(format!("{}: `{what}` differs and is not in KNOWN", r.file));
            }
        }
    }
    for (file, what, why) in KNOWN {
        if !occurred.contains(&(*file, what.to_string())) {
            problems.push(format!(
                "{file}: `{what}` is in KNOWN ({why}) but no longer differs: remove it from the list"
            ));
        }
    }
    problems
}
