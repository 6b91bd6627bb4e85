//! `nodens doctor` and `nodens trace` against real servers in a network
//! namespace of the test's own: CoreDNS (the `file` plugin) as the
//! authority for `test.`, dnsmasq in front of it with and without
//! `--no-negcache`, and nodens itself. Each server listens on port 53 of
//! its own address, so the resolv.conf doctor reads is a pod's.
//!
//! Proves: a missing negative cache is found (and not reported where
//! there is one); dnsmasq's 20-connection TCP limit is found by the ramp;
//! `ndots:5` with six search domains is 7 lookups x 2 families; a wildcard
//! in a search domain is found, and trace shows the wrong answer it gives;
//! nodens gets no critical finding and is identified as a node cache. No
//! finding comes without evidence.

use std::net::SocketAddr;
use std::process::{Command, Output};

use serde_json::Value;
use support::*;

const AUTHORITY: &str = "10.53.0.1";
const NO_NEGCACHE: &str = "10.53.0.2";
const DNSMASQ: &str = "10.53.0.3";
const NODENS: &str = "10.53.0.4";

/// The `test.` zone: the names doctor probes and walks, a large TXT set
/// for the TC check, and a wildcard under `corp.test`.
fn zone() -> String {
    test_zone(
        "kubernetes.default.svc.cluster 300 IN A 10.96.0.1\n\
         kubernetes.team-a.svc.cluster 300 IN A 10.96.0.1\n\
         *.corp 300 IN A 192.0.2.99\n",
    )
}

const POD_SEARCH: &str =
    "search team-a.svc.cluster.test svc.cluster.test cluster.test\noptions ndots:5\n";

/// The namespace with the four servers running.
struct Lab {
    ns: Netns,
    _authority: CoreDns,
    _dnsmasq: Vec<Proc>,
    _nodens: Nodens,
    dir: tempfile::TempDir,
}

impl Lab {
    fn start() -> Lab {
        let ns = Netns::create("doctor");
        ns.add_to_lo(&[AUTHORITY, NO_NEGCACHE, DNSMASQ, NODENS]);
        let dir = tempfile::tempdir().unwrap();
        let (authority, dnsmasq, nodens) = in_netns(&ns.name, || {
            let authority = CoreDns::launch(&[], addr(AUTHORITY), &[("test.", zone())]);
            authority.wait_ready();
            let dnsmasq = vec![
                dnsmasq(NO_NEGCACHE, &["--no-negcache"], dir.path()),
                dnsmasq(DNSMASQ, &[], dir.path()),
            ];
            let net = Net::fixed(151);
            let nodens = Nodens::start(
                &Cfg::new(&net)
                    .listen(&[addr(NODENS)])
                    .zone(Zone::new(".", &[addr(AUTHORITY)])),
            );
            for server in [NO_NEGCACHE, DNSMASQ] {
                wait_until(
                    std::time::Duration::from_secs(10),
                    "dnsmasq to answer",
                    || {
                        udp_query_timeout(addr(server), &Q::new("www.test.", Rt::A), secs(1))
                            .map(|_| ())
                    },
                );
            }
            (authority, dnsmasq, nodens)
        });
        Lab {
            ns,
            _authority: authority,
            _dnsmasq: dnsmasq,
            _nodens: nodens,
            dir,
        }
    }

    /// A resolv.conf naming `server`, with `rest` after it.
    fn resolv_conf(&self, server: &str, rest: &str) -> String {
        let path = self
            .dir
            .path()
            .join(format!("resolv-{server}-{:x}.conf", random_u64()));
        std::fs::write(&path, format!("nameserver {server}\n{rest}")).unwrap();
        path.display().to_string()
    }

    fn nodens(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns.name])
            .arg(nodens_bin())
            .args(args)
            .output()
            .unwrap()
    }

    /// `nodens doctor --json ARGS`: the report, and whether it exited 1.
    fn doctor(&self, args: &[&str]) -> (Value, bool) {
        let out =
            self.nodens(&[&["doctor", "--json", "--no-node", "--no-workloads"], args].concat());
        let code = out.status.code();
        assert!(matches!(code, Some(0 | 1)), "doctor {args:?}: {out:?}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "doctor {args:?}: {e}: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        every_finding_has_evidence(&report);
        (report, code == Some(1))
    }
}

