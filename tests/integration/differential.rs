//! The differential test of `nodens convert-corefile` (issue 29): every
//! Corefile the installers and charts generate (tests/fixtures/corefile/
//! installers/) runs as is in CoreDNS 1.13, the reference node-cache is built
//! on, and its conversion runs in nodens; both forward to the same
//! authoritative servers, are asked the same queries over UDP and TCP on
//! every address the Corefile binds, and must answer alike (RCODE, answer
//! set, SOA in authority, TC: [`Compared`]).
//!
//! Each side has a network namespace of its own holding, on `lo`, the
//! Corefile's bind addresses and the addresses its `forward` lines name;
//! behind those an authoritative CoreDNS (`file` zones) plays the cluster
//! DNS (the cluster domain, the reverse zones, and external names as
//! kube-dns resolves them), the node's resolver (external names, NXDOMAIN
//! for the rest) and stub-domain servers. nodens runs without node setup
//! (`[node] setup = false`: the test put the addresses on `lo`).
//!
//! What still differs is listed in [`KNOWN`], each with the feature that
//! will remove it. The test fails on a difference or an untranslated line
//! not listed there, and on a listed one that no longer occurs, so the list
//! only shrinks. Run it alone, with its table: `cargo test --test
//! integration differential:: -- --nocapture`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::*;

/// The kube-dns-upstream Service's address: what node-cache puts for
/// `__PILLAR__CLUSTER__DNS__` and nodens reads from
/// `KUBE_DNS_UPSTREAM_SERVICE_HOST` (`upstream_service`).
const UPSTREAM_SVC: &str = "10.96.0.11";
const UPSTREAM_SVC_V6: &str = "fd00:96::11";
/// The nameserver of the test's resolv.conf (the node's resolver).
const RESOLVER: &str = "198.51.100.53";
const RESOLVER_V6: &str = "fd00:53::53";

/// How long one query may take before it counts as unanswered.
const QUERY_DEADLINE: Duration = Duration::from_secs(2);
/// How many Corefiles are run at once (each: four processes, two namespaces).
const CASES_AT_ONCE: usize = 3;

/// One Corefile of the corpus and the cluster around it.
struct Case {
    file: &'static str,
    /// The cluster domain its cluster DNS serves (and the queries use).
    domain: &'static str,
    /// The addresses it binds: every query is asked on each, port 53.
    binds: &'static [&'static str],
    /// Where its `forward` lines send, after node-cache's substitutions:
    /// the cluster DNS, the node's resolver, stub-domain servers.
    cluster: &'static [&'static str],
    resolvers: &'static [&'static str],
    stubs: &'static [&'static str],
    /// `--local-dns`, for a Corefile that keeps `__PILLAR__LOCAL__DNS__`.
    local_dns: Option<&'static str>,
    /// The kube-dns-upstream address and resolv.conf nameserver are IPv6.
    ipv6: bool,
    /// Names asked besides [`common_queries`].
    extra: &'static [(&'static str, Rt)],
}

const KUBESPRAY_EXTRA: &[(&str, Rt)] = &[
    ("app.corp.example.", Rt::A),
    ("registry.corp.example.", Rt::A),
    ("db.internal.test.", Rt::A),
    ("website.mydomain.tld.", Rt::A),
    ("localhost.", Rt::A),
    ("1.0.0.127.in-addr.arpa.", Rt::PTR),
];

