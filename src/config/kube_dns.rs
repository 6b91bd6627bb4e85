//! The kube-dns ConfigMap, as node-cache's `-kubednscm` follows it: a
//! mounted directory whose file `stubDomains` (JSON: domain -> list of
//! `IP[:port]`) adds one zone per stub domain, and whose file
//! `upstreamNameservers` (JSON list) replaces the root zone's upstreams.
//!
//! Read at each load like the rest of the file, so a bad file is a
//! configuration error at start and a failed reload (the running zones
//! kept) while running. [`KubeDnsSource`] remembers what was read; the
//! server polls it and reloads when the files change (a ConfigMap volume
//! swaps its `..data` symlink, so the content is compared, not times).
//!
//! As in node-cache, a stub domain is its own server block: `cache 30`
//! (answers and denials kept 30 s at most), `forward` to its servers
//! (CoreDNS's default policy, random), the rest at nodens's defaults. A
//! stub domain that is also a zone of the file is an error, as the
//! duplicate server block node-cache would write is to CoreDNS; the
//! upstream nameservers replace those of the root zone, over UDP (node-cache
//! turns the root zone's `force_tcp` off for them).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::check::{Invalid, key};
use super::file::{File, ZoneConfig};
use super::{UpstreamSettings, ZonePlan};
use crate::cache::TtlPolicy;
use crate::upstream::{Policy, Transport};
use crate::vocab::values::DnsAddr;
use crate::wire::name;

/// The file of the stub domains in the ConfigMap's directory.
const STUB_DOMAINS: &str = "stubDomains";
/// The file of the root zone's upstreams.
const UPSTREAM_NAMESERVERS: &str = "upstreamNameservers";
/// node-cache's `cache` TTL in a stub domain's block.
const STUB_DOMAIN_TTL: Duration = Duration::from_secs(30);
/// kube-dns's limit on `upstreamNameservers`.
const MAX_UPSTREAM_NAMESERVERS: usize = 3;

/// The files as last read, to tell when they change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeDnsSource {
    pub dir: PathBuf,
    pub interval: Duration,
    seen: [Option<Vec<u8>>; 2],
}

impl KubeDnsSource {
    /// Whether either file reads differently from what the running
    /// configuration was built from (a file that cannot be read counts
    /// as a change: the reload says what is wrong).
    pub fn changed(&self) -> bool {
        read_both(&self.dir).map_or(true, |now| now != self.seen)
    }
}

/// The server's poll of the files: says when a reload is due, once per
/// new content, so that a bad file is reported (and counted) once, not at
/// every poll, while the running zones stay.
#[derive(Debug, Default)]
pub struct KubeDnsPoll {
    last_tried: Option<Result<[Option<Vec<u8>>; 2], BadKubeDns>>,
}

impl KubeDnsPoll {
    /// Whether the files now differ both from what `source` was built from
    /// and from what the last reload this poll asked for was tried with.
    pub fn due(&mut self, source: &KubeDnsSource) -> bool {
        let now = read_both(&source.dir);
        if now.as_ref().is_ok_and(|n| *n == source.seen) || self.last_tried.as_ref() == Some(&now) {
            return false;
        }
        self.last_tried = Some(now);
        true
    }
}

/// Why the ConfigMap's files cannot be used: which file, and what is wrong
/// with it (an I/O error kept as its text, so that two polls compare).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {what}", path.display())]
struct BadKubeDns {
    path: PathBuf,
    what: String,
}

fn bad(path: &Path, what: impl Into<String>) -> BadKubeDns {
    BadKubeDns {
        path: path.to_owned(),
        what: what.into(),
    }
}

/// What the two files say.
struct KubeDnsData {
    /// Zone name (presentation form) and its servers, sorted by name.
    stub_domains: Vec<(String, Vec<SocketAddr>)>,
    upstream_nameservers: Vec<SocketAddr>,
}

/// Both files' bytes; a file that does not exist is `None` (a ConfigMap
/// without that key).
fn read_both(dir: &Path) -> Result<[Option<Vec<u8>>; 2], BadKubeDns> {
    let read = |file: &str| {
        let path = dir.join(file);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(bad(&path, e.to_string())),
        }
    };
    if !dir.is_dir() {
        return Err(bad(dir, "not a directory"));
    }
    Ok([read(STUB_DOMAINS)?, read(UPSTREAM_NAMESERVERS)?])
}

