//! kube-proxy: its mode (iptables in which flavour, nftables, IPVS) read
//! from what it leaves on the node, and the two ways it and a node cache
//! get in each other's way.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use super::firewall::{Backend, Ruleset};
use super::interfaces::{self, Link};
use super::notrack::Notrack;
use super::{CacheAddresses, Out, join};
use crate::doctor::{Finding, Severity};

pub(crate) struct Context<'a> {
    pub(crate) cache: &'a CacheAddresses,
    pub(crate) rulesets: &'a [Ruleset],
    pub(crate) notrack: &'a Notrack,
    pub(crate) proc_root: &'a Path,
    pub(crate) links: Option<&'a [Link]>,
    pub(crate) kubelet_config: &'a Path,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Iptables,
    Nftables,
    Ipvs,
}

impl Mode {
    fn parse(text: &str) -> Option<Mode> {
        match text.trim() {
            "iptables" => Some(Mode::Iptables),
            "nftables" => Some(Mode::Nftables),
            "ipvs" => Some(Mode::Ipvs),
            _ => None,
        }
    }
    fn name(&self) -> &'static str {
        match self {
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
            Mode::Ipvs => "ipvs",
        }
    }
}

/// kube-proxy's metrics port answers its mode on loopback.
const PROXY_MODE_URL: ([u8; 4], u16) = ([127, 0, 0, 1], 10249);
const PROXY_MODE_DEADLINE: Duration = Duration::from_millis(200);

pub(crate) fn check(cx: &Context, out: &mut Out) {
    let kube_chains = kube_chains_by_backend(cx.rulesets);
    let ipvs = ipvs_services(cx.proc_root);
    let ipvs_link = cx
        .links
        .is_some_and(|l| interfaces::exists(l, "kube-ipvs0"));
    let nft_table = cx
        .rulesets
        .iter()
        .filter_map(Ruleset::listing)
        .any(|l| l.tables.contains("ip kube-proxy") || l.tables.contains("ip6 kube-proxy"));
    let mut evidence = Vec::new();
    for (backend, n) in &kube_chains {
        evidence.push(format!(
            "{}: KUBE-SERVICES and {n} KUBE-* chains",
            backend.name()
        ));
    }
    if nft_table {
        evidence.push("nftables: table ip kube-proxy".to_string());
    }
    if let Some(services) = &ipvs
        && !services.is_empty()
    {
        evidence.push(format!(
            "/proc/net/ip_vs: {} virtual services",
            services.len()
        ));
    }
    if ipvs_link {
        evidence.push("interface kube-ipvs0 exists".to_string());
    }
    let answered = proxy_mode();
    if let Some(mode) = &answered {
        evidence.push(format!("127.0.0.1:10249/proxyMode answers {}", mode.name()));
    }
    let mode = answered.or_else(|| {
        if ipvs.as_ref().is_some_and(|s| !s.is_empty()) || ipvs_link {
            Some(Mode::Ipvs)
        } else if nft_table {
            Some(Mode::Nftables)
        } else if !kube_chains.is_empty() {
            Some(Mode::Iptables)
        } else {
            None
        }
    });
    let Some(mode) = mode else {
        out.fact(
            "kube-proxy: no trace of it (no KUBE-SERVICES chain, no kube-proxy table, no IPVS)",
        );
        return;
    };
    out.fact(format!(
        "kube-proxy mode: {} ({})",
        mode.name(),
        evidence.join("; ")
    ));
    let primary = kube_chains.iter().max_by_key(|(_, n)| **n).map(|(b, _)| *b);
    if mode == Mode::Nftables {
        check_nftables_mode(cx, &evidence, out);
    } else if let Some(kube_backend) = primary {
        check_backends(cx, kube_backend, &kube_chains, out);
    }
    if mode == Mode::Ipvs {
        check_cluster_dns(cx, &evidence, ipvs.as_deref().unwrap_or_default(), out);
    }
}

/// iptables backend -> number of KUBE-* chains, for the backends that
/// hold KUBE-SERVICES.
fn kube_chains_by_backend(rulesets: &[Ruleset]) -> BTreeMap<Backend, usize> {
    rulesets
        .iter()
        .filter(|r| r.backend != Backend::Nftables)
        .filter_map(|r| Some((r.backend, r.listing()?)))
        .filter(|(_, l)| l.chains.iter().any(|c| c.ends_with(" KUBE-SERVICES")))
        .map(|(b, l)| {
            let names: BTreeSet<&str> = l
                .chains
                .iter()
                .filter_map(|c| c.split(' ').next_back())
                .filter(|c| c.starts_with("KUBE-"))
                .collect();
            (b, names.len())
        })
        .collect()
}