const CASES: &[Case] = &[
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

/// What is expected to still differ: `(file, what, why)`, where `what` is
/// `line N` for a line `convert-corefile` reports as not translated,
/// `NAME TYPE` for a query answered differently (on any bound address, over
/// UDP or TCP), or `on IP` for every query asked on that address. `why`
/// says why, and which feature will remove it.
const KNOWN: &[(&str, &str, &str)] = &[
    // kubespray: dns_etchosts, an external zone's rewrite, additional configs.
    ("kubespray.Corefile", "line 29", HOSTS),
    ("kubespray.Corefile", "line 37", REWRITE),
    ("kubespray.Corefile", "line 88", WHOAMI_SHADOWED),
    ("kubespray.Corefile", "line 89", LOCAL),
    ("kubespray.Corefile", "registry.corp.example. A", HOSTS),
    ("kubespray.Corefile", "db.internal.test. A", HOSTS),
    ("kubespray.Corefile", "website.mydomain.tld. A", REWRITE),
    ("kubespray.Corefile", "localhost. A", LOCAL),
    ("kubespray-secondary.Corefile", "line 18", HOSTS),
    ("kubespray-secondary.Corefile", "line 76", WHOAMI_SHADOWED),
    ("kubespray-secondary.Corefile", "line 77", LOCAL),
    (
        "kubespray-secondary.Corefile",
        "registry.corp.example. A",
        HOSTS,
    ),
    ("kubespray-secondary.Corefile", "db.internal.test. A", HOSTS),
    ("kubespray-secondary.Corefile", "localhost. A", LOCAL),
    // kops on an IPv6-only cluster.
    ("kops-ipv6.Corefile", "line 55", DNS64),
    ("kops-ipv6.Corefile", "v4only.example.com. AAAA", DNS64),
    // Gardener: the coredns-custom overrides (none here).
    ("gardener.Corefile", "line 25", IMPORT),
    // deliveryhero: noIPv6Lookups.
    ("deliveryhero.Corefile", "line 28", TEMPLATE_AAAA),
    (
        "deliveryhero.Corefile",
        "web.default.svc.cluster.local. AAAA",
        TEMPLATE_AAAA,
    ),
    (
        "deliveryhero.Corefile",
        "www.example.com.svc.cluster.local. AAAA",
        TEMPLATE_AAAA,
    ),
    (
        "deliveryhero.Corefile",
        "www.example.com. AAAA",
        TEMPLATE_AAAA,
    ),
    (
        "deliveryhero.Corefile",
        "v4only.example.com. AAAA",
        TEMPLATE_AAAA,
    ),
    // lablabs: template and hosts in the `.` zone.
    ("lablabs.Corefile", "line 20", TEMPLATE_AAAA),
    ("lablabs.Corefile", "line 24", HOSTS),
    ("lablabs.Corefile", "line 37", EXCEPT),
    (
        "lablabs.Corefile",
        "web.default.svc.cluster.local. AAAA",
        TEMPLATE_AAAA,
    ),
    (
        "lablabs.Corefile",
        "www.example.com.svc.cluster.local. AAAA",
        TEMPLATE_AAAA,
    ),
    ("lablabs.Corefile", "www.example.com. AAAA", TEMPLATE_AAAA),
    (
        "lablabs.Corefile",
        "v4only.example.com. AAAA",
        TEMPLATE_AAAA,
    ),
    ("lablabs.Corefile", "blabla.lala. A", HOSTS),
    ("lablabs.Corefile", "db.corp.internal. A", EXCEPT),
    // AKS LocalDNS: two listeners with zones of their own.
    ("aks-localdns.Corefile", "line 15", AKS_VIEWS),
    ("aks-localdns.Corefile", "line 17", WHOAMI),
    ("aks-localdns.Corefile", "line 31", SERVE_STALE),
    ("aks-localdns.Corefile", "line 35", NSID),
    ("aks-localdns.Corefile", "line 37", AKS_TEMPLATE),
    ("aks-localdns.Corefile", "line 42", AKS_TEMPLATE),
    ("aks-localdns.Corefile", "line 66", AKS_VIEWS),
    ("aks-localdns.Corefile", "line 81", NSID),
    ("aks-localdns.Corefile", "line 92", AKS_VIEWS),
    (
        "aks-localdns.Corefile",
        "health-check.localdns.local. A",
        WHOAMI,
    ),
    (
        "aks-localdns.Corefile",
        "a.b.c.d.internal.cloudapp.net. A",
        AKS_TEMPLATE,
    ),
    (
        "aks-localdns.Corefile",
        "host.reddog.microsoft.com. A",
        AKS_TEMPLATE,
    ),
    ("aks-localdns.Corefile", "on 169.254.10.11", AKS_VIEWS),
    // Users' Corefiles from issues.
    ("user-hosts.Corefile", "line 48", HOSTS),
    ("user-hosts.Corefile", "marketplace.domain.dom. A", HOSTS),
    ("user-rewrite.Corefile", "line 9", REWRITE),
    ("user-rewrite.Corefile", "git.my.domain. A", REWRITE),
];

const HOSTS: &str = "`hosts` is not translated: its names go upstream (NXDOMAIN, or the \
                     stub's own record); local records (`hosts`), the records work";
const REWRITE: &str = "`rewrite name` is not translated: the name is asked as is; \
                       query-name rewrites, the rewrite work";
const LOCAL: &str = "`local` is not translated: localhost goes upstream; the records work";
const WHOAMI: &str = "`whoami` is not translated (its block has no zone in nodens); \
                      the records work";
const WHOAMI_SHADOWED: &str = "`whoami` after `forward` answers nothing in CoreDNS (plugin \
                               order), so no answer differs; reported until the records \
                               work translates it or the converter says it is shadowed";
const EXCEPT: &str = "`forward ... except` is not translated: the excepted names go \
                      upstream; the rewrite work";
const DNS64: &str = "`dns64` is not translated: no AAAA is synthesized; the rewrite work";
const IMPORT: &str = "`import custom/*.override` is not translated (here no override \
                      file exists, so no answer changes); the views work (import)";
const TEMPLATE_AAAA: &str = "`template IN AAAA` (NOERROR, no records) is not translated: \
                             AAAA goes upstream; synthesized answers (`template`), the \
                             records work";
const AKS_TEMPLATE: &str = "`template ANY ANY ... rcode NXDOMAIN` is not translated: the \
                            names go upstream; the records work";
const AKS_VIEWS: &str = "blocks per listen address: the second `.` and `cluster.local` \
                         blocks and the whoami block are left out, so 169.254.10.11 is not \
                         listened on at all; views by listen address, the views work";
const SERVE_STALE: &str = "serve_stale immediate has no equivalent (only an upstream \
                           failure shows it, not exercised here); the zonecache work";
const NSID: &str = "`nsid` adds an EDNS option only (not compared here); no equivalent";

/// The queries every Corefile is asked, for cluster domain `d`.
fn common_queries(d: &str) -> Vec<(String, Rt)> {
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

/// `fd00::50` -> `0.5.0.0. ... .d.f.ip6.arpa.`
fn reverse_v6(ip: &str) -> String {
    let ip: Ipv6Addr = ip.parse().unwrap();
    let mut s = String::new();
    for byte in ip.octets().iter().rev() {
        write!(s, "{:x}.{:x}.", byte & 0xf, byte >> 4).unwrap();
    }
    s + "ip6.arpa."
}

/// The zones of the authoritative servers. Addresses are documentation
/// and private ones; nothing leaves the namespaces.
fn zones(domain: &str) -> Vec<(&'static str, String, String)> {
    let root = "$ORIGIN .\n$TTL 3600\n\
                @ 3600 IN SOA ns.root-servers.test. hostmaster.root-servers.test. 1 7200 3600 1209600 30\n\
                @ 3600 IN NS ns.root-servers.test.\n"
        .to_string();
    let mut example = String::from(
        "www 300 IN A 192.0.2.1\n\
         www 300 IN AAAA 2001:db8::1\n\
         alias 300 IN CNAME www\n\
         @ 300 IN MX 10 mail\n\
         mail 300 IN A 192.0.2.3\n\
         txt 300 IN TXT \"hello\"\n\
         v4only 300 IN A 192.0.2.4\n",
    );
    for i in 0..BIG_TXT_COUNT {
        writeln!(example, "big 300 IN TXT \"{i:02}{}\"", "b".repeat(98)).unwrap();
    }
    let cluster = format!(
        "kubernetes.default.svc 30 IN A 10.96.0.1\n\
         web.default.svc 30 IN A 10.96.0.50\n\
         web.default.svc 30 IN AAAA fd00::50\n\
         headless.default.svc 30 IN A 10.244.1.5\n\
         headless.default.svc 30 IN A 10.244.2.7\n\
         _http._tcp.web.default.svc 30 IN SRV 0 100 80 web.default.svc.{domain}.\n\
         git.gogs.svc 30 IN A 10.96.0.60\n"
    );
    let in_addr = format!(
        "1.0.96.10 30 IN PTR kubernetes.default.svc.{domain}.\n\
         50.0.96.10 30 IN PTR web.default.svc.{domain}.\n"
    );
    let ip6 = format!(
        "{} 30 IN PTR web.default.svc.{domain}.\n",
        reverse_v6("fd00::50")
    );
    vec![
        ("external", ".".into(), root),
        (
            "external",
            "example.com.".into(),
            zone_file("example.com.", &example),
        ),
        (
            "external",
            "internal.cloudapp.net.".into(),
            zone_file(
                "internal.cloudapp.net.",
                "vm1 300 IN A 10.1.0.4\na.b.c.d 300 IN A 10.1.0.5\n",
            ),
        ),
        (
            "external",
            "reddog.microsoft.com.".into(),
            zone_file("reddog.microsoft.com.", "host 300 IN A 10.1.0.6\n"),
        ),
        (
            "cluster",
            format!("{domain}."),
            zone_file(&format!("{domain}."), &cluster),
        ),
        (
            "cluster",
            "in-addr.arpa.".into(),
            zone_file("in-addr.arpa.", &in_addr),
        ),
        ("cluster", "ip6.arpa.".into(), zone_file("ip6.arpa.", &ip6)),
        (
            "stub",
            "corp.example.".into(),
            zone_file(
                "corp.example.",
                "app 300 IN A 10.10.1.1\nregistry 300 IN A 10.10.1.2\n",
            ),
        ),
    ]
}

/// The authoritative servers' Corefile and zone files: the cluster DNS
/// serves its zones and, as kube-dns does through its own upstream, the
/// external ones; the resolver the external ones; stubs `corp.example`.
fn authority(case: &Case) -> (String, Vec<(String, String)>) {
    let mut corefile = String::new();
    let mut files = Vec::new();
    for (i, (role, origin, text)) in zones(case.domain).into_iter().enumerate() {
        let binds: Vec<&str> = match role {
            "external" => case.cluster.iter().chain(case.resolvers).copied().collect(),
            "cluster" => case.cluster.to_vec(),
            _ => case.stubs.to_vec(),
        };
        if binds.is_empty() {
            continue;
        }
        let file = format!("db.{i}");
        writeln!(
            corefile,
            "{origin}:53 {{\n  bind {}\n  file {file}\n}}",
            binds.join(" ")
        )
        .unwrap();
        files.push((file, text));
    }
    (corefile, files)
}

fn corpus(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corefile/installers")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A line `convert-corefile` reported as not translated.
#[derive(Debug)]
struct Untranslated {
    line: usize,
    message: String,
}

/// Converts `corefile` (already at `path`) with the real binary.
fn convert(case: &Case, path: &Path, resolv: &Path) -> (String, Vec<Untranslated>) {
    let mut cmd = Command::new(nodens_bin());
    cmd.arg("convert-corefile")
        .arg(path)
        .arg("--resolv-conf")
        .arg(resolv)
        .env("KUBE_DNS_UPSTREAM_SERVICE_HOST", upstream_svc(case))
        .env_remove("KUBE_DNS_UPSTREAM_SERVICE_PORT");
    if let Some(ip) = case.local_dns {
        cmd.args(["--local-dns", ip]);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{}: convert-corefile failed: {stderr}",
        case.file
    );
    let prefix = format!("{}:", path.display());
    let untranslated = stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (line, rest) = rest.split_once(": not translated: ")?;
            Some(Untranslated {
                line: line.parse().ok()?,
                message: rest.to_string(),
            })
        })
        .collect();
    (String::from_utf8(out.stdout).unwrap(), untranslated)
}

fn upstream_svc(case: &Case) -> &'static str {
    if case.ipv6 {
        UPSTREAM_SVC_V6
    } else {
        UPSTREAM_SVC
    }
}

