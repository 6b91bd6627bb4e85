//! The resolver configuration: what a lookup costs the pod, from its
//! resolv.conf alone. For sample names it lists the queries glibc and musl
//! send (the walk of [`crate::stub`]), counts them, and names what makes
//! them many or slow, with a ready `dnsConfig` and its trade-offs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::{Finding, Severity};
use crate::stub::{Family, Stub, StubConfig, walk, walk::address_types};

/// glibc and musl use the first three nameservers (MAXNS).
const MAX_NAMESERVERS: usize = 3;
/// glibc before 2.26 reads six search domains; Kubernetes allows 32.
const OLD_GLIBC_SEARCH_DOMAINS: usize = 6;
/// musl keeps the search line in a 256-byte buffer.
const MUSL_SEARCH_BYTES: usize = 255;

/// A resolv.conf as the stub resolvers read it.
#[derive(Debug, Clone)]
pub struct ResolvConf {
    pub path: PathBuf,
    pub stub: StubConfig,
    pub nameservers: Vec<SocketAddr>,
    /// Length of the search domains as one line, as musl stores it.
    pub search_line_len: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("{}: cannot read: {source}", path.display())]
pub struct ReadError {
    path: PathBuf,
    source: std::io::Error,
}

impl ResolvConf {
    pub fn read(path: &Path) -> Result<ResolvConf, ReadError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReadError {
            path: path.to_owned(),
            source,
        })?;
        Ok(ResolvConf::parse(path, &text))
    }

    pub fn parse(path: &Path, text: &str) -> ResolvConf {
        let stub = StubConfig::parse(text);
        let search_line_len = stub.search.iter().map(|d| d.len() + 1).sum::<usize>();
        ResolvConf {
            path: path.to_owned(),
            nameservers: crate::config::resolv_conf::parse_nameservers(text),
            stub,
            search_line_len: search_line_len.saturating_sub(1),
        }
    }

    /// The cluster domain, when the search list is a pod's
    /// (`<ns>.svc.<zone> svc.<zone> <zone>`), and the pod's namespace.
    pub fn cluster(&self) -> Option<(String, String)> {
        let first = self.stub.search.first()?;
        let (namespace, rest) = first.split_once(".svc.")?;
        let zone = rest.to_string();
        let is_pod_list = self.stub.search.iter().any(|d| *d == format!("svc.{zone}"));
        is_pod_list.then(|| (namespace.to_string(), zone))
    }
}

/// The kind of the sample names whose walk is the search-list tax.
pub(crate) const EXTERNAL: &str = "an external name";

/// A name to show the walk of, and which of its forms exists.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// The name as the application gives it.
    pub name: String,
    /// What it stands for, in the report.
    pub kind: &'static str,
    /// The one form of the name that exists (without trailing dot).
    pub exists_as: String,
}

/// The sample names: each external name given (default `example.com`),
/// its trailing-dot form and, on a pod's search list, a Service's short
/// name and `svc.ns` form.
pub(crate) fn samples(resolv: &ResolvConf, external: &[String]) -> Vec<Sample> {
    let mut samples = Vec::new();
    let default = ["example.com".to_string()];
    let external = if external.is_empty() {
        &default[..]
    } else {
        external
    };
    for name in external {
        let bare = name.trim_end_matches('.').to_string();
        samples.push(Sample {
            name: bare.clone(),
            kind: EXTERNAL,
            exists_as: bare.clone(),
        });
        samples.push(Sample {
            name: format!("{bare}."),
            kind: "an external name with a trailing dot",
            exists_as: bare,
        });
    }
    if let Some((namespace, zone)) = resolv.cluster() {
        samples.push(Sample {
            name: "kubernetes".into(),
            kind: "a Service's short name, in the pod's namespace",
            exists_as: format!("kubernetes.{namespace}.svc.{zone}"),
        });
        samples.push(Sample {
            name: "kubernetes.default".into(),
            kind: "a Service as svc.ns",
            exists_as: format!("kubernetes.default.svc.{zone}"),
        });
    }
    samples
}

/// One sample's cost for one resolver.
#[derive(Debug, Clone)]
pub(crate) struct Cost {
    /// The names asked, in order, up to the one that exists.
    pub names: Vec<String>,
    /// The types asked per name (A, AAAA).
    pub types: &'static [&'static str],
    /// Round trips: one per name, two when A and AAAA go one after the other.
    pub round_trips: usize,
}