/// `backend-mismatch`: a node cache's NOTRACK rules sit in the other
/// iptables flavour than kube-proxy's chains.
fn check_backends(
    cx: &Context,
    kube: Backend,
    kube_chains: &BTreeMap<Backend, usize>,
    out: &mut Out,
) {
    let cache = cx.notrack.cache_backends();
    let other: Vec<(&Backend, &Vec<String>)> = cache
        .iter()
        .filter(|(b, _)| **b != Backend::Nftables && **b != kube)
        .collect();
    if other.is_empty() {
        return;
    }
    let mut f = Finding::new(
        "backend-mismatch",
        Severity::Warning,
        format!(
            "the node cache's NOTRACK rules are in {}, kube-proxy's chains in {}",
            join(&other.iter().map(|(b, _)| b.name()).collect::<Vec<_>>()),
            kube.name()
        ),
    );
    for (b, n) in kube_chains {
        f = f.evidence(format!("{}: KUBE-SERVICES and {n} KUBE-* chains", b.name()));
    }
    for line in Notrack::cache_evidence(&cache) {
        f = f.evidence(line);
    }
    out.finding(f.fix(format!(
        "Both flavours work in the kernel, but a tool or a node cache that uses the other one \
         sees nothing (`iptables -t raw -L` lies), and rules in both are evaluated in an order \
         that is not obvious. Keep the rules in {kube}: nodens's iptables backend follows \
         kube-proxy's flavour by itself ([node] backend = \"iptables\"; `nodens node teardown` \
         removes what an earlier run left in {other}); node-local-dns must run the same \
         iptables flavour as kube-proxy (its image's iptables wrapper picks it the same way).",
        kube = kube.name(),
        other = other[0].0.name(),
    )));
}

/// `backend-mismatch` in nftables mode: a node cache's NOTRACK rules in
/// iptables while kube-proxy's are in its own nftables table. They still
/// work (the raw hooks, at -300, run before kube-proxy's DNAT at -100), so
/// it is information: where to look, and how nodens follows kube-proxy.
fn check_nftables_mode(cx: &Context, mode_evidence: &[String], out: &mut Out) {
    let cache = cx.notrack.cache_backends();
    let in_iptables: Vec<Backend> = cache
        .keys()
        .copied()
        .filter(|b| *b != Backend::Nftables)
        .collect();
    if in_iptables.is_empty() {
        return;
    }
    let names: Vec<&str> = in_iptables.iter().map(|b| b.name()).collect();
    let mut f = Finding::new(
        "backend-mismatch",
        Severity::Info,
        format!(
            "kube-proxy is in nftables mode, the node cache's NOTRACK rules in {}",
            join(&names)
        ),
    );
    for line in mode_evidence {
        f = f.evidence(format!("kube-proxy: {line}"));
    }
    for line in Notrack::cache_evidence(&cache) {
        f = f.evidence(line);
    }
    out.finding(f.fix(
        "The rules work: the kernel runs every raw hook (priority -300) before kube-proxy's \
         DNAT (-100), whichever tool wrote them. But `nft list table ip kube-proxy` and \
         `iptables-save` each show only half of the DNS path. nodens with [node] backend = \
         \"auto\" (the chart's default) or \"nftables\" keeps its rules in nftables, next to \
         kube-proxy's (`nodens node teardown` removes what an earlier run left in iptables); \
         node-local-dns has no nftables backend (kubernetes/dns#682), so with it the rules \
         stay in iptables.",
    ));
}

/// `ipvs-cluster-dns`: in IPVS mode kube-ipvs0 holds the kube-dns
/// Service IP, so a node cache cannot take it over; pods reach the cache
/// only when the kubelet hands out the cache's own address.
fn check_cluster_dns(cx: &Context, mode_evidence: &[String], ipvs: &[IpAddr], out: &mut Out) {
    let text = match std::fs::read_to_string(cx.kubelet_config) {
        Ok(text) => text,
        Err(e) => {
            out.fact(format!(
                "kubelet clusterDNS: not read ({}: {e})",
                cx.kubelet_config.display()
            ));
            return;
        }
    };
    let cluster_dns = parse_cluster_dns(&text);
    out.fact(format!(
        "kubelet clusterDNS ({}): {}",
        cx.kubelet_config.display(),
        join(&cluster_dns)
    ));
    let cache_ips = cx.cache.ips();
    if cluster_dns.is_empty() || cluster_dns.iter().any(|ip| cache_ips.contains(ip)) {
        return;
    }
    let present: Vec<&String> = cx.notrack.presence.values().flatten().collect();
    if present.is_empty() {
        return;
    }
    let mut f = Finding::new(
        "ipvs-cluster-dns",
        Severity::Critical,
        "kube-proxy is in IPVS mode and the kubelet hands pods the kube-dns Service IP: the node cache is bypassed",
    );
    for line in mode_evidence {
        f = f.evidence(format!("kube-proxy: {line}"));
    }
    f = f.evidence(format!(
        "kubelet clusterDNS ({}): {}",
        cx.kubelet_config.display(),
        join(&cluster_dns)
    ));
    for ip in &cluster_dns {
        let on_ipvs0 = cx.links.and_then(|l| interfaces::holder(l, *ip)) == Some("kube-ipvs0");
        if on_ipvs0 || ipvs.contains(ip) {
            f = f.evidence(format!(
                "{ip} is an IPVS virtual service (held by kube-ipvs0)"
            ));
        }
    }
    for line in present {
        f = f.evidence(format!("node cache: {line}"));
    }
    out.finding(f.fix(format!(
        "In IPVS mode the node cache cannot take over the Service IP (kube-ipvs0 holds it). \
         Point the kubelet at the cache's own address (node-local-dns's IPVS setup):\n\
         \x20 clusterDNS:\n\
         \x20 - {}\n\
         in the kubelet configuration (or --cluster-dns), then restart the kubelet; pods get \
         it when they are recreated.",
        cache_ips[0]
    )));
}