/// The namespace of one side, with every address the case uses on `lo`.
fn namespace(tag: &str, case: &Case) -> Netns {
    let ns = Netns::create(tag);
    let all = case
        .binds
        .iter()
        .chain(case.cluster)
        .chain(case.resolvers)
        .chain(case.stubs);
    for ip in all {
        let parsed: IpAddr = ip.parse().unwrap();
        if parsed.is_ipv6() {
            ns.run(&[
                "ip",
                "-6",
                "addr",
                "add",
                &format!("{ip}/128"),
                "dev",
                "lo",
                "nodad",
            ]);
        } else {
            ns.run(&["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"]);
        }
    }
    ns
}

/// One query asked of both sides.
#[derive(Clone)]
struct Ask {
    server: SocketAddr,
    tcp: bool,
    name: String,
    qtype: Rt,
}

fn ask(a: &Ask) -> Compared {
    let q = Q::new(&a.name, a.qtype);
    if a.tcp {
        Compared::of_option(tcp_query_timeout(a.server, &q, QUERY_DEADLINE).as_ref())
    } else {
        Compared::of_option(udp_query_timeout(a.server, &q, QUERY_DEADLINE).as_ref())
    }
}

/// Asks every query inside namespace `ns`, several at once.
fn ask_all(ns: &str, asks: &[Ask], threads: usize) -> Vec<Compared> {
    let threads = threads.clamp(1, asks.len().max(1));
    in_netns(ns, || {
        let chunks: Vec<Vec<Compared>> = in_parallel(threads, |t| {
            asks.iter().skip(t).step_by(threads).map(ask).collect()
        });
        // Back in the order of `asks`.
        (0..asks.len())
            .map(|i| chunks[i % threads][i / threads].clone())
            .collect()
    })
}

