//! What a running nodens counted per workload (`[server]
//! workload_counters`), read over its control socket: findings that name
//! the pods they come from, instead of the node as a whole.
//!
//! - `workload-search-tax`: pods whose lookups walk the search list (many
//!   NXDOMAIN answers under the cluster domain per other query);
//! - `workload-servfail`: pods that get SERVFAIL, with the names they ask.
//!
//! The counts are nodens's since it began counting (the view's clock).

use std::path::Path;

use super::ControlSocket;
use super::finding::{Finding, Severity};
use crate::control::{Reply, Request, TopView, Workload};

/// A workload pays the search-list tax from this many expansions per lookup.
const TAX: f64 = 1.5;
/// And only with this many expansions counted (a handful is noise).
const MIN_EXPANSIONS: u64 = 20;
/// Workloads named in a finding at most.
const NAMED: usize = 10;

/// The workloads section and its findings, from the control socket;
/// `None` when the socket was not named and nothing listens on it.
pub(crate) fn check(socket: &ControlSocket) -> Option<(Vec<String>, Vec<Finding>)> {
    let path = &socket.path;
    let asked = crate::control::connect(path).and_then(|c| c.ask(&Request::Top { limit: None }));
    let view = match asked.map(|r| r.into_iter().next()) {
        Ok(Some(Reply::Top(view))) => view,
        Ok(other) => return Some(unread(path, format!("unexpected reply {other:?}"))),
        Err(e) if !socket.named && e.nobody_listens() => return None,
        Err(e) => return Some(unread(path, e.describe())),
    };
    Some(analyse(&view))
}

fn unread(path: &Path, why: String) -> (Vec<String>, Vec<Finding>) {
    let note = Finding::new(
        "workloads-unread",
        Severity::Info,
        format!(
            "the workloads of the nodens at {} could not be read",
            path.display()
        ),
    )
    .evidence(why)
    .fix(
        "check that nodens runs with `[server] control_socket` at this path, and run \
         doctor as root or as nodens's user (`kubectl exec` into the nodens pod does); \
         --no-workloads skips this section",
    );
    (Vec::new(), vec![note])
}

fn name(w: &Workload) -> String {
    if w.namespace.is_empty() {
        format!("{} (no known pod)", w.pod)
    } else {
        format!("{}/{}", w.namespace, w.pod)
    }
}

/// "1 workload", "3 workloads".
fn count(n: usize) -> String {
    format!("{n} workload{}", if n == 1 { "" } else { "s" })
}

fn per_lookup(w: &Workload) -> f64 {
    w.expansions as f64 / (w.queries.saturating_sub(w.expansions)).max(1) as f64
}

