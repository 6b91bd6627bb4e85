//! `nodens doctor`'s node checks against real software: each test makes a
//! network namespace of its own (deleted on drop, with everything in it),
//! puts in it what a node has (an interface holding 169.254.20.10, nodens
//! with `[node] setup`, CoreDNS, kube-proxy's chains, NOTRACK rules in
//! iptables-legacy, iptables-nft or nftables), runs
//! `ip netns exec NS nodens doctor --no-probes --json ...` and asserts on
//! the findings. No packet leaves the namespace (or loopback).
//!
//! Proves:
//! 1. `fresh_namespace_gives_no_node_finding`: the live conntrack read and
//!    every other check run, and a namespace with nothing in it gives no
//!    finding at all.
//! 2. `nodens_rules_in_nftables` / `nodens_rules_in_iptables_nft` /
//!    `nodens_rules_in_iptables_legacy`: nodens's own rules, in each
//!    backend it writes, are found (no finding, the fact names the
//!    backend); with the rules deleted behind its back, `notrack-missing`.
//!    The legacy case also reads kube-proxy's mode from KUBE-SERVICES in
//!    iptables-legacy, which nodens follows (no `backend-mismatch`).
//! 3. `address_without_listener_then_served_then_notracked`: an interface
//!    holding 169.254.20.10 and nothing else: `no-listener` and
//!    `notrack-missing`; CoreDNS on it: only `notrack-missing`;
//!    node-local-dns-style nft rules: no finding.
//! 4. `kube_proxy_modes_and_backend_mismatch`: KUBE-SERVICES in
//!    iptables-nft and node-local-dns's rules in iptables-legacy:
//!    `backend-mismatch`; with a `table ip kube-proxy`, nftables mode, and
//!    the iptables rules beside it an information-level `backend-mismatch`
//!    that rules in nftables do not get.
//! 5. `ipvs_mode_with_cluster_dns_on_the_service_ip`: a kube-ipvs0
//!    holding 10.96.0.10 and a kubelet clusterDNS of 10.96.0.10:
//!    `ipvs-cluster-dns`; with clusterDNS 169.254.20.10, none.
//! 6. `forwarding_loops`: a zone forwarding to the nameservers of a
//!    resolv.conf that names nodens's own address, and a zone forwarding to
//!    a loopback address a running nodens serves: `forwarding-loop`.
//! 7. `port_conflict_on_the_metrics_port`: another process on
//!    127.0.0.1:9253: `port-conflict`; a configuration on another port:
//!    none.
//! 8. `cpu_quota_against_threads`: nodens with 16 workers in a cgroup with
//!    a 0.1 CPU quota: `cpu-quota-threads` naming its pid.
//!
//! Needs root (`needs!(Need::Root)`: fails without it, unless NODENS_ALLOW_SKIP=1).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::*;

const CACHE_IP: &str = "169.254.20.10";
const IFACE: &str = "nodelocaldns";
const UPSTREAM: &str = "127.0.0.1:5300";

fn cache_addr() -> SocketAddr {
    format!("{CACHE_IP}:53").parse().unwrap()
}

// ---- running doctor ---------------------------------------------------------------

/// A doctor report: the node section's facts and the findings.
struct Report {
    json: Value,
}

impl Report {
    fn facts(&self) -> Vec<String> {
        self.json["sections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["title"] == "Node")
            .flat_map(|s| s["lines"].as_array().unwrap().iter())
            .map(|l| l.as_str().unwrap().to_string())
            .collect()
    }
    fn ids(&self) -> Vec<String> {
        self.json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_string())
            .collect()
    }
    fn finding(&self, id: &str) -> Option<&Value> {
        self.json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
    }
    fn must(&self, id: &str) -> &Value {
        self.finding(id)
            .unwrap_or_else(|| panic!("no finding {id}; report:\n{:#}", self.json))
    }
    fn must_not(&self, id: &str) {
        assert!(
            self.finding(id).is_none(),
            "unexpected finding {id}; report:\n{:#}",
            self.json
        );
    }
    fn fact(&self, starts: &str) -> String {
        self.facts()
            .into_iter()
            .find(|f| f.starts_with(starts))
            .unwrap_or_else(|| panic!("no fact {starts:?}; facts: {:#?}", self.facts()))
    }
}