/// Asks `asks` of both sides at once; the answers of each, in order.
fn ask_both(ns_ref: &str, ns_new: &str, asks: &[Ask], threads: usize) -> Vec<(Compared, Compared)> {
    std::thread::scope(|s| {
        let r = s.spawn(|| ask_all(ns_ref, asks, threads));
        let n = ask_all(ns_new, asks, threads);
        r.join().expect("coredns side").into_iter().zip(n).collect()
    })
}

/// Waits until something answers a query on `server` inside `ns`.
fn wait_answering(ns: &str, server: SocketAddr, what: &str) {
    let probe = Q::new("example.com.", Rt::SOA);
    in_netns(ns, || {
        wait_until(Duration::from_secs(20), what, || {
            udp_query_timeout(server, &probe, Duration::from_millis(300)).map(|_| ())
        })
    });
}

/// A query whose answers differ.
struct Mismatch {
    what: String,
    server: SocketAddr,
    tcp: bool,
    coredns: Compared,
    nodens: Compared,
}

/// What one Corefile gave.
struct Report {
    file: &'static str,
    untranslated: Vec<Untranslated>,
    asked: usize,
    mismatches: Vec<Mismatch>,
    took: Duration,
}

fn run_case(case: &Case) -> Report {
    let start = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    let resolver = if case.ipv6 { RESOLVER_V6 } else { RESOLVER };
    std::fs::write(&resolv, format!("nameserver {resolver}\n")).unwrap();
    let hosts = dir.path().join("hosts");
    // kubespray's dns_etchosts, as its header says (ConfigMap key hosts).
    std::fs::write(
        &hosts,
        "10.20.30.40 registry.corp.example\n10.20.30.41 db.internal.test\n",
    )
    .unwrap();

    // Substitution for both sides: the node's /etc/resolv.conf and the
    // mounted hosts file become the test's files (the test's resolver is
    // inside the namespace).
    let text = corpus(case.file)
        .replace("/etc/resolv.conf", resolv.to_str().unwrap())
        .replace("/etc/coredns/hosts", hosts.to_str().unwrap());
    let path = dir.path().join(case.file);
    std::fs::write(&path, &text).unwrap();
    let (toml, untranslated) = convert(case, &path, &resolv);
    // The test put the addresses on `lo`: no node setup, no supervisor.
    let toml = toml.replace("setup = true", "setup = false");

    // Substitution for CoreDNS only: the pillars node-cache fills at start
    // (`-upstreamsvc` to the Service's address, the upstream servers to
    // /etc/resolv.conf, here the test's, and `-localip`).
    let mut reference = text
        .replace("__PILLAR__CLUSTER__DNS__", upstream_svc(case))
        .replace("__PILLAR__UPSTREAM__SERVERS__", resolv.to_str().unwrap());
    if let Some(ip) = case.local_dns {
        reference = reference.replace("__PILLAR__LOCAL__DNS__", ip);
    }

    let stem = case.file.trim_end_matches(".Corefile");
    let (auth_corefile, auth_files) = authority(case);
    let auth_files: Vec<(&str, String)> = auth_files
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let ns_ref = namespace("dref", case);
    let ns_new = namespace("dnew", case);
    let first_authority: SocketAddr = SocketAddr::new(
        case.cluster
            .iter()
            .chain(case.resolvers)
            .next()
            .unwrap()
            .parse()
            .unwrap(),
        53,
    );
    let _auth_ref = CorefileServer::launch(
        &format!("{stem} authority (coredns side)"),
        &ns_ref.exec(),
        &auth_corefile,
        &auth_files,
    );
    let _auth_new = CorefileServer::launch(
        &format!("{stem} authority (nodens side)"),
        &ns_new.exec(),
        &auth_corefile,
        &auth_files,
    );
    wait_answering(
        &ns_ref.name,
        first_authority,
        "the authority (coredns side)",
    );
    wait_answering(&ns_new.name, first_authority, "the authority (nodens side)");

    let _coredns =
        CorefileServer::launch(&format!("{stem} coredns"), &ns_ref.exec(), &reference, &[]);
    let env = format!("KUBE_DNS_UPSTREAM_SERVICE_HOST={}", upstream_svc(case));
    let mut wrapper = ns_new.exec().to_vec();
    wrapper.extend(["env", env.as_str()]);
    let mut nodens = Nodens::launch(&toml, &wrapper);
    let servers: Vec<SocketAddr> = case
        .binds
        .iter()
        .map(|ip| SocketAddr::new(ip.parse().unwrap(), 53))
        .collect();
    for s in &servers {
        wait_answering(&ns_ref.name, *s, &format!("{stem}: CoreDNS on {s}"));
    }
    in_netns(&ns_new.name, || nodens.wait_ready());

    let mut queries = common_queries(case.domain);
    queries.extend(case.extra.iter().map(|(n, t)| (n.to_string(), *t)));
    let mut asks = Vec::new();
    for server in &servers {
        for tcp in [false, true] {
            for (name, qtype) in &queries {
                asks.push(Ask {
                    server: *server,
                    tcp,
                    name: name.clone(),
                    qtype: *qtype,
                });
            }
        }
    }
    let first = ask_both(&ns_ref.name, &ns_new.name, &asks, 8);
    // A difference must hold when asked again: a query lost to a loaded
    // machine is not a difference of behaviour, while what a feature
    // changes answers the same way twice.
    let differing: Vec<Ask> = asks
        .iter()
        .zip(&first)
        .filter(|(_, (c, n))| c != n)
        .map(|(a, _)| a.clone())
        .collect();
    let again = ask_both(&ns_ref.name, &ns_new.name, &differing, 32);
    let mismatches = differing
        .iter()
        .zip(again)
        .filter(|(_, (c, n))| c != n)
        .map(|(a, (c, n))| Mismatch {
            what: format!("{} {}", a.name, a.qtype),
            server: a.server,
            tcp: a.tcp,
            coredns: c,
            nodens: n,
        })
        .collect();
    Report {
        file: case.file,
        untranslated,
        asked: asks.len(),
        mismatches,
        took: start.elapsed(),
    }
}