fn server(text: &str, file: &Path) -> Result<SocketAddr, BadKubeDns> {
    text.parse::<DnsAddr>()
        .map(|a| a.0)
        .map_err(|e| bad(file, e.0))
}

fn parse(dir: &Path, bytes: &[Option<Vec<u8>>; 2]) -> Result<KubeDnsData, BadKubeDns> {
    let stub_path = dir.join(STUB_DOMAINS);
    let upstream_path = dir.join(UPSTREAM_NAMESERVERS);
    let json_error = |path: &Path, e: serde_json::Error| bad(path, e.to_string());
    let stubs: BTreeMap<String, Vec<String>> = match &bytes[0] {
        Some(b) if !b.trim_ascii().is_empty() => {
            serde_json::from_slice(b).map_err(|e| json_error(&stub_path, e))?
        }
        _ => BTreeMap::new(),
    };
    let upstreams: Vec<String> = match &bytes[1] {
        Some(b) if !b.trim_ascii().is_empty() => {
            serde_json::from_slice(b).map_err(|e| json_error(&upstream_path, e))?
        }
        _ => Vec::new(),
    };
    if upstreams.len() > MAX_UPSTREAM_NAMESERVERS {
        return Err(bad(
            &upstream_path,
            format!("at most {MAX_UPSTREAM_NAMESERVERS} upstream nameservers (kube-dns's limit)"),
        ));
    }
    let mut stub_domains = Vec::new();
    for (domain, servers) in stubs {
        let zone = name::normalize_zone(&domain)
            .map_err(|e| bad(&stub_path, format!("stub domain `{domain}`: {}", e.0)))?;
        if zone == "." {
            return Err(bad(
                &stub_path,
                "the root cannot be a stub domain (upstreamNameservers sets its servers)",
            ));
        }
        if servers.is_empty() {
            return Err(bad(
                &stub_path,
                format!("stub domain `{domain}` lists no server"),
            ));
        }
        let servers = servers
            .iter()
            .map(|s| server(s, &stub_path))
            .collect::<Result<Vec<_>, _>>()?;
        if stub_domains.iter().any(|(z, _)| *z == zone) {
            return Err(bad(
                &stub_path,
                format!("stub domain `{domain}` given twice"),
            ));
        }
        stub_domains.push((zone, servers));
    }
    stub_domains.sort();
    let upstream_nameservers = upstreams
        .iter()
        .map(|s| server(s, &upstream_path))
        .collect::<Result<_, _>>()?;
    Ok(KubeDnsData {
        stub_domains,
        upstream_nameservers,
    })
}

impl File {
    /// Adds the ConfigMap's stub domains to `zones` and gives the root
    /// zone its upstream nameservers; what was read, to be polled.
    pub(super) fn apply_kube_dns(
        &self,
        zones: &mut Vec<ZonePlan>,
    ) -> Result<Option<KubeDnsSource>, Invalid> {
        let k = &self.kubernetes;
        let Some(dir) = &k.kube_dns_config else {
            return Ok(None);
        };
        let fail = |why: &dyn std::fmt::Display| {
            let message = format!("kubernetes.kube_dns_config: {why}");
            if dir.span().is_empty() {
                key(&["kubernetes", "kube_dns_config"], message)
            } else {
                Invalid::At(dir.span(), message)
            }
        };
        let dir = dir.get_ref();
        let seen = read_both(dir).map_err(|why| fail(&why))?;
        let data = match parse(dir, &seen) {
            Ok(data) => data,
            Err(why) if self.inputs.lenient() => {
                // At a start: the zones of the file alone, and the poll
                // reloads once the files change.
                self.inputs.skip(format!(
                    "kubernetes.kube_dns_config {}: {why}; serving without its stub domains and upstream nameservers until it changes",
                    dir.display()
                ));
                return Ok(Some(KubeDnsSource {
                    dir: dir.clone(),
                    interval: k.kube_dns_config_interval,
                    seen,
                }));
            }
            Err(why) => return Err(fail(&why)),
        };
        let own = super::views::OwnAddresses::read();
        for (zone, servers) in data.stub_domains {
            if zones.iter().any(|z| z.name == zone) {
                return Err(fail(&format!(
                    "stub domain {zone} is also a [[zone]] of this file (node-cache's Corefile would define it twice)"
                )));
            }
            if let Some(own) = servers.iter().find(|a| self.listens_on(&own, **a)) {
                return Err(fail(&format!(
                    "stub domain {zone}: {own} is one of the listen addresses, a forwarding loop"
                )));
            }
            zones.push(self.stub_domain_zone(zones, zone, servers));
        }
        if !data.upstream_nameservers.is_empty() {
            if let Some(looping) = data
                .upstream_nameservers
                .iter()
                .find(|a| self.listens_on(&own, **a))
            {
                return Err(fail(&format!(
                    "upstream nameserver {looping} is one of the listen addresses, a forwarding loop"
                )));
            }
            // Every `.` zone: one per view when the file has views.
            for root in zones.iter_mut().filter(|z| z.name == ".") {
                root.upstreams = data.upstream_nameservers.clone();
                // The ConfigMap's servers speak plain DNS: not over TLS,
                // and not forced over TCP (node-cache's own behaviour).
                if matches!(root.transport, Transport::ForceTcp | Transport::Tls) {
                    root.transport = Transport::PreferUdp;
                    root.upstream.probe_through_pool = false;
                    root.upstream.tls = None;
                }
            }
        }
        Ok(Some(KubeDnsSource {
            dir: dir.clone(),
            interval: k.kube_dns_config_interval,
            seen,
        }))
    }