fn evidence(f: &Value) -> String {
    f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `nodens doctor --no-probes --json ARGS`, inside `ns` (or on the host).
fn doctor(ns: Option<&Netns>, args: &[&str]) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    // No search list: the resolver checks have nothing to say about it.
    std::fs::write(&resolv, "nameserver 10.96.0.10\n").unwrap();
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new(tool("ip"));
            c.args(["netns", "exec", &ns.name]).arg(nodens_bin());
            c
        }
        None => Command::new(nodens_bin()),
    };
    cmd.args([
        "doctor",
        "--no-probes",
        "--no-workloads",
        "--json",
        "--resolv-conf",
    ])
    .arg(&resolv)
    .args(args);
    let out = output_within(cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}), exit {}:\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let report = Report { json };
    eprintln!("[doctor {}] findings {:?}", args.join(" "), report.ids());
    for fact in report.facts() {
        eprintln!("[doctor]   {fact}");
    }
    report
}

/// A file in a temporary directory (kept as long as the guard).
fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A link holding `ip/32`, up. The kernel has no dummy links; a bridge
/// without ports holds an address just as well.
fn address_link(ns: &Netns, name: &str, ip: &str) {
    ns.run(&["ip", "link", "add", name, "type", "bridge"]);
    ns.run(&["ip", "addr", "add", &format!("{ip}/32"), "dev", name]);
    ns.run(&["ip", "link", "set", name, "up"]);
}

/// What NodeLocal DNSCache writes to iptables, with `cmd` (an iptables
/// flavour): NOTRACK for queries to and answers from the cache, both
/// protocols.
fn node_local_dns_iptables(ns: &Netns, cmd: &str) {
    for proto in ["udp", "tcp"] {
        for (chain, addr, port) in [("PREROUTING", "-d", "--dport"), ("OUTPUT", "-s", "--sport")] {
            ns.run(&[
                cmd,
                "-t",
                "raw",
                "-A",
                chain,
                addr,
                CACHE_IP,
                "-p",
                proto,
                port,
                "53",
                "-m",
                "comment",
                "--comment",
                "NodeLocal DNS Cache: skip conntrack",
                "-j",
                "NOTRACK",
            ]);
        }
    }
}