/// The table the test prints: per Corefile, its untranslated lines and the
/// queries answered differently.
fn table(reports: &[Report]) -> String {
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
        let mut seen = BTreeSet::new();
        for m in &r.mismatches {
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
fn check_known(reports: &[Report]) -> Vec<String> {
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

#[test]
fn installer_corefiles_answer_as_coredns_does() {
    needs!(Need::Root, Need::CoreDns);
    let next = AtomicUsize::new(0);
    let reports: Mutex<Vec<(usize, Report)>> = Mutex::new(Vec::new());
    in_parallel(CASES_AT_ONCE, |_| {
        loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(case) = CASES.get(i) else { return };
            let report = run_case(case);
            reports.lock().unwrap().push((i, report));
        }
    });
    let mut reports = reports.into_inner().unwrap();
    reports.sort_by_key(|(i, _)| *i);
    let reports: Vec<Report> = reports.into_iter().map(|(_, r)| r).collect();
    let table = table(&reports);
    eprintln!("{table}");
    let problems = check_known(&reports);
    assert!(
        problems.is_empty(),
        "the differential test disagrees with KNOWN:\n  {}\n{table}",
        problems.join("\n  ")
    );
}

#[test]
fn every_corpus_file_is_a_case() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corefile/installers");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".Corefile"))
        .collect();
    files.sort();
    let mut cases: Vec<String> = CASES.iter().map(|c| c.file.to_string()).collect();
    cases.sort();
    assert_eq!(
        files, cases,
        "a Corefile of the corpus without a case, or the reverse"
    );
    for (file, _, _) in KNOWN {
        assert!(
            cases.iter().any(|c| c == file),
            "KNOWN names {file}, not a case"
        );
    }
}