impl Cost {
    pub(crate) fn queries(&self) -> usize {
        self.names.len() * self.types.len()
    }
}

pub(crate) fn cost(stub: Stub, config: &StubConfig, sample: &Sample) -> Cost {
    let names = walk(stub, config, &sample.name, |n| n == sample.exists_as);
    let types = address_types(stub, config, Family::Unspec);
    // musl ignores single-request: A and AAAA always go together.
    let sequential = config.single_request && stub == Stub::Glibc && types.len() == 2;
    let round_trips = names.len() * if sequential { 2 } else { 1 };
    Cost {
        names,
        types,
        round_trips,
    }
}

/// The walks of the sample names, as report lines, and what the
/// configuration costs.
pub(crate) fn analyse(resolv: &ResolvConf, external: &[String]) -> (Vec<String>, Vec<Finding>) {
    let c = &resolv.stub;
    let mut lines = vec![
        format!("file: {}", resolv.path.display()),
        format!(
            "nameservers: {}",
            if resolv.nameservers.is_empty() {
                "(none)".to_string()
            } else {
                join(resolv.nameservers.iter().map(|s| s.ip().to_string()))
            }
        ),
        format!(
            "search ({}): {}",
            c.search.len(),
            if c.search.is_empty() {
                "(none)".to_string()
            } else {
                c.search.join(" ")
            }
        ),
        format!(
            "options: ndots:{} timeout:{} attempts:{}{}{}{}{}",
            c.ndots,
            c.timeout,
            c.attempts,
            flag(c.single_request_reopen, " single-request-reopen")
                .or(flag(c.single_request, " single-request"))
                .unwrap_or(""),
            flag(c.rotate, " rotate").unwrap_or(""),
            flag(c.use_vc, " use-vc").unwrap_or(""),
            flag(c.no_aaaa, " no-aaaa").unwrap_or(""),
        ),
    ];
    let servers = resolv.nameservers.len().clamp(1, MAX_NAMESERVERS);
    lines.push(format!(
        "a lost query: glibc asks again after {t} s ({a} tries x {servers} nameserver{s}{r}: {total} s before a lookup fails); \
         musl asks all nameservers at once and retries every {retry:.1} s, failing after {t} s",
        t = c.timeout,
        a = c.attempts,
        s = plural(servers),
        r = if c.rotate { ", rotated" } else { "" },
        total = usize::from(c.timeout) * usize::from(c.attempts) * servers,
        retry = f64::from(c.timeout) / f64::from(c.attempts),
    ));
    let mut findings = Vec::new();
    let samples = samples(resolv, external);
    for sample in &samples {
        lines.push(String::new());
        lines.push(format!("{} ({}):", sample.name, sample.kind));
        for stub in [Stub::Glibc, Stub::Musl] {
            let cost = cost(stub, c, sample);
            lines.push(format!(
                "  {:<5} {} name{} x {} = {} quer{}, {} round trip{}{}",
                stub_name(stub),
                cost.names.len(),
                plural(cost.names.len()),
                cost.types.join("+"),
                cost.queries(),
                if cost.queries() == 1 { "y" } else { "ies" },
                cost.round_trips,
                plural(cost.round_trips),
                if c.use_vc && stub == Stub::Glibc {
                    ", each over TCP"
                } else {
                    ""
                },
            ));
            for (i, name) in cost.names.iter().enumerate() {
                let last = i + 1 == cost.names.len();
                lines.push(format!(
                    "        {}. {name}  {}",
                    i + 1,
                    if last && *name == sample.exists_as {
                        "answer"
                    } else {
                        "NXDOMAIN"
                    }
                ));
            }
        }
    }
    if let Some(external) = samples.iter().find(|s| s.kind == EXTERNAL) {
        findings.extend(search_list_tax(resolv, external));
    }
    findings.extend(options_findings(resolv));
    (lines, findings)
}

/// The tax is paid by the server when it answers the first expansion by
/// autopath: the pod sends one round trip of queries.
pub(crate) fn paid_by_autopath(findings: &mut [Finding]) {
    for f in findings.iter_mut().filter(|f| f.id == "search-list-tax") {
        f.severity = Severity::Info;
        f.title.push_str(
            "; the server answers the first by autopath, so the pod waits one round trip",
        );
    }
}