/// The same in native nftables: a table of its own with raw-priority chains.
fn node_local_dns_nft(ns: &Netns) {
    let ruleset = format!(
        "table ip nodelocal {{\n\
           chain pre {{ type filter hook prerouting priority raw; ip daddr {CACHE_IP} meta l4proto {{ tcp, udp }} th dport 53 notrack; }}\n\
           chain out {{ type filter hook output priority raw; ip saddr {CACHE_IP} meta l4proto {{ tcp, udp }} th sport 53 notrack; }}\n\
         }}\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "nodelocal.nft", &ruleset);
    ns.run(&["nft", "-f", arg(&path)]);
}

/// kube-proxy's top chain, with `cmd` (an iptables flavour): what the
/// mode detection (nodens's and doctor's) reads.
fn kube_services(ns: &Netns, cmd: &str) {
    ns.run(&[cmd, "-t", "nat", "-N", "KUBE-SERVICES"]);
    ns.run(&[cmd, "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-SERVICES"]);
    ns.run(&[cmd, "-t", "nat", "-N", "KUBE-NODEPORTS"]);
    ns.run(&[
        cmd,
        "-t",
        "nat",
        "-A",
        "KUBE-SERVICES",
        "-j",
        "KUBE-NODEPORTS",
    ]);
}

// ---- 1. a fresh namespace -------------------------------------------------------

#[test]
fn fresh_namespace_gives_no_node_finding() {
    needs!(Need::Root, Need::Tool("ip"));
    let ns = Netns::create("dn-fresh");
    let r = doctor(Some(&ns), &[]);
    assert_eq!(r.ids(), Vec::<String>::new(), "{:#}", r.json);
    // The live conntrack read ran (the namespace's own statistics).
    let stats = r.fact("conntrack statistics");
    assert!(
        stats.contains("insert_failed=0") && stats.contains("drop=0"),
        "{stats}"
    );
    r.fact("conntrack table:");
    r.fact("NOTRACK for queries to 169.254.20.10:53: none");
    r.fact("listening on 169.254.20.10:53: nothing");
    r.fact("kube-proxy: no trace of it");
    r.fact("tcp 127.0.0.1:9253 (metrics.listen): free");
}

// ---- 2. nodens's own rules, per backend ----------------------------------------

/// nodens with `[node] setup` in `backend`, listening on 169.254.20.10:53,
/// metrics on 127.0.0.1:9253, the zone `test.` -> CoreDNS; no repair
/// during the test (a reconcile interval of an hour).
fn node_config(backend: &str) -> String {
    let cfg = Cfg::new(&Net::fixed(131))
        .listen(&[cache_addr()])
        .metrics_listen("127.0.0.1:9253")
        .shutdown_grace(secs(1))
        .zone(Zone::new("test.", &[UPSTREAM.parse().unwrap()]));
    let node = NodeSection::new()
        .interface(IFACE)
        .link_kind("auto")
        .backend(backend)
        .reconcile_interval(Duration::from_secs(3600));
    format!("{}\n{}", cfg.to_toml(), node.to_toml())
}

fn start_nodens(ns: &Netns, toml: &str) -> Nodens {
    let mut nodens = Nodens::launch(toml, &ns.exec());
    in_netns(&ns.name, || nodens.wait_ready());
    nodens
}

fn upstream(ns: &Netns) -> CoreDns {
    let core = CoreDns::launch(
        &ns.exec(),
        UPSTREAM.parse().unwrap(),
        &[("test.", test_zone(""))],
    );
    in_netns(&ns.name, || core.wait_ready());
    core
}

/// nodens in `backend` (after `prepare`), its rules found in `expect`;
/// then `delete` removes them behind its back: `notrack-missing`.
fn nodens_rules_found(
    tag: &str,
    backend: &str,
    prepare: &[&[&str]],
    expect: &str,
    delete: &[&str],
) {
    let ns = Netns::create(tag);
    for cmd in prepare {
        ns.run(cmd);
    }
    let _core = upstream(&ns);
    let nodens = start_nodens(&ns, &node_config(backend));
    let config = nodens.config_path.to_str().unwrap().to_string();

    let r = doctor(Some(&ns), &["--config", &config]);
    for id in [
        "notrack-missing",
        "no-listener",
        "port-conflict",
        "backend-mismatch",
        "forwarding-loop",
    ] {
        r.must_not(id);
    }
    let queries = r.fact("NOTRACK for queries to 169.254.20.10:53");
    assert!(
        queries.contains(expect) && queries.contains("(nodens,"),
        "{queries}"
    );
    let answers = r.fact("NOTRACK for answers from 169.254.20.10:53");
    let backend = expect.split(' ').next().unwrap();
    assert!(
        answers.contains(&format!(": {backend} ")) && answers.contains("(nodens,"),
        "{answers}"
    );
    let listening = r.fact("listening on 169.254.20.10:53");
    assert!(listening.contains("nodens, pid"), "{listening}");
    let http = r.fact("tcp 127.0.0.1:9253 (metrics.listen)");
    assert!(
        http.contains("held by") && http.contains("nodens"),
        "{http}"
    );

    ns.run(delete);
    let r = doctor(Some(&ns), &["--config", &config]);
    let f = r.must("notrack-missing");
    assert_eq!(f["severity"], "warning");
    let ev = evidence(f);
    assert!(
        ev.contains(&format!("interface {IFACE} holds {CACHE_IP}")),
        "{ev}"
    );
    assert!(
        ev.contains("listening: ") && ev.contains("udp 169.254.20.10:53 (nodens, pid"),
        "{ev}"
    );
    drop(nodens);
}

#[test]
fn nodens_rules_in_nftables() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    nodens_rules_found(
        "dn-nft",
        "nftables",
        &[],
        "nftables inet nodens prerouting",
        &["nft", "delete", "table", "inet", "nodens"],
    );
}

