//! The corpus as the test runs it: each Corefile with the cluster around it
//! (the addresses it binds and forwards to), the names asked, and what is
//! still expected to differ.

use super::Rt;
use super::authority::reverse_v6;

/// The kube-dns-upstream Service's address: what node-cache puts for
/// `__PILLAR__CLUSTER__DNS__` and nodens reads from
/// `KUBE_DNS_UPSTREAM_SERVICE_HOST` (`upstream_service`).
pub(super) const UPSTREAM_SVC: &str = "10.96.0.11";
pub(super) const UPSTREAM_SVC_V6: &str = "fd00:96::11";
/// The nameserver of the test's resolv.conf (the node's resolver).
pub(super) const RESOLVER: &str = "198.51.100.53";
pub(super) const RESOLVER_V6: &str = "fd00:53::53";

/// One Corefile of the corpus and the cluster around it.
pub(super) struct Case {
    pub(super) file: &'static str,
    /// The cluster domain its cluster DNS serves (and the queries use).
    pub(super) domain: &'static str,
    /// The addresses it binds: every query is asked on each, port 53.
    pub(super) binds: &'static [&'static str],
    /// Where its `forward` lines send, after node-cache's substitutions:
    /// the cluster DNS, the node's resolver, stub-domain servers.
    pub(super) cluster: &'static [&'static str],
    pub(super) resolvers: &'static [&'static str],
    pub(super) stubs: &'static [&'static str],
    /// `--local-dns`, for a Corefile that keeps `__PILLAR__LOCAL__DNS__`.
    pub(super) local_dns: Option<&'static str>,
    /// The kube-dns-upstream address and resolv.conf nameserver are IPv6.
    pub(super) ipv6: bool,
    /// Names asked besides [`common_queries`].
    pub(super) extra: &'static [(&'static str, Rt)],
}

const KUBESPRAY_EXTRA: &[(&str, Rt)] = &[
    ("app.corp.example.", Rt::A),
    ("registry.corp.example.", Rt::A),
    ("db.internal.test.", Rt::A),
    ("website.mydomain.tld.", Rt::A),
    ("localhost.", Rt::A),
    ("1.0.0.127.in-addr.arpa.", Rt::PTR),
];

pub(super) const CASES: &[Case] = &[
    Case {
        file: "kubernetes.Corefile",
        domain: "cluster.local",
        binds: &["169.254.20.10", "10.96.0.10"],
        cluster: &[UPSTREAM_SVC],
        resolvers: &[RESOLVER],
        stubs: &[],
        local_dns: None,
        ipv6: false,
        extra: &[],
    },
    Case {
        file: "kubespray.Corefile",
        domain: "cluster.local",
        binds: &["169.254.25.10"],
        cluster: &["10.233.0.3"],
        resolvers: &[RESOLVER],
        stubs: &["10.10.0.53"],
        local_dns: None,
        ipv6: false,
        extra: KUBESPRAY_EXTRA,
    },
    Case {
        file: "kubespray-secondary.Corefile",
        domain: "cluster.local",
        binds: &["169.254.25.10"],
        cluster: &["10.233.0.3"],
        resolvers: &[RESOLVER],
        stubs: &["10.10.0.53"],
        local_dns: None,
        ipv6: false,
        extra: KUBESPRAY_EXTRA,
    },
    Case {
        file: "kops.Corefile",
        domain: "cluster.local",
        binds: &["169.254.20.10"],
        cluster: &[UPSTREAM_SVC],
        resolvers: &[RESOLVER],
        stubs: &[],
        local_dns: None,
        ipv6: false,
        extra: &[],
    },
    Case {
        file: "kops-ipv6.Corefile",
        domain: "cluster.local",
        binds: &["fd00:90::a"],
        cluster: &[UPSTREAM_SVC_V6],
        resolvers: &[RESOLVER_V6],
        stubs: &[],
        local_dns: None,
        ipv6: true,
        extra: &[("www.example.com.", Rt::AAAA)],
    },
    Case {
        file: "gardener.Corefile",
        domain: "cluster.local",
        binds: &["169.254.20.10", "100.64.0.10"],
        cluster: &[UPSTREAM_SVC],
        resolvers: &[RESOLVER],
        stubs: &[],
        local_dns: None,
        ipv6: false,
        extra: &[],
    },
    Case {
        file: "kubeone.Corefile",
        domain: "cluster.local",
        binds: &["169.254.20.10"],
        cluster: &[UPSTREAM_SVC],
        resolvers: &[RESOLVER],
        stubs: &[],
        local_dns: Some("169.254.20.10"),
        ipv6: false,
        extra: &[],
    },
    Case {
        file: "deckhouse.Corefile",
        domain: "cluster.local",
        binds: &["169.254.20.10"],
        cluster: &["10.222.0.10"],
        resolvers: &[RESOLVER],
        stubs: &[],
        local_dns: None,
        ipv6: false,
        extra: &[],
    },
    Case {
        file: "deliveryhero.Corefile",
        domain: "cluster.local",
        binds: &["169.254.20.25", "172.20.0.10"],
        cluster: &[UPSTREAM_SVC],
        resolvers: &[RESOLVER],
        stubs: &["10.10.0.53"],
        local_dns: None,
        ipv6: false,
        extra: &[("app.corp.example.", Rt::A)],
    },
    Case {
        file: "lablabs.Corefile",
        domain: "cluster.local",
        binds: &["169.254.20.11"],
        cluster: &[],
        resolvers: &[RESOLVER],
        stubs: &[],
        local_dns: None,
        ipv6: false,
        extra: &[
            ("blabla.lala.", Rt::A),
            ("4.0.5.10.in-addr.arpa.", Rt::PTR),
            ("db.corp.internal.", Rt::A),
        ],
    },
    Case {
        file: "aks-localdns.Corefile",
        domain: "cluster.local",
        binds: &["169.254.10.10", "169.254.10.11"],
        cluster: &["10.0.0.10"],
        resolvers: &["168.63.129.16"],
        stubs: &[],
        local_dns: None,
        ipv6: false,
        extra: &[
            ("health-check.localdns.local.", Rt::A),
            ("vm1.internal.cloudapp.net.", Rt::A),
            ("a.b.c.d.internal.cloudapp.net.", Rt::A),
            ("host.reddog.microsoft.com.", Rt::A),
        ],
    },
    Case {
        file: "user-hosts.Corefile",
        domain: "cluster.local",
        binds: &["169.254.20.10", "172.20.0.10"],
        cluster: &["172.20.126.41"],
        resolvers: &[],
        stubs: &[],
        local_dns: None,
        ipv6: false,
        extra: &[("marketplace.domain.dom.", Rt::A)],
    },
    Case {
        file: "user-rewrite.Corefile",
        domain: "k8s.cluster",
        binds: &["169.254.25.10"],
        cluster: &["10.239.0.3"],
        resolvers: &["172.16.0.162", "172.16.0.163"],
        stubs: &[],
        local_dns: None,
        ipv6: false,
        extra: &[("git.my.domain.", Rt::A), ("other.my.domain.", Rt::A)],
    },
];

