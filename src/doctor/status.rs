//! What a running nodens says of itself over its control socket
//! (`status`): what would otherwise show only in its metrics and logs.
//!
//! - `startup-taint-stuck`: nodens cannot remove its node's startup taint
//!   (`[kubernetes] startup_taint`), so no pod is scheduled on the node;
//! - `startup-taint-pending`: it has not removed it yet (nodens not ready);
//! - `cluster-dns-denies-services`: the cluster DNS denied names of
//!   Services the API says exist, and nodens answered them with their last
//!   answers (`[cluster] keep_last_good`): a rollout's moment without a
//!   ready pod, or a cluster DNS that does not see the API;
//! - `zone-over-bulkhead`: a zone turned misses away at its bound of misses
//!   in flight (`[[zone]] max_misses_in_flight`): its upstreams are silent
//!   or slow, and its clients got SERVFAIL or stale answers;
//! - `upstream-tls-refused`: a DNS-over-TLS upstream's certificate was
//!   refused (or its handshake never finished) and no session was made:
//!   every query to it fails over, silently but for the metric;
//! - `config-deprecated-keys`: the configuration in force writes keys
//!   under names a later release removes (docs/configuration.md,
//!   "Deprecated keys").

use super::finding::{Finding, Severity};
use crate::control::{Reply, Request, StatusView};

/// The status section and its findings; `None` when nothing answers on
/// the socket (the workloads section has said why, if it was named).
pub(crate) fn check(socket: &super::ControlSocket) -> Option<(Vec<String>, Vec<Finding>)> {
    let asked = crate::control::connect(&socket.path).and_then(|c| c.ask(&Request::Status));
    match asked.map(|r| r.into_iter().next()) {
        Ok(Some(Reply::Status(view))) => Some(analyse(&view)),
        _ => None,
    }
}

pub(crate) fn analyse(view: &StatusView) -> (Vec<String>, Vec<Finding>) {
    let mut lines = Vec::new();
    let mut findings = Vec::new();
    if let Some(taint) = &view.startup_taint {
        let node = taint.node.as_deref().unwrap_or("(no node name)");
        lines.push(format!(
            "startup taint {} on {node}: {}",
            taint.key,
            if taint.removed {
                "removed"
            } else {
                "still on the node"
            }
        ));
        if !taint.removed && taint.errors > 0 {
            findings.push(
                Finding::new(
                    "startup-taint-stuck",
                    Severity::Critical,
                    format!(
                        "nodens cannot remove the startup taint {} from {node}: no pod is scheduled there",
                        taint.key
                    ),
                )
                .evidence(format!(
                    "{} failed attempts; the last: {}",
                    taint.errors,
                    taint.last_error.as_deref().unwrap_or("-")
                ))
                .fix(
                    "give nodens's ServiceAccount `get` and `patch` on nodes (the chart's \
                     startupTaint does, with a ValidatingAdmissionPolicy that needs Kubernetes \
                     1.30 and the node's name in the pod's token), and NODE_NAME from \
                     spec.nodeName; or remove the taint by hand (kubectl taint nodes NODE KEY-)",
                ),
            );
        } else if !taint.removed {
            findings.push(
                Finding::new(
                    "startup-taint-pending",
                    Severity::Info,
                    format!("the startup taint {} is still on {node}", taint.key),
                )
                .evidence("nodens removes it once it serves (/ready); no attempt failed yet"),
            );
        }
    }
    lines.push(format!(
        "last-known-good answers: {} (the API watch vouched), {} (stale_over_denial); {} kept aside",
        view.last_good_cluster, view.last_good_stale, view.kept_answers
    ));
    if view.last_good_cluster > 0 {
        findings.push(
            Finding::new(
                "cluster-dns-denies-services",
                Severity::Info,
                "the cluster DNS denied names of Services the API says exist",
            )
            .evidence(format!(
                "{} denials answered with the Service's last answer since nodens started \
                 (nodens_cache_last_good_answers_total{{rule=\"cluster\"}})",
                view.last_good_cluster
            ))
            .fix(
                "a few during rollouts are what keep_last_good is for; a rate that lasts means \
                 the cluster DNS does not see the API (its logs, its watch) or a headless \
                 Service has no ready pod",
            ),
        );
    }
    for z in &view.zones {
        let bound = if z.max == 0 {
            "no bound".to_string()
        } else {
            z.max.to_string()
        };
        let zone = if z.view.is_empty() {
            z.zone.clone()
        } else {
            format!("{} (view {})", z.zone, z.view)
        };
        lines.push(format!(
            "zone {zone}: {} misses in flight of {bound}, {} turned away",
            z.in_flight, z.rejected
        ));
    }
    let over: Vec<_> = view.zones.iter().filter(|z| z.rejected > 0).collect();
    if !over.is_empty() {
        let mut f = Finding::new(
            "zone-over-bulkhead",
            Severity::Warning,
            format!(
                "{} zone{} turned misses away at {} bound of misses in flight",
                over.len(),
                if over.len() == 1 { "" } else { "s" },
                if over.len() == 1 { "its" } else { "their" }
            ),
        );
        for z in over {
            f = f.evidence(format!(
                "{}: {} misses answered stale or SERVFAIL at once; {} in flight now of {}",
                z.zone, z.rejected, z.in_flight, z.max
            ));
        }
        findings.push(f.fix(
            "the zone's upstreams are silent or slow (nodens_upstream_errors_total, \
             nodens_upstream_healthy for them): fix or remove the zone; the bound keeps the \
             other zones answering meanwhile. A busy zone with healthy upstreams needs a \
             higher `max_misses_in_flight` of its own",
        ));
    }
    tls(view, &mut lines, &mut findings);
    deprecated_keys(view, &mut lines, &mut findings);
    (lines, findings)
}