    /// Whether forwarding to `addr` would come back to nodens: the same
    /// rule as the file's own upstreams (`check.rs`), so a wildcard listen
    /// address loops only to this host's addresses, not to a public resolver.
    fn listens_on(&self, own: &super::views::OwnAddresses, addr: SocketAddr) -> bool {
        let listen: Vec<SocketAddr> = self.server.listen.iter().map(|l| l.get_ref().0).collect();
        own.loops(&listen, addr)
    }

    /// The zone node-cache's stub domain block amounts to. A server that
    /// another zone lists is shared with that zone's settings (one pool
    /// per server).
    fn stub_domain_zone(
        &self,
        zones: &[ZonePlan],
        name: String,
        servers: Vec<SocketAddr>,
    ) -> ZonePlan {
        let defaults = ZoneConfig::root();
        let secs = |d: Duration| d.as_secs() as u32;
        let cache = defaults
            .cache
            .compile(&self.cache)
            .unwrap_or_else(|_| unreachable!("the default zone cache policy is valid"));
        let upstream = servers
            .iter()
            .find_map(|a| zones.iter().find(|z| z.upstreams.contains(a)))
            .map_or_else(
                || UpstreamSettings {
                    pool: defaults.pool.clone(),
                    max_fails: defaults.max_fails,
                    health_check: defaults.health_check,
                    probe_through_pool: false,
                    tls: None,
                    probe_timeout: defaults.upstream_timeout,
                    log_interval: self.log.upstream_error_interval,
                },
                |z| z.upstream.clone(),
            );
        ZonePlan {
            randomize_case: !super::compile::at_or_below(&name, &self.cluster.domain.get_ref().0),
            name,
            upstreams: servers,
            policy: Policy::Random,
            transport: Transport::PreferUdp,
            upstream_timeout: defaults.upstream_timeout,
            ttl: TtlPolicy {
                min_ttl: 0,
                max_ttl: secs(STUB_DOMAIN_TTL),
                negative_max_ttl: secs(STUB_DOMAIN_TTL),
                failure_ttl: cache.failure_ttl,
            },
            upstream,
            endpoints: None,
            cache,
            records: None,
            listen: Vec::new(),
            rules: None,
            query_log: None,
            no_aaaa_for_ipv4_pods: false,
            minimal: false,
            max_misses_in_flight: self.default_zone_misses(),
            near: [0, 0],
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use crate::config::{Config, Transport};

    fn config(dir: &std::path::Path, extra: &str) -> Result<Config, crate::config::ConfigError> {
        Config::parse(&format!(
            "[server]\nlisten = [\"127.0.0.1:1053\"]\n\n[kubernetes]\nkube_dns_config = \"{}\"\n\
             [[zone]]\nname = \".\"\nupstreams = [\"10.0.0.10\"]\ntransport = \"force_tcp\"\n{extra}",
            dir.display()
        ))
    }

    #[test]
    fn stub_domains_become_zones_and_upstreams_replace_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("stubDomains"),
            r#"{"acme.local": ["1.2.3.4", "1.2.3.5:5353"], "Corp.Example.": ["[::1]:53"]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("upstreamNameservers"),
            r#"["8.8.8.8", "8.8.4.4"]"#,
        )
        .unwrap();
        let c = config(dir.path(), "").unwrap();
        let names: Vec<&str> = c.zones.iter().map(|z| z.name.as_str()).collect();
        assert_eq!(names, [".", "acme.local.", "corp.example."]);
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            c.zones[1].upstreams,
            [addr("1.2.3.4:53"), addr("1.2.3.5:5353")]
        );
        assert_eq!(c.zones[1].ttl.max_ttl, 30);
        assert_eq!(
            c.zones[0].upstreams,
            [addr("8.8.8.8:53"), addr("8.8.4.4:53")]
        );
        assert_eq!(c.zones[0].transport, Transport::PreferUdp);
        let source = c.kube_dns.clone().unwrap();
        assert!(!source.changed());
        std::fs::write(dir.path().join("upstreamNameservers"), r#"["8.8.8.8"]"#).unwrap();
        assert!(source.changed());
    }