#[test]
fn nodens_rules_in_iptables_nft() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // The system's iptables is the nft flavour here; nodens uses it when
    // no flavour has kube-proxy's rules.
    nodens_rules_found(
        "dn-iptnft",
        "iptables",
        &[],
        "iptables-nft raw NODENS-PREROUTING",
        &["iptables-nft", "-t", "raw", "-F", "NODENS-PREROUTING"],
    );
}

#[test]
fn nodens_rules_in_iptables_legacy() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // kube-proxy's chains in legacy: nodens follows them there.
    let ns_check = Netns::create("dn-legacy-probe");
    let has_legacy = ns_check.output_ok(&["iptables-legacy", "-t", "raw", "-S"]);
    drop(ns_check);
    if !has_legacy && skip_because("a working iptables-legacy") {
        return;
    }
    nodens_rules_found(
        "dn-legacy",
        "iptables",
        &[
            &["iptables-legacy", "-t", "nat", "-N", "KUBE-SERVICES"],
            &[
                "iptables-legacy",
                "-t",
                "nat",
                "-A",
                "PREROUTING",
                "-j",
                "KUBE-SERVICES",
            ],
        ],
        "iptables-legacy raw NODENS-PREROUTING",
        &["iptables-legacy", "-t", "raw", "-F", "NODENS-PREROUTING"],
    );
}

trait OutputOk {
    fn output_ok(&self, args: &[&str]) -> bool;
}