fn addr(ip: &str) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), 53)
}

fn dnsmasq(ip: &str, extra: &[&str], dir: &std::path::Path) -> Proc {
    let mut cmd = Command::new(tool("dnsmasq"));
    cmd.args([
        "--keep-in-foreground",
        "-C",
        "/dev/null",
        "--no-hosts",
        "--no-resolv",
        "--bind-interfaces",
    ])
    .arg(format!("--listen-address={ip}"))
    .arg(format!("--server={AUTHORITY}"))
    .arg(format!(
        "--pid-file={}",
        dir.join(format!("dnsmasq-{ip}.pid")).display()
    ))
    .arg("--log-facility=-")
    .args(extra);
    Proc::spawn(&format!("dnsmasq {ip}"), cmd)
}

fn findings(report: &Value) -> Vec<&Value> {
    report["findings"].as_array().unwrap().iter().collect()
}

fn finding<'a>(report: &'a Value, id: &str) -> Option<&'a Value> {
    findings(report).into_iter().find(|f| f["id"] == id)
}

fn ids(report: &Value) -> Vec<String> {
    findings(report)
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

fn probe_lines(report: &Value) -> String {
    let sections = report["sections"].as_array().unwrap();
    let probes = sections
        .iter()
        .find(|s| s["title"] == "Probes")
        .expect("a Probes section");
    probes["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

fn every_finding_has_evidence(report: &Value) {
    for f in findings(report) {
        let evidence = f["evidence"].as_array().unwrap();
        assert!(!evidence.is_empty(), "finding without evidence: {f}");
        assert!(f["fix"].is_string(), "finding without a fix: {f}");
    }
}

#[test]
fn doctor_against_dnsmasq_and_nodens() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Tool("dnsmasq"),
        Need::CoreDns
    );
    let lab = Lab::start();

    // dnsmasq --no-negcache: no negative caching, the SOA TTL as the
    // authority sent it both times; and the TCP ramp stops at its 20
    // connection processes.
    let resolv = lab.resolv_conf(NO_NEGCACHE, POD_SEARCH);
    let (report, critical) = lab.doctor(&["--resolv-conf", &resolv, "--name", "www.test"]);
    let f = finding(&report, "no-negative-cache").unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(f["severity"], "warning");
    let evidence = f["evidence"][0].as_str().unwrap();
    assert!(
        evidence.contains("NXDOMAIN with SOA TTL 3600 then 3600"),
        "{evidence}"
    );
    let stall = finding(&report, "tcp-stall").unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(
        stall["title"],
        format!("{NO_NEGCACHE}:53 stalls beyond 20 concurrent TCP connections")
    );
    assert_eq!(stall["severity"], "critical");
    assert!(critical, "a critical finding exits 1");
    assert!(probe_lines(&report).contains("identity: version.bind \"dnsmasq-"));

    // dnsmasq as it comes: negative answers cached (the TTL counts down);
    // a ramp below its limit finds nothing.
    let resolv = lab.resolv_conf(DNSMASQ, POD_SEARCH);
    let (report, _) = lab.doctor(&[
        "--resolv-conf",
        &resolv,
        "--name",
        "www.test",
        "--tcp-max",
        "15",
    ]);
    assert!(
        !ids(&report).contains(&"no-negative-cache".to_string()),
        "{report:#}"
    );
    assert!(
        !ids(&report).contains(&"tcp-stall".to_string()),
        "{report:#}"
    );
    assert!(
        probe_lines(&report).contains("negative caching: yes"),
        "{}",
        probe_lines(&report)
    );

    // nodens: no critical finding, identified, truncation right, the ramp
    // to 40 connections answered.
    let resolv = lab.resolv_conf(NODENS, POD_SEARCH);
    let (report, critical) = lab.doctor(&[
        "--resolv-conf",
        &resolv,
        "--name",
        "www.test",
        "--tc-name",
        "big.test",
    ]);
    assert!(!critical, "{report:#}");
    assert!(
        findings(&report)
            .iter()
            .all(|f| f["severity"] != "critical"),
        "{report:#}"
    );
    assert_eq!(ids(&report), ["search-list-tax"], "{report:#}");
    let probes = probe_lines(&report);
    assert!(
        probes.contains("version.bind \"nodens ") && probes.contains("(a nodens node cache)"),
        "{probes}"
    );
    assert!(probes.contains("negative caching: yes"), "{probes}");
    assert!(
        probes.contains("TCP ramp: 40 connections held open, each answered"),
        "{probes}"
    );
    assert!(
        probes.contains("TC set; over TCP:")
            && probes.contains(&format!("{BIG_TXT_COUNT} records")),
        "{probes}"
    );

    // A wildcard under a search domain: every external name's first
    // expansion exists. Critical, and trace shows the wrong answer.
    let corp = "search corp.test\noptions ndots:5\n";
    let resolv = lab.resolv_conf(NODENS, corp);
    let (report, critical) = lab.doctor(&[
        "--resolv-conf",
        &resolv,
        "--name",
        "www.test",
        "--tcp-max",
        "2",
    ]);
    let f =
        finding(&report, "search-expansion-not-nxdomain").unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(f["severity"], "critical");
    assert!(
        f["evidence"][0].as_str().unwrap().contains("192.0.2.99"),
        "{f}"
    );
    assert!(critical);
    let out = lab.nodens(&["trace", "--resolv-conf", &resolv, "--json", "www.test"]);
    assert!(out.status.success(), "{out:?}");
    let trace: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(trace["outcome"]["name"], "www.test.corp.test");
    assert_eq!(trace["outcome"]["answers"][0], "192.0.2.99");
}

#[test]
fn trace_walks_the_search_list_as_each_resolver_does() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    let lab = Lab::start();
    let resolv = lab.resolv_conf(NODENS, POD_SEARCH);
    let trace = |resolver: &str, name: &str| -> (Value, bool) {
        let out = lab.nodens(&[
            "trace",
            "--resolv-conf",
            &resolv,
            "--resolver",
            resolver,
            "--json",
            name,
        ]);
        (
            serde_json::from_slice(&out.stdout).unwrap(),
            out.status.success(),
        )
    };
    // An external name: three NXDOMAIN expansions, then the name; A and
    // AAAA for each, each with its code.
    let (t, ok) = trace("glibc", "www.test");
    assert!(ok);
    assert_eq!(t["queries"], 8);
    assert_eq!(t["round_trips"], 4);
    let steps = t["steps"].as_array().unwrap();
    let results: Vec<_> = steps
        .iter()
        .map(|s| s["result"].as_str().unwrap())
        .collect();
    assert_eq!(
        results,
        ["NXDOMAIN"; 6]
            .iter()
            .chain(&["NOERROR", "NOERROR"])
            .copied()
            .collect::<Vec<_>>()
    );
    assert_eq!(steps[0]["name"], "www.test.team-a.svc.cluster.test");
    assert_eq!(
        t["outcome"]["answers"],
        serde_json::json!(["192.0.2.1", "2001:db8::1"])
    );
    // A Service's short name: its first expansion, one round trip.
    let (t, ok) = trace("musl", "kubernetes");
    assert!(ok);
    assert_eq!(
        (t["queries"].as_u64(), t["round_trips"].as_u64()),
        (Some(2), Some(1))
    );
    // A name that nowhere exists: every name tried, exit 1.
    let (t, ok) = trace("musl", "nothere.test");
    assert!(!ok);
    assert_eq!(t["queries"], 8);
    assert_eq!(t["outcome"]["status"], "failed");
}