/// The `clusterDNS:` list of a kubelet configuration (YAML), in block
/// (`- 10.96.0.10`) or flow (`[10.96.0.10]`) style, read line by line.
pub(crate) fn parse_cluster_dns(text: &str) -> Vec<IpAddr> {
    let ip = |s: &str| {
        s.trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .parse::<IpAddr>()
            .ok()
    };
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("clusterDNS:") else {
            continue;
        };
        let rest = rest.split('#').next().unwrap_or_default().trim();
        if let Some(flow) = rest.strip_prefix('[') {
            return flow
                .trim_end_matches(']')
                .split(',')
                .filter_map(ip)
                .collect();
        }
        return lines
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map_while(|l| l.strip_prefix('-'))
            .filter_map(|v| ip(v.split('#').next().unwrap_or_default()))
            .collect();
    }
    Vec::new()
}

/// The IPv4 virtual service addresses in /proc/net/ip_vs; `None` when
/// the file is absent (no IPVS module).
fn ipvs_services(proc_root: &Path) -> Option<Vec<IpAddr>> {
    let text = std::fs::read_to_string(proc_root.join("net/ip_vs")).ok()?;
    Some(parse_ip_vs(&text))
}

/// "TCP  0A60000A:0035 rr" lines: the address is hex, network order.
pub(crate) fn parse_ip_vs(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let proto = words.next()?;
            if proto != "TCP" && proto != "UDP" {
                return None;
            }
            let (hex, _) = words.next()?.split_once(':')?;
            let n = u32::from_str_radix(hex, 16).ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(n)))
        })
        .collect()
}

/// kube-proxy's own answer, when its metrics port answers on loopback
/// within 200 ms.
fn proxy_mode() -> Option<Mode> {
    let deadline = Instant::now() + PROXY_MODE_DEADLINE;
    let addr = SocketAddr::from(PROXY_MODE_URL);
    let mut stream = TcpStream::connect_timeout(&addr, PROXY_MODE_DEADLINE).ok()?;
    let left = deadline.checked_duration_since(Instant::now())?;
    stream.set_read_timeout(Some(left)).ok()?;
    stream.set_write_timeout(Some(left)).ok()?;
    stream
        .write_all(b"GET /proxyMode HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut response = Vec::new();
    stream.take(4096).read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then_some(())
        .or_else(|| head.starts_with("HTTP/1.0 200").then_some(()))?;
    Mode::parse(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_dns_in_block_and_flow_style() {
        let block = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
            clusterDNS:\n- 10.96.0.10\n  - \"fd00::a\" # v6\nclusterDomain: cluster.local\n";
        assert_eq!(
            parse_cluster_dns(block),
            vec![
                "10.96.0.10".parse::<IpAddr>().unwrap(),
                "fd00::a".parse().unwrap()
            ]
        );
        let flow = "clusterDNS: [169.254.20.10, '10.96.0.10']\n";
        assert_eq!(parse_cluster_dns(flow).len(), 2);
        assert!(parse_cluster_dns("kind: KubeletConfiguration\n").is_empty());
        assert!(parse_cluster_dns("clusterDNS:\nclusterDomain: x\n").is_empty());
    }

    #[test]
    fn ip_vs_virtual_services() {
        let text = "IP Virtual Server version 1.2.1 (size=4096)\n\
            Prot LocalAddress:Port Scheduler Flags\n\
              -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
            UDP  0A60000A:0035 rr\n\
              -> 0A000105:0035      Masq    1      0          0\n\
            TCP  0A600001:01BB rr\n";
        assert_eq!(
            parse_ip_vs(text),
            vec![
                "10.96.0.10".parse::<IpAddr>().unwrap(),
                "10.96.0.1".parse().unwrap()
            ]
        );
    }
}