impl OutputOk for Netns {
    fn output_ok(&self, args: &[&str]) -> bool {
        Command::new(tool("ip"))
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

// ---- 3. an address without rules, then served, then untracked ------------------

#[test]
fn address_without_listener_then_served_then_notracked() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    let ns = Netns::create("dn-addr");
    address_link(&ns, IFACE, CACHE_IP);

    let r = doctor(Some(&ns), &[]);
    let f = r.must("no-listener");
    assert_eq!(f["severity"], "critical");
    assert!(evidence(f).contains("interface nodelocaldns holds 169.254.20.10"));
    r.must("notrack-missing");

    let cache = CoreDns::launch(&ns.exec(), cache_addr(), &[("test.", test_zone(""))]);
    in_netns(&ns.name, || cache.wait_ready());
    let r = doctor(Some(&ns), &[]);
    r.must_not("no-listener");
    let f = r.must("notrack-missing");
    assert!(
        evidence(f).contains("udp 169.254.20.10:53 (coredns, pid"),
        "{f:#}"
    );

    node_local_dns_nft(&ns);
    let r = doctor(Some(&ns), &[]);
    assert_eq!(r.ids(), Vec::<String>::new(), "{:#}", r.json);
    let q = r.fact("NOTRACK for queries to 169.254.20.10:53");
    assert!(
        q.contains("nftables ip nodelocal pre (node-local-dns, 1 rule)"),
        "{q}"
    );
    drop(cache);
}

// ---- 4. kube-proxy's mode and the backends -------------------------------------

#[test]
fn kube_proxy_modes_and_backend_mismatch() {
    needs!(Need::Root, Need::Tool("ip"));
    let ns = Netns::create("dn-kube");
    if !ns.output_ok(&["iptables-legacy", "-t", "raw", "-S"])
        && skip_because("a working iptables-legacy")
    {
        return;
    }
    kube_services(&ns, "iptables-nft");
    let r = doctor(Some(&ns), &[]);
    let mode = r.fact("kube-proxy mode:");
    assert!(
        mode.starts_with("kube-proxy mode: iptables (iptables-nft: KUBE-SERVICES"),
        "{mode}"
    );
    r.must_not("backend-mismatch");

    node_local_dns_iptables(&ns, "iptables-legacy");
    let r = doctor(Some(&ns), &[]);
    let f = r.must("backend-mismatch");
    assert_eq!(f["severity"], "warning");
    let ev = evidence(f);
    assert!(ev.contains("iptables-nft: KUBE-SERVICES"), "{ev}");
    assert!(
        ev.contains("iptables-legacy: NOTRACK rules in raw PREROUTING (node-local-dns)"),
        "{ev}"
    );
    // The rules are there (in the other flavour): not "missing".
    r.must_not("notrack-missing");

    // The same rules in kube-proxy's flavour: no mismatch.
    ns.run(&["iptables-legacy", "-t", "raw", "-F"]);
    node_local_dns_iptables(&ns, "iptables-nft");
    let r = doctor(Some(&ns), &[]);
    r.must_not("backend-mismatch");
    let q = r.fact("NOTRACK for queries to 169.254.20.10:53");
    assert!(
        q.contains("iptables-nft raw PREROUTING (node-local-dns, 2 rules)"),
        "{q}"
    );

    // kube-proxy in nftables mode: its own table.
    ns.run(&["nft", "add", "table", "ip", "kube-proxy"]);
    let r = doctor(Some(&ns), &[]);
    let mode = r.fact("kube-proxy mode:");
    assert!(mode.starts_with("kube-proxy mode: nftables"), "{mode}");
    // node-local-dns's rules in iptables-nft beside it: they work, said as information.
    let f = r.must("backend-mismatch");
    assert_eq!(f["severity"], "info");
    let ev = evidence(f);
    assert!(
        ev.contains("kube-proxy: nftables: table ip kube-proxy"),
        "{ev}"
    );
    assert!(
        ev.contains("iptables-nft: NOTRACK rules in raw PREROUTING (node-local-dns)"),
        "{ev}"
    );
    r.must_not("notrack-missing");

    // The same rules in nftables, next to kube-proxy's: nothing to say.
    ns.run(&["iptables-nft", "-t", "raw", "-F"]);
    node_local_dns_nft(&ns);
    let r = doctor(Some(&ns), &[]);
    r.must_not("backend-mismatch");
    r.must_not("notrack-missing");
}

// ---- 5. IPVS ------------------------------------------------------------------

#[test]
fn ipvs_mode_with_cluster_dns_on_the_service_ip() {
    needs!(Need::Root, Need::Tool("ip"));
    let ns = Netns::create("dn-ipvs");
    // What kube-proxy's IPVS mode leaves: kube-ipvs0 holding the Service IPs.
    address_link(&ns, "kube-ipvs0", "10.96.0.10");
    address_link(&ns, IFACE, CACHE_IP);
    node_local_dns_nft(&ns);
    let dir = tempfile::tempdir().unwrap();
    let kubelet = file(
        &dir,
        "config.yaml",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\n",
    );
    let r = doctor(Some(&ns), &["--kubelet-config", arg(&kubelet)]);
    assert!(r.fact("kube-proxy mode:").contains("ipvs"));
    let f = r.must("ipvs-cluster-dns");
    assert_eq!(f["severity"], "critical");
    let ev = evidence(f);
    assert!(
        ev.contains("clusterDNS") && ev.contains("10.96.0.10"),
        "{ev}"
    );
    assert!(
        ev.contains("10.96.0.10 is an IPVS virtual service (held by kube-ipvs0)"),
        "{ev}"
    );
    assert!(f["fix"].as_str().unwrap().contains("- 169.254.20.10"));

    let kubelet = file(
        &dir,
        "config.yaml",
        "kind: KubeletConfiguration\nclusterDNS: [169.254.20.10]\n",
    );
    let r = doctor(Some(&ns), &["--kubelet-config", arg(&kubelet)]);
    r.must_not("ipvs-cluster-dns");
}

// ---- 6. forwarding loops ---------------------------------------------------------

#[test]
fn forwarding_loops() {
    needs!(Need::Root, Need::Tool("ip"));
    let ns = Netns::create("dn-loop");
    let dir = tempfile::tempdir().unwrap();
    // The node's resolv.conf names the node cache, and "." forwards to it.
    let node_resolv = file(
        &dir,
        "node-resolv.conf",
        &format!("nameserver {CACHE_IP}\n"),
    );
    let config = file(
        &dir,
        "loop.toml",
        &format!(
            "[server]\nlisten = [\"{CACHE_IP}:53\"]\n[metrics]\nlisten = \"127.0.0.1:9300\"\n\
             [[zone]]\nname = \".\"\nresolv_conf = \"{}\"\n",
            node_resolv.display()
        ),
    );
    let r = doctor(Some(&ns), &["--config", arg(&config)]);
    let f = r.must("forwarding-loop");
    assert_eq!(f["severity"], "critical");
    let ev = evidence(f);
    assert!(ev.contains("zone . forwards to 169.254.20.10:53"), "{ev}");
    assert!(
        ev.contains("169.254.20.10:53 is nodens's own listen address"),
        "{ev}"
    );

    // A running nodens on loopback, and a second configuration whose zone
    // forwards to it: found by who holds the socket.
    let first = Cfg::new(&Net::fixed(132))
        .listen(&["127.0.0.1:5353".parse().unwrap()])
        .metrics_listen("127.0.0.1:9254")
        .zone(Zone::new("test.", &[UPSTREAM.parse().unwrap()]));
    let nodens = start_nodens(&ns, &first.to_toml());
    let config = file(
        &dir,
        "second.toml",
        "[server]\nlisten = [\"127.0.0.1:5354\"]\n[metrics]\nlisten = \"127.0.0.1:9301\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5353\"]\n",
    );
    let r = doctor(Some(&ns), &["--config", arg(&config)]);
    let ev = evidence(r.must("forwarding-loop"));
    assert!(
        ev.contains("127.0.0.1:5353 is served by nodens: ")
            && ev.contains("127.0.0.1:5353 (nodens, pid"),
        "{ev}"
    );

    // Upstreams elsewhere: no loop.
    let config = file(
        &dir,
        "fine.toml",
        "[server]\nlisten = [\"127.0.0.1:5354\"]\n[metrics]\nlisten = \"127.0.0.1:9301\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5300\"]\n",
    );
    let r = doctor(Some(&ns), &["--config", arg(&config)]);
    r.must_not("forwarding-loop");
    r.fact("forwarding loop: no upstream is nodens itself");
    drop(nodens);
}

// ---- 7. port conflicts ---------------------------------------------------------

#[test]
fn port_conflict_on_the_metrics_port() {
    needs!(Need::Root, Need::Tool("ip"));
    let ns = Netns::create("dn-port");
    // This test process holds nodens's default metrics port in the namespace.
    let squatter = in_netns(&ns.name, || {
        std::net::TcpListener::bind("127.0.0.1:9253").unwrap()
    });
    let r = doctor(Some(&ns), &[]);
    let f = r.must("port-conflict");
    assert_eq!(f["severity"], "critical");
    let ev = evidence(f);
    assert!(
        ev.contains("nodens is configured for tcp 127.0.0.1:9253 (metrics.listen) (the default)"),
        "{ev}"
    );
    assert!(ev.contains(&format!("pid {})", std::process::id())), "{ev}");

    let dir = tempfile::tempdir().unwrap();
    let config = file(
        &dir,
        "other-port.toml",
        "[server]\nlisten = [\"127.0.0.1:5354\"]\n[metrics]\nlisten = \"127.0.0.1:9300\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5300\"]\n",
    );
    let r = doctor(Some(&ns), &["--config", arg(&config)]);
    r.must_not("port-conflict");
    r.fact("tcp 127.0.0.1:9300 (metrics.listen): free");
    drop(squatter);
}

// ---- 8. CPU quota against threads ----------------------------------------------

#[test]
fn cpu_quota_against_threads() {
    needs!(Need::Root);
    let net = Net::alloc();
    let cg = CpuCgroup::create("doctor-test", 10_000, 100_000); // 0.1 CPU
    let wrapper = cg.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let cfg = Cfg::new(&net)
        .workers(16)
        .zone(Zone::new("test.", &[net.silent(0)]));
    let mut nodens = Nodens::launch(&cfg.to_toml(), &wrapper);
    nodens.wait_workers(Duration::from_secs(60));
    let pid = nodens.proc.pid();
    // At 0.1 CPU the runtime's threads start slowly: wait until all 16
    // workers exist as threads before doctor counts them.
    let threads = || -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("Threads:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    wait_until(
        Duration::from_secs(30),
        "nodens's 16 worker threads",
        || threads().filter(|&n| n >= 16).map(|_| ()),
    );
    // On the host: `ip netns exec` mounts a /sys of its own, without the
    // cgroup hierarchies. The node checks are read-only.
    let r = doctor(None, &[]);
    let f = r.json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["id"] == "cpu-quota-threads" && evidence(f).contains(&format!("nodens (pid {pid})"))
        })
        .unwrap_or_else(|| panic!("no cpu-quota-threads for pid {pid}: {:#}", r.json))
        .clone();
    assert_eq!(f["severity"], "warning");
    let ev = evidence(&f);
    assert!(
        ev.contains("CPU quota 10000 us per 100000 us (0.100 CPU)"),
        "{ev}"
    );
    drop(nodens);
}

