//! Who listens where: is anything serving the node cache's address, and
//! does another process hold a port nodens is configured for?

use std::net::SocketAddr;

use super::interfaces::{self, Link};
use super::notrack::Notrack;
use super::sockets::{Listener, Proto};
use super::{CacheAddresses, Out};
use crate::config::Config;
use crate::doctor::{Finding, Severity};

/// nodens's process name (`comm`).
const NODENS: &str = "nodens";

fn describe_all(listeners: &[&Listener]) -> String {
    listeners
        .iter()
        .map(|l| l.describe())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A fact per cache address; `no-listener` where the address was set up
/// (a NOTRACK rule, an interface holding it) but nothing serves it.
pub(crate) fn check_listeners(
    cache: &CacheAddresses,
    sockets: &[Listener],
    notrack: &Notrack,
    links: Option<&[Link]>,
    out: &mut Out,
) {
    for &addr in &cache.addrs {
        let serving: Vec<&Listener> = sockets.iter().filter(|l| l.covers(addr)).collect();
        if !serving.is_empty() {
            out.fact(format!("listening on {addr}: {}", describe_all(&serving)));
            continue;
        }
        out.fact(format!("listening on {addr}: nothing (udp and tcp)"));
        let mut set_up = Vec::new();
        if let Some(name) = links.and_then(|l| interfaces::holder(l, addr.ip())) {
            set_up.push(format!("interface {name} holds {}", addr.ip()));
        }
        if notrack.has_rule_for(addr) {
            let chains: Vec<String> = notrack.queries[&addr]
                .iter()
                .map(|r| format!("{} {}", r.backend.name(), r.chain))
                .collect();
            set_up.push(format!("NOTRACK rules for {addr} in {}", chains.join(", ")));
        }
        if set_up.is_empty() {
            continue;
        }
        let mut f = Finding::new(
            "no-listener",
            Severity::Critical,
            format!("the node cache's address {addr} is set up but nothing listens on it"),
        );
        for line in set_up {
            f = f.evidence(line);
        }
        out.finding(
            f.evidence(format!(
                "no udp or tcp socket on {addr} (or a wildcard) in /proc/net/{{udp,tcp}}{{,6}}"
            ))
            .fix(
                "Pods sent to this address get no answer. Start the node cache (nodens serve, or \
                 the node-local-dns DaemonSet) and look at why it stopped (its logs, OOM kills); \
                 if it is gone for good, remove its interface and rules (`nodens node teardown`).",
            ),
        );
    }
}

/// One port nodens is configured to hold.
struct Wanted {
    proto: Proto,
    addr: SocketAddr,
    what: &'static str,
}

fn wanted(config: Option<&Config>) -> Vec<Wanted> {
    let mut ports = Vec::new();
    let (http, probes) = match config {
        Some(c) => (c.http.metrics, c.http.probes),
        None => (crate::config::MetricsConfig::default().listen.0, None),
    };
    for (addr, what) in [(http, "metrics.listen"), (probes, "metrics.probe_listen")] {
        if let Some(addr) = addr {
            ports.push(Wanted {
                proto: Proto::Tcp,
                addr,
                what,
            });
        }
    }
    for &addr in config.map(|c| c.listen.as_slice()).unwrap_or_default() {
        for proto in [Proto::Udp, Proto::Tcp] {
            ports.push(Wanted {
                proto,
                addr,
                what: "server.listen",
            });
        }
    }
    ports
}

/// `port-conflict` where another process than nodens holds a port nodens
/// is configured for (the default metrics port without a configuration).
pub(crate) fn check_conflicts(config: Option<&Config>, sockets: &[Listener], out: &mut Out) {
    for want in wanted(config) {
        let holders: Vec<&Listener> = sockets
            .iter()
            .filter(|l| l.proto == want.proto && l.covers(want.addr))
            .collect();
        let label = format!("{} {} ({})", want.proto.name(), want.addr, want.what);
        if holders.is_empty() {
            out.fact(format!("{label}: free"));
            continue;
        }
        out.fact(format!("{label}: held by {}", describe_all(&holders)));
        let others: Vec<&Listener> = holders
            .into_iter()
            .filter(|l| l.owner.as_ref().is_some_and(|o| o.comm != NODENS))
            .collect();
        if others.is_empty() {
            continue;
        }
        let default = if config.is_none() {
            " (the default)"
        } else {
            ""
        };
        out.finding(
            Finding::new(
                "port-conflict",
                Severity::Critical,
                format!("{label} is held by another process than nodens"),
            )
            .evidence(format!("nodens is configured for {label}{default}"))
            .evidence(format!("held by {}", describe_all(&others)))
            .fix(format!(
                "nodens cannot bind {} while it is held: stop the other process, or move nodens \
                 ({} in its configuration). On a node that ran node-local-dns, remove it first.",
                want.addr, want.what
            )),
        );
    }
}
