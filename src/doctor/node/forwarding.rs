//! Forwarding loops: an upstream of the configuration that is nodens
//! itself, directly or through the node's resolv.conf (a zone without
//! upstreams forwards to its nameservers, and on a node whose resolv.conf
//! names the node cache, that is the cache).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use super::sockets::Listener;
use super::{Out, join};
use crate::config::Config;
use crate::doctor::{Finding, Severity};

/// The addresses nodens answers on: its listen addresses and node addresses.
fn own_addresses(config: &Config) -> Vec<SocketAddr> {
    let mut own = config.listen.clone();
    if let Some(node) = &config.node {
        own.extend(node.addresses.iter().copied());
    }
    own
}

/// Why `upstream` is nodens itself, if it is.
fn loops_back(
    upstream: SocketAddr,
    own: &[SocketAddr],
    sockets: Option<&[Listener]>,
) -> Option<String> {
    let listened = own.iter().find(|l| {
        l.port() == upstream.port() && (l.ip() == upstream.ip() || l.ip().is_unspecified())
    });
    if let Some(l) = listened {
        return Some(format!("{upstream} is nodens's own listen address ({l})"));
    }
    if !upstream.ip().is_loopback() {
        return None;
    }
    let holder = sockets?
        .iter()
        .find(|l| l.covers(upstream) && l.owner.as_ref().is_some_and(|o| o.comm == "nodens"))?;
    Some(format!(
        "{upstream} is served by nodens: {}",
        holder.describe()
    ))
}

pub(crate) fn check(
    config: Option<&Config>,
    node_resolv_conf: &Path,
    sockets: Option<&[Listener]>,
    out: &mut Out,
) {
    let Some(config) = config else {
        out.fact("forwarding loop: no nodens configuration given (--config); not checked");
        return;
    };
    let own = own_addresses(config);
    let resolv = crate::config::resolv_conf_nameservers(node_resolv_conf).ok();
    let mut evidence = Vec::new();
    for zone in &config.zones {
        out.fact(format!(
            "zone {} forwards to {}",
            zone.name,
            join(&zone.upstreams)
        ));
        let looping: Vec<String> = zone
            .upstreams
            .iter()
            .filter_map(|u| loops_back(*u, &own, sockets))
            .collect();
        if looping.is_empty() {
            continue;
        }
        evidence.push(format!(
            "zone {} forwards to {}",
            zone.name,
            join(&zone.upstreams)
        ));
        evidence.extend(looping);
        let from_resolv = resolv.as_ref().is_some_and(|r| {
            let r: BTreeSet<&SocketAddr> = r.iter().collect();
            r == zone.upstreams.iter().collect()
        });
        if from_resolv {
            evidence.push(format!(
                "these are the nameservers of the node's {}, which names the node cache",
                node_resolv_conf.display()
            ));
        }
    }
    if evidence.is_empty() {
        out.fact("forwarding loop: no upstream is nodens itself");
        return;
    }
    let mut f = Finding::new(
        "forwarding-loop",
        Severity::Critical,
        "nodens forwards to itself: every miss loops until it times out (SERVFAIL)",
    );
    for line in evidence {
        f = f.evidence(line);
    }
    out.finding(f.fix(
        "Give the zone real upstreams: `upstreams = [\"<kube-dns Service IP>\"]` for the cluster \
         domain, and for \".\" either explicit resolvers or `resolv_conf` pointing at a file that \
         names them (not the node's /etc/resolv.conf once it names the node cache; e.g. \
         /run/systemd/resolve/resolv.conf).",
    ));
}