#[test]
fn ndots_five_and_six_search_domains_are_seven_lookups_times_two_families() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolv.conf");
    std::fs::write(
        &path,
        "nameserver 10.96.0.10\n\
         search team-a.svc.cluster.local svc.cluster.local cluster.local c.proj.internal google.internal corp.example\n\
         options ndots:5\n",
    )
    .unwrap();
    let out = Command::new(nodens_bin())
        .args([
            "doctor",
            "--no-probes",
            "--no-node",
            "--no-workloads",
            "--json",
            "--name",
            "api.example.com",
            "--resolv-conf",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    every_finding_has_evidence(&report);
    assert_eq!(ids(&report), ["search-list-tax"]);
    let f = finding(&report, "search-list-tax").unwrap();
    assert_eq!(
        f["title"],
        "an external name costs 7 lookups x 2 families: 14 queries where 2 would do"
    );
    assert!(f["fix"].as_str().unwrap().contains("- name: ndots"));
    // The text form says the same.
    let text = Command::new(nodens_bin())
        .args([
            "doctor",
            "--no-probes",
            "--no-node",
            "--no-workloads",
            "--name",
            "api.example.com",
            "--resolv-conf",
        ])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("[WARNING] an external name costs 7 lookups x 2 families"),
        "{text}"
    );
    assert!(
        text.contains("glibc 7 names x A+AAAA = 14 queries, 7 round trips"),
        "{text}"
    );
}

