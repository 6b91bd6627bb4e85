//! The authoritative servers behind both sides: one CoreDNS per namespace
//! with `file` zones, bound to the addresses a Corefile forwards to, in the
//! role each address plays (cluster DNS, node resolver, stub server).

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use support::{BIG_TXT_COUNT, zone_file};

use super::cases::Case;

/// `fd00::50` -> `0.5.0.0. ... .d.f.ip6.arpa.`
pub(super) fn reverse_v6(ip: &str) -> String {
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
pub(super) fn authority(case: &Case) -> (String, Vec<(String, String)>) {
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