/// An external name walking the search list first: the ndots:5 tax.
fn search_list_tax(resolv: &ResolvConf, sample: &Sample) -> Option<Finding> {
    let c = &resolv.stub;
    let glibc = cost(Stub::Glibc, c, sample);
    let musl = cost(Stub::Musl, c, sample);
    let wasted = glibc.names.len() - 1;
    if wasted == 0 {
        return None;
    }
    let dots = sample.name.matches('.').count();
    let severity = if wasted >= 3 {
        Severity::Warning
    } else {
        Severity::Info
    };
    let mut finding = Finding::new(
        "search-list-tax",
        severity,
        format!(
            "an external name costs {} lookups x {} families: {} queries where 2 would do",
            glibc.names.len(),
            glibc.types.len(),
            glibc.queries()
        ),
    )
    .evidence(format!(
        "ndots:{} and {} search domain{}: `{}` has {dots} dot{}, fewer than ndots, so the search list is walked first",
        c.ndots,
        c.search.len(),
        plural(c.search.len()),
        sample.name,
        plural(dots),
    ))
    .evidence(format!(
        "glibc: {} queries in {} round trips, {} of them NXDOMAIN; musl: {} queries in {} round trips",
        glibc.queries(),
        glibc.round_trips,
        wasted * glibc.types.len(),
        musl.queries(),
        musl.round_trips
    ));
    let lower = dots.clamp(1, usize::from(c.ndots.saturating_sub(1)).max(1));
    finding = finding.fix(format!(
        "Any one of:\n\
         1. Write external names with a trailing dot (`{name}.`): 1 lookup, nothing else changes.\n\
         2. Lower ndots in the pod spec:\n\
         \x20  dnsConfig:\n\
         \x20    options:\n\
         \x20      - name: ndots\n\
         \x20        value: \"{lower}\"\n\
         \x20  Names with {lower} or more dots are asked as written first. Trade-off: {cost}\n\
         3. nodens autopath (chart: search.autopath=true): the first expansion is\n\
         \x20  answered with the final answer; 1 round trip for glibc, musl and Go, no pod\n\
         \x20  change. Trade-off: a watch of the node's pods.",
        name = sample.name,
        cost = match lower {
            1 => "a Service\n   asked as `svc.ns` (`web.team-b`) costs one more NXDOMAIN first, upstream.",
            2 => "a Service\n   asked as `svc.ns.svc` costs one more NXDOMAIN first, upstream.",
            _ => "a cluster name\n   written with that many dots costs one more NXDOMAIN first, upstream.",
        },
    ));
    Some(finding)
}

fn options_findings(resolv: &ResolvConf) -> Vec<Finding> {
    let c = &resolv.stub;
    let mut findings = Vec::new();
    if resolv.nameservers.is_empty() {
        findings.push(
            Finding::new("no-nameserver", Severity::Critical, "resolv.conf names no nameserver")
                .evidence(format!("{}: no `nameserver` line that parses", resolv.path.display()))
                .fix("glibc and musl then ask 127.0.0.1:53. Check the pod's dnsPolicy (None needs dnsConfig.nameservers) or the kubelet's --resolv-conf."),
        );
    }
    if resolv.nameservers.len() > MAX_NAMESERVERS {
        findings.push(
            Finding::new(
                "nameservers-beyond-three",
                Severity::Warning,
                format!(
                    "{} nameservers: glibc and musl use only the first 3",
                    resolv.nameservers.len()
                ),
            )
            .evidence(format!(
                "ignored: {}",
                join(
                    resolv.nameservers[MAX_NAMESERVERS..]
                        .iter()
                        .map(|s| s.ip().to_string())
                )
            ))
            .fix("Keep at most 3 nameserver lines (the kubelet warns about this too)."),
        );
    }
    if c.search.len() > OLD_GLIBC_SEARCH_DOMAINS {
        findings.push(
            Finding::new(
                "search-domains-beyond-six",
                Severity::Warning,
                format!("{} search domains: glibc before 2.26 reads 6", c.search.len()),
            )
            .evidence(format!("search: {}", c.search.join(" ")))
            .fix("Trim the node's search domains (the kubelet's --resolv-conf) or the pod's dnsConfig.searches; every domain is also one more query for each external name."),
        );
    }
    if resolv.search_line_len > MUSL_SEARCH_BYTES {
        findings.push(
            Finding::new(
                "search-line-too-long-for-musl",
                Severity::Warning,
                format!(
                    "the search list is {} characters: musl reads the first {MUSL_SEARCH_BYTES}",
                    resolv.search_line_len
                ),
            )
            .evidence("musl keeps the search line in a 256-byte buffer; the domains past it are dropped silently in Alpine images")
            .fix("Shorten the search list (fewer or shorter domains)."),
        );
    }
    if c.use_vc {
        findings.push(
            Finding::new("use-vc", Severity::Warning, "use-vc: glibc sends every query over TCP")
                .evidence("options use-vc (or tcp) in resolv.conf")
                .fix("Remove use-vc: each lookup then costs a TCP handshake, and servers with few TCP slots (dnsmasq: 20) stall. TCP is used anyway when an answer is truncated."),
        );
    }
    findings
}