// ---- 9. a policy engine that filters by conntrack ------------------------------

#[test]
fn policy_engine_beside_notrack() {
    needs!(Need::Root, Need::Tool("ip"), Need::Tool("nft"));
    let ns = Netns::create("dn-policy");
    // Calico's iptables data plane: its top chain and a workload's ingress chain.
    ns.run(&["iptables-nft", "-t", "filter", "-N", "cali-FORWARD"]);
    ns.run(&[
        "iptables-nft",
        "-t",
        "filter",
        "-N",
        "cali-tw-cali0123456789",
    ]);
    let r = doctor(Some(&ns), &[]);
    let engine = r.fact("network policy engine:");
    assert_eq!(engine, "network policy engine: Calico", "{engine}");
    // No node cache rules: nothing in the way.
    r.must_not("policy-conntrack");

    node_local_dns_nft(&ns);
    let r = doctor(Some(&ns), &[]);
    let f = r.must("policy-conntrack");
    assert_eq!(f["severity"], "warning");
    let ev = evidence(f);
    assert!(ev.contains("Calico: iptables-nft: 2 cali- chains"), "{ev}");
    assert!(ev.contains("nftables: NOTRACK rules in"), "{ev}");
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.contains("- to:\n      - ipBlock: {cidr: 169.254.20.10/32}")
            && fix.contains("- from:\n      - ipBlock: {cidr: 169.254.20.10/32}"),
        "{fix}"
    );

    // Calico's nftables data plane is known by its table.
    ns.run(&[
        "iptables-nft",
        "-t",
        "filter",
        "-X",
        "cali-tw-cali0123456789",
    ]);
    ns.run(&["iptables-nft", "-t", "filter", "-X", "cali-FORWARD"]);
    ns.run(&["nft", "add", "table", "ip", "calico"]);
    let r = doctor(Some(&ns), &[]);
    let ev = evidence(r.must("policy-conntrack"));
    assert!(ev.contains("Calico: nftables: table ip calico"), "{ev}");
}
