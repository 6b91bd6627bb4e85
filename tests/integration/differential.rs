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
//! What still differs is listed in [`cases::KNOWN`], each with the feature that
//! will remove it. The test fails on a difference or an untranslated line
//! not listed there, and on a listed one that no longer occurs, so the list
//! only shrinks. Run it alone, with its table: `cargo test --test
//! integration differential:: -- --nocapture`.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::*;

mod authority;
mod cases;
mod report;

use authority::authority;
use cases::{
    CASES, Case, KNOWN, RESOLVER, RESOLVER_V6, UPSTREAM_SVC, UPSTREAM_SVC_V6, common_queries,
};
use report::{Mismatch, Report, check_known, table};

/// How long one query may take before it counts as unanswered.
const QUERY_DEADLINE: Duration = Duration::from_secs(2);
/// How many Corefiles are run at once (each: four processes, two namespaces).
const CASES_AT_ONCE: usize = 3;

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

/// Every address a `bind` line of `corefile` names: where queries are asked.
fn bound_addresses(corefile: &str) -> BTreeSet<String> {
    corefile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("bind "))
        .flat_map(|rest| rest.split_whitespace().map(str::to_string))
        .collect()
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

    assert_eq!(
        bound_addresses(&reference),
        case.binds.iter().map(|b| b.to_string()).collect(),
        "{}: the case's binds are not the Corefile's",
        case.file
    );

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