#[test]
fn nodens_says_who_it_is_over_chaos_unless_told_not_to() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let ask = |nodens: &Nodens, name: &str| {
        let raw = udp_exchange(nodens.dns, &Q::new(name, Rt::TXT).chaos_bytes(), secs(2))
            .expect("a reply");
        Reply::parse(raw, std::time::Duration::ZERO)
    };
    let texts = |reply: &Reply| -> Vec<String> {
        reply
            .answers_of(Rt::TXT)
            .iter()
            .map(|r| r.data().to_string())
            .collect()
    };
    let nodens = Nodens::start(&Cfg::new(&net).zone(Zone::new(".", &[core.addr])));
    let version = ask(&nodens, "VERSION.bind.");
    assert_eq!(version.rcode(), 0);
    assert_eq!(
        texts(&version),
        [format!("nodens {}", env!("CARGO_PKG_VERSION"))]
    );
    // The node's name from the downward API, else the host name.
    let host = std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap());
    assert_eq!(texts(&ask(&nodens, "id.server.")), [host.trim()]);
    assert_eq!(texts(&ask(&nodens, "hostname.bind.")), [host.trim()]);
    drop(nodens);

    let hidden = Nodens::start(
        &Cfg::new(&net)
            .server_option("identity", "false")
            .zone(Zone::new(".", &[core.addr])),
    );
    for name in ["version.bind.", "id.server."] {
        let reply = ask(&hidden, name);
        assert_eq!(reply.rcode(), 5, "{name}");
        assert!(reply.answers_of(Rt::TXT).is_empty());
    }
}

/// A control socket named on the command line that nobody answers on is a
/// finding that says what to check; the chart's default path, when nothing
/// answers there (a socket file a killed nodens left), is no finding at all.
#[test]
fn a_control_socket_nobody_answers_is_a_finding_only_when_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.96.0.10\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let stale = dir.path().join("control.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o600)).unwrap();
    let doctor = |extra: &[&str]| {
        let out = Command::new(nodens_bin())
            .args([
                "doctor",
                "--no-probes",
                "--no-node",
                "--json",
                "--resolv-conf",
            ])
            .arg(&resolv)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        every_finding_has_evidence(&report);
        report
    };
    let asked = doctor(&["--control-socket", stale.to_str().unwrap()]);
    let f = finding(&asked, "workloads-unread").expect("a workloads-unread finding");
    assert!(
        f["evidence"][0].as_str().unwrap().contains("refused"),
        "{f}"
    );
    let skipped = doctor(&["--no-workloads"]);
    assert!(finding(&skipped, "workloads-unread").is_none(), "{skipped}");
}
