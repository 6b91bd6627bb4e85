//! `nodens convert-corefile`: the real binary on real NodeLocal DNSCache
//! Corefiles (tests/fixtures/corefile/, each citing its source). Every
//! conversion must pass `nodens check-config`; the last test serves the
//! converted configuration in front of a real CoreDNS.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corefile")
        .join(name)
}

/// What one run of `nodens convert-corefile` gave.
struct Run {
    code: Option<i32>,
    toml: String,
    stderr: String,
}

impl Run {
    fn table(&self) -> toml::Table {
        self.toml
            .parse()
            .unwrap_or_else(|e| panic!("not TOML ({e}):\n{}", self.toml))
    }

    /// The stderr line about `line` of the Corefile that says `kind`.
    fn finding(&self, path: &Path, line: usize, kind: &str) -> Option<&str> {
        let prefix = format!("{}:{line}: {kind}: ", path.display());
        self.stderr.lines().find(|l| l.starts_with(&prefix))
    }
}

fn convert(path: &Path, args: &[&str]) -> Run {
    let out = Command::new(nodens_bin())
        .arg("convert-corefile")
        .arg(path)
        .args(args)
        .output()
        .unwrap();
    run_of(out)
}

fn run_of(out: Output) -> Run {
    Run {
        code: out.status.code(),
        toml: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// A resolv.conf for the `.` zones: a loopback address nothing serves, so
/// no test can reach the machine's resolver through it.
fn resolv_conf(dir: &Path, ip: &str) -> PathBuf {
    let path = dir.join("resolv.conf");
    std::fs::write(&path, format!("nameserver {ip}\n")).unwrap();
    path
}

/// Runs the real `nodens check-config` on `toml`, with the environment a
/// node-local pod has for the kube-dns-upstream Service.
fn check_config(toml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodens.toml");
    std::fs::write(&path, toml).unwrap();
    let out = Command::new(nodens_bin())
        .env("KUBE_DNS_UPSTREAM_SERVICE_HOST", "10.96.0.11")
        .env_remove("KUBE_DNS_UPSTREAM_SERVICE_PORT")
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check-config failed: {}\n{toml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn strings(v: &toml::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn zones(t: &toml::Table) -> Vec<toml::Table> {
    t["zone"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z.as_table().unwrap().clone())
        .collect()
}

fn zone_names(t: &toml::Table) -> Vec<String> {
    zones(t)
        .iter()
        .map(|z| z["name"].as_str().unwrap().to_string())
        .collect()
}

/// The Kubernetes template's zones as node-cache runs them.
fn assert_kubernetes_zones(t: &toml::Table, resolv: &Path) {
    assert_eq!(
        zone_names(t),
        ["cluster.local", "in-addr.arpa", "ip6.arpa", "."]
    );
    let z = zones(t);
    for cluster in &z[..3] {
        assert_eq!(
            cluster["upstream_service"].as_str(),
            Some("kube-dns-upstream")
        );
        assert_eq!(cluster["transport"].as_str(), Some("force_tcp"));
        assert!(!cluster.contains_key("upstreams"));
    }
    // cache { success 9984 30; denial 9984 5 } and cache 30.
    assert_eq!(z[0]["max_ttl"].as_str(), Some("30s"));
    assert_eq!(z[0]["negative_max_ttl"].as_str(), Some("5s"));
    assert_eq!(z[1]["max_ttl"].as_str(), Some("30s"));
    assert_eq!(z[1]["negative_max_ttl"].as_str(), Some("30s"));
    // `forward . __PILLAR__UPSTREAM__SERVERS__`: the node's resolv.conf, UDP.
    assert_eq!(z[3]["resolv_conf"].as_str(), resolv.to_str());
    assert!(!z[3].contains_key("upstreams"));
    assert!(!z[3].contains_key("transport"));
    // Four caches of 9984 + 9984 entries at 1 KiB each.
    assert_eq!(t["cache"]["capacity"].as_str(), Some("78 MiB"));
    assert_eq!(t["metrics"]["listen"].as_str(), Some("0.0.0.0:9253"));
}

#[test]
fn template_without_values_names_the_lines_and_flags() {
    let path = fixture("nodelocaldns-template.Corefile");
    let run = convert(&path, &[]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.toml.is_empty(), "{}", run.toml);
    let first = format!(
        "{}:6: __PILLAR__DNS__DOMAIN__ is not substituted: pass --domain",
        path.display()
    );
    assert!(run.stderr.starts_with(&first), "{}", run.stderr);
    for flag in ["--local-dns IP", "--dns-server IP"] {
        assert!(
            run.stderr.contains(flag),
            "{flag} not named: {}",
            run.stderr
        );
    }
    assert!(run.stderr.contains("(line 14)"), "{}", run.stderr);
}

#[test]
fn template_with_values() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = resolv_conf(dir.path(), "127.0.0.9");
    let path = fixture("nodelocaldns-template.Corefile");
    let run = convert(
        &path,
        &[
            "--local-dns",
            "169.254.20.10",
            "--dns-server",
            "10.96.0.10",
            "--domain",
            "cluster.local",
            "--resolv-conf",
            resolv.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    check_config(&run.toml);
    let t = run.table();
    assert_eq!(
        strings(&t["server"]["listen"]),
        ["169.254.20.10:53", "10.96.0.10:53"]
    );
    assert_eq!(t["node"]["setup"].as_bool(), Some(true));
    assert_kubernetes_zones(&t, &resolv);
    // Fully translated: only notes.
    assert!(!run.stderr.contains("not translated"), "{}", run.stderr);
    assert!(
        run.finding(&path, 19, "note")
            .is_some_and(|l| l.contains("one address")),
        "{}",
        run.stderr
    );
}

#[test]
fn template_in_ipvs_mode_listens_on_the_local_address_only() {
    let path = fixture("nodelocaldns-template.Corefile");
    let run = convert(
        &path,
        &[
            "--local-dns",
            "169.254.20.10",
            "--dns-server",
            "",
            "--domain",
            "cluster.local",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        strings(&run.table()["server"]["listen"]),
        ["169.254.20.10:53"]
    );
}

#[test]
fn substituted_configmap() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = resolv_conf(dir.path(), "127.0.0.9");
    let path = fixture("nodelocaldns-substituted.Corefile");
    let run = convert(
        &path,
        &[
            "--resolv-conf",
            resolv.to_str().unwrap(),
            "--handover-socket",
            "/run/nodens/handover.sock",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    check_config(&run.toml);
    let t = run.table();
    assert_eq!(
        strings(&t["server"]["listen"]),
        ["169.254.20.10:53", "10.96.0.10:53"]
    );
    assert_eq!(
        t["server"]["handover_socket"].as_str(),
        Some("/run/nodens/handover.sock")
    );
    assert_kubernetes_zones(&t, &resolv);
    assert!(!run.stderr.contains("not translated"), "{}", run.stderr);
    // reload, loop, errors: one note each, naming all four blocks.
    let reload = run
        .finding(&path, 17, "note")
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(
        reload.contains("reload") && reload.contains("also lines 29, 40, 51"),
        "{reload}"
    );
}

#[test]
fn gke_layout() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = resolv_conf(dir.path(), "127.0.0.9");
    let path = fixture("gke.Corefile");
    let run = convert(
        &path,
        &[
            "--local-dns",
            "169.254.20.10",
            "--dns-server",
            "10.0.0.10",
            "--resolv-conf",
            resolv.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    check_config(&run.toml);
    let t = run.table();
    assert_eq!(zone_names(&t), ["cluster.local", "."]);
    let z = zones(&t);
    assert_eq!(z[0]["upstream_service"].as_str(), Some("kube-dns-upstream"));
    assert_eq!(z[0]["transport"].as_str(), Some("force_tcp"));
    assert_eq!(z[1]["resolv_conf"].as_str(), resolv.to_str());
    assert_eq!(z[1]["transport"].as_str(), Some("force_tcp"));
    assert_eq!(
        strings(&t["server"]["listen"]),
        ["169.254.20.10:53", "10.0.0.10:53"]
    );
    assert_eq!(t["metrics"]["listen"].as_str(), Some("0.0.0.0:9253"));
    // cluster.local binds only the local address, `.` both: cluster.local
    // is a view of the local address, as CoreDNS serves it there only.
    assert_eq!(strings(&z[0]["listen"]), ["169.254.20.10:53"]);
    assert!(!z[1].contains_key("listen"), "{}", run.toml);
    assert!(!run.stderr.contains("the union"), "{}", run.stderr);
}

#[test]
fn plugins_without_equivalent_are_listed_with_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = resolv_conf(dir.path(), "127.0.0.9");
    let path = fixture("custom-plugins.Corefile");
    let resolv_arg = resolv.to_str().unwrap();
    let run = convert(&path, &["--resolv-conf", resolv_arg]);
    assert_eq!(
        run.code,
        Some(0),
        "warnings alone do not fail: {}",
        run.stderr
    );
    check_config(&run.toml);
    // Line 51's `nsid` is the one plugin left untranslated.
    let f = run
        .finding(&path, 51, "not translated")
        .unwrap_or_else(|| panic!("no nsid at line 51: {}", run.stderr));
    assert!(f.contains("`nsid`"), "{f}");
    assert_eq!(
        run.stderr.matches("not translated").count(),
        1,
        "{}",
        run.stderr
    );

    let t = run.table();
    assert_eq!(zone_names(&t), ["cluster.local", "corp.example", "."]);
    let z = zones(&t);
    assert_eq!(z[0]["health_check"].as_str(), Some("1s"));
    // Line 17's `rewrite name` is the cluster.local zone's [[zone.rewrite]].
    let rewrite = &z[0]["rewrite"][0];
    assert_eq!(rewrite["from"].as_str(), Some("legacy.example.com."));
    assert_eq!(
        rewrite["to"].as_str(),
        Some("web.default.svc.cluster.local.")
    );
    assert_eq!(z[0]["pool"]["idle_timeout"].as_str(), Some("5s"));
    assert_eq!(
        strings(&z[1]["upstreams"]),
        ["10.10.0.2:53", "10.10.0.3:5353"]
    );
    assert_eq!(z[1]["policy"].as_str(), Some("sequential"));
    assert_eq!(z[1]["max_ttl"].as_str(), Some("60s"));
    assert_eq!(t["server"]["max_misses_in_flight"].as_integer(), Some(500));
    // Each block's cache is its zone's: prefetch and serve_stale (CoreDNS's
    // default mode, immediate) for cluster.local only.
    let cache = &z[0]["cache"];
    assert_eq!(cache["prefetch_min_hits"].as_integer(), Some(5));
    assert_eq!(cache["prefetch_percent"].as_integer(), Some(20));
    assert_eq!(cache["stale_max_age"].as_str(), Some("2h"));
    assert_eq!(cache["stale_answer_timeout"].as_str(), Some("0s"));
    assert!(!z[1].contains_key("cache"), "corp.example: `cache 60` only");
    assert!(
        !t["cache"]
            .as_table()
            .unwrap()
            .contains_key("prefetch_min_hits")
    );

    // `hosts` and `template` (lines 42, 46) become the root zone's local answers.
    let hosts = &z[2]["hosts"];
    assert_eq!(strings(&hosts["files"]), ["/etc/hosts"]);
    assert_eq!(strings(&hosts["entries"]), ["10.20.0.5 registry.internal"]);
    assert_eq!(hosts["fallthrough"].as_bool(), Some(true));
    let template = &z[2]["template"][0];
    assert_eq!(template["type"].as_str(), Some("AAAA"));
    assert_eq!(strings(&template["zones"]), ["blocked.example"]);
    assert_eq!(template["rcode"].as_str(), Some("NXDOMAIN"));
    assert_eq!(strings(&template["authority"]), Vec::<String>::new());

    // --strict: the same output, exit 2.
    let out_path = dir.path().join("out.toml");
    let strict = convert(
        &path,
        &[
            "--resolv-conf",
            resolv_arg,
            "--strict",
            "-o",
            out_path.to_str().unwrap(),
        ],
    );
    assert_eq!(strict.code, Some(2), "{}", strict.stderr);
    assert!(strict.toml.is_empty());
    assert_eq!(std::fs::read_to_string(&out_path).unwrap(), run.toml);
}

#[test]
fn reads_stdin_and_names_syntax_errors() {
    let mut child = Command::new(nodens_bin())
        .args(["convert-corefile", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b".:53 {\n  forward . 127.0.0.1:5300 {\n    force_tcp\n}\n")
        .unwrap();
    let run = run_of(child.wait_with_output().unwrap());
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(
        run.stderr.trim(),
        "<stdin>:1: the block opened here is never closed"
    );
}

/// The substituted Corefile moved to loopback: nodens with its converted
/// configuration forwards the cluster domain and reverse lookups to a real
/// CoreDNS standing in for kube-dns (reached as the kube-dns-upstream
/// Service through the environment), over TCP as `force_tcp` asks.
#[test]
fn converted_configuration_forwards_to_the_cluster_dns() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let service_ip = net.ip(10);
    let core = CoreDns::start(
        net.upstream(0),
        &[
            (
                "cluster.local.",
                zone_file("cluster.local.", "web.default.svc 30 IN A 10.0.0.5"),
            ),
            (
                "in-addr.arpa.",
                zone_file(
                    "in-addr.arpa.",
                    "5.0.0.10 30 IN PTR web.default.svc.cluster.local.",
                ),
            ),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let corefile = std::fs::read_to_string(fixture("nodelocaldns-substituted.Corefile"))
        .unwrap()
        .replace("169.254.20.10", &net.ip(1).to_string())
        .replace("10.96.0.10", &service_ip.to_string())
        .replace(":53 {", ":1053 {")
        .replace("prometheus :9253", &format!("prometheus {}", net.metrics()));
    let path = dir.path().join("Corefile");
    std::fs::write(&path, corefile).unwrap();
    let resolv = resolv_conf(dir.path(), &net.ip(9).to_string());
    let run = convert(&path, &["--resolv-conf", resolv.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let t = run.table();
    let second = format!("{service_ip}:1053");
    assert_eq!(
        strings(&t["server"]["listen"]),
        [net.nodens().to_string(), second.clone()]
    );
    assert!(!t.contains_key("node"), "loopback needs no node setup");

    let host = format!("KUBE_DNS_UPSTREAM_SERVICE_HOST={}", net.upstream(0).ip());
    let port = format!("KUBE_DNS_UPSTREAM_SERVICE_PORT={}", net.upstream(0).port());
    let mut nodens = Nodens::launch(&run.toml, &["env", &host, &port]);
    nodens.wait_ready();

    let r = udp_query(
        net.nodens(),
        &Q::new("web.default.svc.cluster.local.", Rt::A),
    );
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert_eq!(r.a(), vec![ipv4("10.0.0.5")]);
    let r = udp_query(
        second.parse().unwrap(),
        &Q::new("5.0.0.10.in-addr.arpa.", Rt::PTR),
    );
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert_eq!(r.answer_set().len(), 1, "one PTR: {:?}", r.answer_set());
    assert!(
        r.answer_set()
            .iter()
            .any(|a| a.contains("web.default.svc.cluster.local.")),
        "{:?}",
        r.answer_set()
    );
    core.sync_log();
    assert_eq!(
        core.count_tcp_queries("web.default.svc.cluster.local.", "A"),
        1
    );
    assert_eq!(core.count_tcp_queries("5.0.0.10.in-addr.arpa.", "PTR"), 1);
}

#[test]
fn for_the_chart_the_conversion_carries_what_its_pods_expect() {
    // A configOverride replaces the whole file the chart writes: the
    // converted one must bring the chart's handover socket, uid and probe
    // server (its liveness probe asks 127.0.0.1:9254), or the pods never
    // get ready.
    let dir = tempfile::tempdir().unwrap();
    let resolv = resolv_conf(dir.path(), "127.0.0.9");
    let path = fixture("nodelocaldns-substituted.Corefile");
    let run = convert(
        &path,
        &["--resolv-conf", resolv.to_str().unwrap(), "--for-chart"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    check_config(&run.toml);
    let t = run.table();
    assert_eq!(
        t["server"]["handover_socket"].as_str(),
        Some("/run/nodens/handover.sock")
    );
    assert_eq!(t["server"]["run_as_user"].as_integer(), Some(65353));
    assert_eq!(
        t["server"]["control_socket"].as_str(),
        Some("/run/nodens/control.sock"),
        "where the chart's exec probes ask"
    );
    assert_eq!(
        t["metrics"]["probe_listen"].as_str(),
        Some("127.0.0.1:9254")
    );
}

/// Blocks on two binds and keys on two ports (views), the same Corefile run
/// by nodens (converted) and by CoreDNS 1.13 side by side, on addresses of
/// their own: each address answers as its block says. The two upstreams
/// answer `www.example.` differently, so an answer from the wrong view (or
/// the cache of another view) shows.
#[test]
fn blocks_per_address_and_port_answer_as_coredns_does() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let first = CoreDns::start(
        net.upstream(0),
        &[("example.", zone_file("example.", "www 300 IN A 10.0.0.1"))],
    );
    let second = CoreDns::start(
        net.upstream(1),
        &[("example.", zone_file("example.", "www 300 IN A 10.0.0.2"))],
    );
    // Pods' address `.1` and the node's `.5`; `.1` also serves `other.` and
    // a second `example.` on port 1054 (a kubespray-style extra port).
    let corefile = |pods: &str, node: &str, extra: &str| {
        format!(
            "(common) {{\n  cache 30\n  {extra}\n}}\n\
             example:1053 {{\n  bind {pods}\n  import common\n  forward . {up0}\n}}\n\
             example:1053 {{\n  bind {node}\n  import common\n  forward . {up1}\n}}\n\
             other:1053 example:1054 {{\n  bind {pods}\n  import common\n  forward . {up1}\n}}\n",
            up0 = net.upstream(0),
            up1 = net.upstream(1),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("Corefile");
    let (pods, node) = (net.ip(1), net.ip(5));
    let prometheus = format!("prometheus {}", net.metrics());
    std::fs::write(
        &path,
        corefile(&pods.to_string(), &node.to_string(), &prometheus),
    )
    .unwrap();
    let run = convert(&path, &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    check_config(&run.toml);
    let t = run.table();
    let views: Vec<Vec<String>> = zones(&t)
        .iter()
        .map(|z| z.get("listen").map(strings).unwrap_or_default())
        .collect();
    assert_eq!(
        views,
        [
            vec![format!("{pods}:1053")],
            vec![format!("{node}:1053")],
            vec![format!("{pods}:1053")],
            vec![format!("{pods}:1054")],
        ],
        "{}",
        run.toml
    );
    let mut nodens = Nodens::launch(&run.toml, &[]);
    nodens.wait_ready();

    // The reference: CoreDNS on `.11` and `.15` with the same blocks.
    let reference = dir.path().join("Corefile.coredns");
    std::fs::write(
        &reference,
        corefile(&net.ip(11).to_string(), &net.ip(15).to_string(), ""),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(coredns_bin());
    cmd.arg("-conf").arg(&reference).current_dir(dir.path());
    let _coredns = Proc::spawn("coredns views", cmd);
    let core_pods = std::net::SocketAddr::new(net.ip(11), 1053);
    let www = Q::new("www.example.", Rt::A);
    wait_until(
        std::time::Duration::from_secs(15),
        "the reference CoreDNS to answer",
        || udp_query_timeout(core_pods, &www, std::time::Duration::from_millis(200)).map(|_| ()),
    );

    // Each address in turn, the same name: the node's address comes after
    // the pods' answer is cached, and must not get it.
    let cases = [
        (
            (pods, 1053),
            (net.ip(11), 1053),
            "www.example.",
            rcode::NOERROR,
            Some("10.0.0.1"),
        ),
        (
            (node, 1053),
            (net.ip(15), 1053),
            "www.example.",
            rcode::NOERROR,
            Some("10.0.0.2"),
        ),
        (
            (pods, 1054),
            (net.ip(11), 1054),
            "www.example.",
            rcode::NOERROR,
            Some("10.0.0.2"),
        ),
        (
            (pods, 1053),
            (net.ip(11), 1053),
            "www.example.",
            rcode::NOERROR,
            Some("10.0.0.1"),
        ),
        // `other.` is served on the pods' address only.
        (
            (node, 1053),
            (net.ip(15), 1053),
            "www.other.",
            rcode::REFUSED,
            None,
        ),
        (
            (pods, 1054),
            (net.ip(11), 1054),
            "www.other.",
            rcode::REFUSED,
            None,
        ),
    ];
    for (ours, theirs, name, code, a) in cases {
        let q = Q::new(name, Rt::A);
        let n = udp_query(ours.into(), &q);
        let c = udp_query(theirs.into(), &q);
        assert_eq!(c.rcode(), code, "CoreDNS on {theirs:?} for {name}");
        assert_eq!(n.rcode(), code, "nodens on {ours:?} for {name}");
        let expected: Vec<std::net::Ipv4Addr> = a.map(ipv4).into_iter().collect();
        assert_eq!(c.a(), expected, "CoreDNS on {theirs:?}");
        assert_eq!(n.a(), expected, "nodens on {ours:?}");
    }
    // Each upstream was asked once by nodens (then its view's cache
    // answered), and each view is labelled in the metrics.
    first.sync_log();
    second.sync_log();
    // nodens and CoreDNS once each for the pods' view; for the node's view
    // and port 1054's, once each again (two views, two caches).
    assert_eq!(first.count_queries("www.example.", "A"), 2);
    assert_eq!(second.count_queries("www.example.", "A"), 4);
    let metrics = nodens.metrics_text();
    assert!(
        metrics.contains(&format!("view=\"{node}:1053\"")),
        "no view label in:\n{metrics}"
    );
}