    #[test]
    fn a_wildcard_listener_loops_only_to_this_hosts_addresses_and_every_root_zone_follows() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("upstreamNameservers"),
            r#"["192.0.2.53", "198.51.100.53"]"#,
        )
        .unwrap();
        let text = format!(
            "[server]\nlisten = [\"0.0.0.0:53\", \"127.0.0.1:1053\"]\n\n[kubernetes]\nkube_dns_config = \"{}\"\n\
             [[zone]]\nname = \".\"\nupstreams = [\"10.0.0.10\"]\nlisten = [\"0.0.0.0:53\"]\n\
             [[zone]]\nname = \".\"\nupstreams = [\"10.0.0.11\"]\nlisten = [\"127.0.0.1:1053\"]\n",
            dir.path().display()
        );
        let c = Config::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        let want: Vec<SocketAddr> = ["192.0.2.53:53", "198.51.100.53:53"]
            .map(|a| a.parse().unwrap())
            .into();
        assert_eq!(c.zones[0].upstreams, want);
        assert_eq!(c.zones[1].upstreams, want);
        std::fs::write(dir.path().join("upstreamNameservers"), r#"["127.0.0.1"]"#).unwrap();
        let e = Config::parse(&text).unwrap_err();
        assert!(e.message.contains("forwarding loop"), "{e}");
    }

    #[test]
    fn an_empty_directory_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path(), "").unwrap();
        assert_eq!(c.zones.len(), 1);
        assert_eq!(c.zones[0].transport, Transport::ForceTcp);
    }

    #[test]
    fn bad_files_are_errors_naming_the_file_and_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let stub = dir.path().join("stubDomains");
        std::fs::write(&stub, r#"{"acme.local": ["1.2.3.4"],"#).unwrap();
        let e = config(dir.path(), "").unwrap_err();
        assert_eq!(e.position.unwrap().0, 5, "{e}");
        assert!(e.message.contains(&stub.display().to_string()), "{e}");
        std::fs::write(&stub, r#"{"acme.local": ["not-an-ip"]}"#).unwrap();
        let e = config(dir.path(), "").unwrap_err();
        assert!(e.message.contains("not-an-ip"), "{e}");
        std::fs::write(&stub, r#"{"acme.local": ["1.2.3.4"]}"#).unwrap();
        let e = config(
            dir.path(),
            "[[zone]]\nname = \"acme.local\"\nupstreams = [\"10.0.0.1\"]\n",
        )
        .unwrap_err();
        assert!(e.message.contains("acme.local. is also a [[zone]]"), "{e}");
        std::fs::write(&stub, r#"{"acme.local": ["127.0.0.1:1053"]}"#).unwrap();
        let e = config(dir.path(), "").unwrap_err();
        assert!(e.message.contains("forwarding loop"), "{e}");
        let e = config(&dir.path().join("none"), "").unwrap_err();
        assert!(e.message.contains("not a directory"), "{e}");
    }
}