/// The queries every Corefile is asked, for cluster domain `d`.
pub(super) fn common_queries(d: &str) -> Vec<(String, Rt)> {
    let svc = |n: &str| format!("{n}.default.svc.{d}.");
    vec![
        (svc("kubernetes"), Rt::A),
        (svc("web"), Rt::A),
        (svc("web"), Rt::AAAA),
        (svc("web"), Rt::TXT),
        (svc("headless"), Rt::A),
        (format!("_http._tcp.web.default.svc.{d}."), Rt::SRV),
        (svc("nothere"), Rt::A),
        // Search-path expansions as a pod's resolver makes them (ndots:5).
        (format!("web.default.svc.{d}.default.svc.{d}."), Rt::A),
        (format!("www.example.com.default.svc.{d}."), Rt::A),
        (format!("www.example.com.svc.{d}."), Rt::AAAA),
        ("1.0.96.10.in-addr.arpa.".into(), Rt::PTR),
        ("50.0.96.10.in-addr.arpa.".into(), Rt::PTR),
        ("99.0.96.10.in-addr.arpa.".into(), Rt::PTR),
        (reverse_v6("fd00::50"), Rt::PTR),
        ("www.example.com.".into(), Rt::A),
        ("www.example.com.".into(), Rt::AAAA),
        ("alias.example.com.".into(), Rt::A),
        ("example.com.".into(), Rt::MX),
        ("txt.example.com.".into(), Rt::TXT),
        ("v4only.example.com.".into(), Rt::AAAA),
        ("nothere.example.com.".into(), Rt::A),
        ("big.example.com.".into(), Rt::TXT),
        ("nothere.invalid-tld.".into(), Rt::A),
    ]
}

/// What is expected to still differ: `(file, what, why)`, where `what` is
/// `line N` for a line `convert-corefile` reports as not translated,
/// `NAME TYPE` for a query answered differently (on any bound address, over
/// UDP or TCP), or `on IP` for every query asked on that address. `why`
/// says why, and which feature will remove it.
pub(super) const KNOWN: &[(&str, &str, &str)] = &[
    // AKS LocalDNS: `nsid` changes only answers to queries carrying the
    // NSID option, which no pod resolver sends.
    ("aks-localdns.Corefile", "line 35", NSID),
    ("aks-localdns.Corefile", "line 81", NSID),
];

const NSID: &str = "`nsid` adds an EDNS option only (not compared here); no equivalent";