fn stub_name(stub: Stub) -> &'static str {
    match stub {
        Stub::Glibc => "glibc",
        Stub::Musl => "musl",
        Stub::Go => "go",
    }
}

fn flag(on: bool, text: &'static str) -> Option<&'static str> {
    on.then_some(text)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolv(text: &str) -> ResolvConf {
        ResolvConf::parse(Path::new("resolv.conf"), text)
    }

    const SIX_DOMAINS: &str = "nameserver 169.254.20.10\n\
        search team-a.svc.cluster.local svc.cluster.local cluster.local c.proj.internal google.internal corp.example\n\
        options ndots:5\n";

    #[test]
    fn ndots_5_and_six_search_domains_cost_seven_lookups_times_two_families() {
        let (lines, findings) = analyse(&resolv(SIX_DOMAINS), &["api.example.com".into()]);
        let tax = findings.iter().find(|f| f.id == "search-list-tax").unwrap();
        assert_eq!(tax.severity, Severity::Warning);
        assert!(
            tax.title.contains("7 lookups x 2 families: 14 queries"),
            "{}",
            tax.title
        );
        assert!(
            tax.evidence[1].contains("glibc: 14 queries in 7 round trips, 12 of them NXDOMAIN")
        );
        assert!(tax.fix.as_ref().unwrap().contains("value: \"2\""));
        assert!(
            lines
                .iter()
                .any(|l| l.contains("glibc 7 names x A+AAAA = 14 queries, 7 round trips"))
        );
        // The trailing-dot form costs one name.
        assert!(
            lines
                .iter()
                .any(|l| l.contains("glibc 1 name x A+AAAA = 2 queries"))
        );
        // A Service's short name is answered by its first expansion.
        let short = lines
            .iter()
            .position(|l| l.starts_with("kubernetes ("))
            .unwrap();
        assert!(lines[short + 1].contains("1 name x A+AAAA = 2 queries"));
        assert!(lines[short + 2].ends_with("kubernetes.team-a.svc.cluster.local  answer"));
        // Six domains are not more than six.
        assert!(!findings.iter().any(|f| f.id == "search-domains-beyond-six"));
    }

    #[test]
    fn single_request_doubles_glibc_s_round_trips_only() {
        let r = resolv(&format!("{SIX_DOMAINS}options single-request-reopen\n"));
        let sample = &samples(&r, &[])[0];
        assert_eq!(cost(Stub::Glibc, &r.stub, sample).round_trips, 14);
        assert_eq!(cost(Stub::Musl, &r.stub, sample).round_trips, 7);
    }

    #[test]
    fn a_plain_node_resolv_conf_has_no_finding() {
        let (_, findings) = analyse(
            &resolv("nameserver 10.0.0.2\nsearch example.internal\n"),
            &[],
        );
        assert_eq!(findings, []);
        let (_, findings) = analyse(&resolv("nameserver 10.0.0.2\n"), &[]);
        assert_eq!(findings, []);
    }

    #[test]
    fn configuration_mistakes_are_named() {
        let long = (0..7)
            .map(|i| format!("{}{i}.example", "d".repeat(40)))
            .collect::<Vec<_>>();
        let text = format!(
            "nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nnameserver 10.0.0.4\n\
             search {}\noptions use-vc\n",
            long.join(" ")
        );
        let (_, findings) = analyse(&resolv(&text), &[]);
        let ids: Vec<_> = findings.iter().map(|f| f.id).collect();
        for id in [
            "nameservers-beyond-three",
            "search-domains-beyond-six",
            "search-line-too-long-for-musl",
            "use-vc",
        ] {
            assert!(ids.contains(&id), "{id} missing from {ids:?}");
        }
        assert!(
            findings
                .iter()
                .all(|f| !f.evidence.is_empty() && f.fix.is_some())
        );
        let (_, findings) = analyse(&resolv("search a\n"), &[]);
        assert_eq!(findings[0].id, "no-nameserver");
        assert_eq!(findings[0].severity, Severity::Critical);
    }
}