/// The configuration's deprecated keys: each works until the release that
/// removes it, and then the file no longer loads.
fn deprecated_keys(view: &StatusView, lines: &mut Vec<String>, findings: &mut Vec<Finding>) {
    let keys = &view.deprecated_keys;
    if keys.is_empty() {
        return;
    }
    lines.push(format!(
        "configuration: {} deprecated key{}",
        keys.len(),
        if keys.len() == 1 { "" } else { "s" }
    ));
    let names: Vec<String> = keys.iter().map(|k| format!("`{}`", k.key)).collect();
    let mut f = Finding::new(
        "config-deprecated-keys",
        Severity::Warning,
        format!(
            "the configuration in force writes deprecated keys: {}",
            names.join(", ")
        ),
    );
    for k in keys {
        f = f.evidence(format!(
            "line {}: `{}`: write `{}`; removed in {}",
            k.line, k.key, k.replacement, k.removed_in
        ));
    }
    findings.push(f.fix(
        "rename each in the configuration file (the chart's upstream.pool or configOverride \
         for a chart's); `nodens check-config FILE` lists them. Each works as its replacement \
         until the release that removes it, which then refuses the file",
    ));
}

/// Each DNS-over-TLS upstream's sessions, and a finding for those that
/// fail every handshake: a wrong `server_name` or `ca`, an expired
/// certificate, or a server that does not speak TLS there.
fn tls(view: &StatusView, lines: &mut Vec<String>, findings: &mut Vec<Finding>) {
    for t in &view.tls {
        lines.push(format!(
            "DNS over TLS to {}: {} sessions ({} resumed); {} certificates refused, {} handshakes timed out, {} failed",
            t.upstream,
            t.full + t.resumed,
            t.resumed,
            t.certificate,
            t.timeout,
            t.error
        ));
    }
    let failing: Vec<_> = view
        .tls
        .iter()
        .filter(|t| t.full + t.resumed == 0 && t.certificate + t.timeout + t.error > 0)
        .collect();
    if failing.is_empty() {
        return;
    }
    let mut f = Finding::new(
        "upstream-tls-refused",
        Severity::Critical,
        format!(
            "{} DNS-over-TLS upstream{} never completed a handshake: every query to {} fails over",
            failing.len(),
            if failing.len() == 1 { "" } else { "s" },
            if failing.len() == 1 { "it" } else { "them" }
        ),
    );
    for t in failing {
        f = f.evidence(format!(
            "{}: {} certificates refused, {} timed out, {} failed; the last: {}",
            t.upstream,
            t.certificate,
            t.timeout,
            t.error,
            t.last_error.as_deref().unwrap_or("-")
        ));
    }
    findings.push(f.fix(
        "check the zone's [zone.tls]: server_name must be a name in the server's certificate \
         (or unset, for its IP address), ca the authority that signed it (or unset, for the \
         system's roots, which nodens's image does not carry); an expired certificate is the \
         server's to renew; a timeout means nothing speaks TLS at that address and port (853)",
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::TaintView;

    fn ids(view: &StatusView) -> Vec<&'static str> {
        analyse(view).1.iter().map(|f| f.id).collect()
    }

    #[test]
    fn a_taint_nodens_cannot_remove_is_critical() {
        let mut view = StatusView {
            startup_taint: Some(TaintView {
                key: "node.nodens.io/agent-not-ready".into(),
                node: Some("node-1".into()),
                errors: 3,
                last_error: Some("nodes \"node-1\" is forbidden".into()),
                ..TaintView::default()
            }),
            ..StatusView::default()
        };
        assert_eq!(ids(&view), ["startup-taint-stuck"]);
        view.startup_taint.as_mut().unwrap().errors = 0;
        assert_eq!(ids(&view), ["startup-taint-pending"]);
        view.startup_taint.as_mut().unwrap().removed = true;
        assert!(ids(&view).is_empty());
        view.last_good_cluster = 4;
        assert_eq!(ids(&view), ["cluster-dns-denies-services"]);
        assert!(ids(&StatusView::default()).is_empty());
        let zone = |rejected| crate::control::ZoneView {
            zone: "corp.example.".into(),
            max: 1024,
            in_flight: 1024,
            rejected,
            ..Default::default()
        };
        let quiet = StatusView {
            zones: vec![zone(0)],
            ..StatusView::default()
        };
        assert!(ids(&quiet).is_empty());
        let over = StatusView {
            zones: vec![zone(7)],
            ..StatusView::default()
        };
        assert_eq!(ids(&over), ["zone-over-bulkhead"]);
        let tls = |full, certificate| crate::control::TlsView {
            upstream: "192.0.2.53:853".into(),
            full,
            certificate,
            last_error: Some("invalid peer certificate: Expired".into()),
            ..Default::default()
        };
        let refused = StatusView {
            tls: vec![tls(0, 3)],
            ..StatusView::default()
        };
        assert_eq!(ids(&refused), ["upstream-tls-refused"]);
        let recovered = StatusView {
            tls: vec![tls(1, 3)],
            ..StatusView::default()
        };
        assert!(ids(&recovered).is_empty(), "a session was made after all");
        let deprecated = StatusView {
            deprecated_keys: vec![crate::control::DeprecatedKeyView {
                key: "[server] tcp_max_inflight".into(),
                replacement: "tcp_max_in_flight".into(),
                line: 3,
                removed_in: "0.3.0".into(),
            }],
            ..StatusView::default()
        };
        let (lines, findings) = analyse(&deprecated);
        assert_eq!(ids(&deprecated), ["config-deprecated-keys"]);
        assert_eq!(findings[0].severity, Severity::Warning);
        assert!(
            findings[0].title.contains("`[server] tcp_max_inflight`"),
            "{}",
            findings[0].title
        );
        assert!(lines.iter().any(|l| l == "configuration: 1 deprecated key"));
    }
}