/// The findings the counts support.
pub(crate) fn analyse(view: &TopView) -> (Vec<String>, Vec<Finding>) {
    let minutes = view.at_ms as f64 / 60_000.0;
    let mut lines = vec![format!(
        "{} workloads counted over {minutes:.1} min; the busiest:",
        view.workloads.len()
    )];
    for w in view.workloads.iter().take(5) {
        lines.push(format!(
            "{}: {} queries, {:.0}% without an upstream query, {} NXDOMAIN, {} SERVFAIL",
            name(w),
            w.queries,
            100.0 * w.hits as f64 / w.queries.max(1) as f64,
            w.nxdomain,
            w.servfail
        ));
    }
    let mut findings = Vec::new();

    let mut taxed: Vec<&Workload> = view
        .workloads
        .iter()
        .filter(|w| w.expansions >= MIN_EXPANSIONS && per_lookup(w) >= TAX)
        .collect();
    taxed.sort_by_key(|w| std::cmp::Reverse(w.expansions));
    if !taxed.is_empty() {
        let total: u64 = taxed.iter().map(|w| w.expansions).sum();
        let mut f = Finding::new(
            "workload-search-tax",
            Severity::Warning,
            format!(
                "{} walk{} the search list: {total} NXDOMAIN answers under the cluster domain before the names that exist",
                count(taxed.len()),
                if taxed.len() == 1 { "s" } else { "" }
            ),
        );
        for w in taxed.iter().take(NAMED) {
            let names: Vec<&str> = w.names.iter().map(|(n, _)| n.as_str()).take(3).collect();
            f = f.evidence(format!(
                "{}: {:.1} expansions per lookup ({} of {} queries), e.g. {}",
                name(w),
                per_lookup(w),
                w.expansions,
                w.queries,
                names.join(", ")
            ));
        }
        findings.push(f.fix(
            "In these pods' spec, lower ndots (dnsConfig options ndots: 2) or ask for fully \
             qualified names with a final dot; or turn on [cluster] autopath on nodens, which \
             answers the first expansion with the name that exists (docs/configuration.md).",
        ));
    }

    let mut failing: Vec<&Workload> = view.workloads.iter().filter(|w| w.servfail > 0).collect();
    failing.sort_by_key(|w| std::cmp::Reverse(w.servfail));
    if !failing.is_empty() {
        let mut f = Finding::new(
            "workload-servfail",
            Severity::Warning,
            format!("{} got SERVFAIL answers", count(failing.len())),
        );
        for w in failing.iter().take(NAMED) {
            let names: Vec<&str> = w.names.iter().map(|(n, _)| n.as_str()).take(3).collect();
            f = f.evidence(format!(
                "{}: {} SERVFAIL of {} queries; asks most {}",
                name(w),
                w.servfail,
                w.queries,
                names.join(", ")
            ));
        }
        findings.push(f.fix(
            "SERVFAIL means no upstream answered in time or the upstream failed: see the \
             upstream findings above and nodens_upstream_* metrics for the zones of these names; \
             `nodens trace NAME` from the pod shows each query.",
        ));
    }
    (lines, findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket file left by a killed nodens: silence at the default path,
    /// a finding with the reason at a named one.
    #[test]
    fn a_stale_socket_is_a_finding_only_when_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = dir.path().join("control.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let default = ControlSocket {
            path: path.clone(),
            named: false,
        };
        assert!(check(&default).is_none());
        let absent = ControlSocket {
            path: dir.path().join("absent.sock"),
            named: false,
        };
        assert!(check(&absent).is_none());
        let named = ControlSocket { path, named: true };
        let (_, findings) = check(&named).expect("a section");
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].id, "workloads-unread");
    }

    fn workload(
        namespace: &str,
        pod: &str,
        queries: u64,
        expansions: u64,
        servfail: u64,
    ) -> Workload {
        Workload {
            namespace: namespace.into(),
            pod: pod.into(),
            queries,
            hits: 0,
            nxdomain: expansions,
            servfail,
            expansions,
            names: vec![("api.example.com.".into(), 3)],
        }
    }

    #[test]
    fn findings_name_the_workloads_they_come_from() {
        let view = TopView {
            at_ms: 120_000,
            workloads: vec![
                // 4 expansions per lookup: the ndots:5 walk of an external name.
                workload("shop", "web-1", 500, 400, 0),
                // 1 expansion per lookup: below the bar.
                workload("shop", "web-2", 200, 100, 0),
                workload("", "10.0.0.9", 50, 0, 7),
            ],
        };
        let (_, findings) = analyse(&view);
        let tax = findings
            .iter()
            .find(|f| f.id == "workload-search-tax")
            .unwrap();
        assert_eq!(tax.evidence.len(), 1, "{tax:?}");
        assert!(
            tax.evidence[0].starts_with("shop/web-1: 4.0 expansions per lookup"),
            "{tax:?}"
        );
        let failing = findings
            .iter()
            .find(|f| f.id == "workload-servfail")
            .unwrap();
        assert!(
            failing.evidence[0].starts_with("10.0.0.9 (no known pod): 7 SERVFAIL"),
            "{failing:?}"
        );
    }
}
