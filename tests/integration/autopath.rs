//! Autopath behind the node cache, against a real kube-apiserver and
//! CoreDNS's `kubernetes` plugin (tests/support/src/kube.rs) in a network
//! namespace. The "pods" are Pod objects bound to node `node-1`, their
//! addresses on the namespace's loopback (or, for the resolver clients, a
//! namespace of their own behind a veth), so each query comes from the
//! pod's own address, as on a node.
//!
//! - a verified pod's first expansion is answered with the end of its walk
//!   behind a CNAME, in one query;
//! - an unknown address, a hostNetwork pod, a pod with its own search
//!   list, a pod of another node, and an address two pods claim get, byte
//!   for byte, what a nodens without autopath answers;
//! - an address reused by a pod of another namespace is trusted only once
//!   the old pod is gone from the API (not while it is terminating);
//! - glibc, musl and Go look an external name up with one query per
//!   address family;
//! - an API server restart under load loses no query and gives no wrong
//!   answer.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::Message;
use support::*;

const NODE: &str = "node-1";
/// CoreDNS serving the zones outside the cluster.
const EXTERNAL: &str = "10.53.0.2";
const VERIFIED: &str = "127.0.0.21";
const HOST_NETWORK: &str = "127.0.0.22";
const OWN_SEARCH: &str = "127.0.0.23";
const REUSED: &str = "127.0.0.24";
const OTHER_NODE: &str = "127.0.0.25";
const UNKNOWN: &str = "127.0.0.26";
/// The resolver clients' pod, in a namespace of its own.
const CLIENT_POD: &str = "10.250.0.5";
const NODE_SIDE: &str = "10.250.0.1";

const OBJECTS: &str = "\
apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\n\
apiVersion: v1\nkind: Namespace\nmetadata: {name: team-b}\n---\n\
apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: team-a}\n\
spec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 80}]}\n---\n\
apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: team-b}\n\
spec: {clusterIP: 10.96.0.21, ports: [{name: pg, port: 5432}]}\n";

/// Outside the cluster: `*.example.com` (A only; `www` a CNAME to `api`),
/// `intranet.corp.internal` (the node's search domain), and a root that
/// denies everything else.
fn external_zones() -> Vec<(&'static str, String)> {
    let root = "$ORIGIN .\n$TTL 3600\n\
                @ IN SOA ns.root. hostmaster.root. 1 7200 3600 1209600 30\n\
                @ IN NS ns.root.\n\
                ns.root. IN A 192.0.2.53\n";
    vec![
        (
            "example.com.",
            zone_file(
                "example.com.",
                "api 60 IN A 192.0.2.10\nwww 60 IN CNAME api\n* 60 IN A 192.0.2.99\n",
            ),
        ),
        (
            "corp.internal.",
            zone_file("corp.internal.", "intranet 60 IN A 192.0.2.30\n"),
        ),
        (".", root.to_string()),
    ]
}

/// The resolver clients' pod, with the search list of a pod in `team-a`
/// and a custom search domain.
fn client_pod(node: &Netns) -> PodNet {
    let addrs = PodAddrs {
        veth: "vpod0",
        node_side: NODE_SIDE,
        ipv4: CLIENT_POD,
        ipv6: "fd00:244::5",
    };
    let pod = PodNet::create(node, "apod", &addrs);
    pod.resolv_conf(&format!(
        "search team-a.svc.cluster.local svc.cluster.local cluster.local corp.internal\n\
         nameserver {NODE_SIDE}\noptions ndots:5 timeout:2 attempts:2\n"
    ));
    pod
}

struct Lab {
    /// With autopath.
    nodens: Nodens,
    /// The same configuration without it.
    plain: Nodens,
    kube: Kube,
    pod: PodNet,
    ns: Netns,
    _core: KubeDns,
    _external: CoreDns,
}

fn config(
    net: &Net,
    kube: &Kube,
    core: SocketAddr,
    autopath: bool,
    listen: &[SocketAddr],
) -> String {
    let mut listen = listen.to_vec();
    listen.insert(0, net.nodens());
    Cfg::new(net)
        .listen(&listen)
        .zone(Zone::new("cluster.local.", &[core]).query_log("{}"))
        .zone(Zone::new(".", &[SocketAddr::new(EXTERNAL.parse().unwrap(), 53)]).query_log("{}"))
        .raw(&format!(
            "[cluster]\nautopath = {autopath}\nsearch_domains = [\"corp.internal.\"]\n\n{}",
            kube.pod_watch(NODE)
        ))
        .to_toml()
}

impl Lab {
    fn start() -> Lab {
        let ns = Netns::create("autopath");
        let kube = Kube::start(&ns);
        kube.create(OBJECTS);
        ns.add_to_lo(&[
            EXTERNAL,
            VERIFIED,
            HOST_NETWORK,
            OWN_SEARCH,
            REUSED,
            OTHER_NODE,
            UNKNOWN,
        ]);
        let core = KubeDns::start_bound(&ns, &kube);
        let probe = Q::new("web.team-a.svc.cluster.local.", Rt::A);
        wait_until(
            Duration::from_secs(30),
            "CoreDNS to serve the cluster",
            || {
                in_netns(&ns.name, || {
                    udp_query_timeout(core.addr, &probe, Duration::from_millis(500))
                })
                .filter(|r| r.a() == [ipv4("10.96.0.20")])
            },
        );
        let external = CoreDns::launch(
            &ns.exec(),
            SocketAddr::new(EXTERNAL.parse().unwrap(), 53),
            &external_zones(),
        );
        in_netns(&ns.name, || external.wait_ready());

        let pods = [
            ("team-a", "client", VERIFIED, NODE, ""),
            (
                "team-a",
                "hostnet",
                HOST_NETWORK,
                NODE,
                "  hostNetwork: true\n",
            ),
            (
                "team-a",
                "own-search",
                OWN_SEARCH,
                NODE,
                "  dnsConfig: {searches: [corp.internal]}\n",
            ),
            ("team-a", "old", REUSED, NODE, ""),
            ("team-b", "new", REUSED, NODE, ""),
            ("team-a", "away", OTHER_NODE, "node-2", ""),
            ("team-a", "resolver", CLIENT_POD, NODE, ""),
        ];
        let pod = client_pod(&ns);
        for (namespace, name, ip, node, spec) in pods {
            create_pod(&kube, namespace, name, ip, node, spec);
        }

        let (a, b) = (Net::fixed(15), Net::fixed(16));
        let pod_side: SocketAddr = format!("{NODE_SIDE}:53").parse().unwrap();
        let toml = config(&a, &kube, core.addr, true, &[pod_side]);
        let mut nodens = Nodens::launch(&toml, &ns.exec());
        let mut plain = Nodens::launch(&config(&b, &kube, core.addr, false, &[]), &ns.exec());
        in_netns(&ns.name, || {
            nodens.wait_ready();
            plain.wait_ready();
        });
        let lab = Lab {
            nodens,
            plain,
            kube,
            pod,
            ns,
            _core: core,
            _external: external,
        };
        lab.wait_pods(6.0);
        lab
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        in_netns(&self.ns.name, || self.nodens.metric(name, labels))
    }

    fn synced(&self) -> f64 {
        self.metric(
            "nodens_kubernetes_watch_synced",
            &[("resource", "pods"), ("watch", NODE)],
        )
    }

    /// Waits until the pod watch is synced and holds `n` pods.
    fn wait_pods(&self, n: f64) {
        wait_until(
            Duration::from_secs(30),
            &format!("the pod watch to hold {n} pods"),
            || {
                let objects = self.metric(
                    "nodens_kubernetes_watch_objects",
                    &[("resource", "pods"), ("watch", NODE)],
                );
                (self.synced() == 1.0 && objects == n).then_some(())
            },
        );
    }

    /// The raw reply of `server` to `packet`, sent from `source`.
    fn ask_from(&self, source: &str, server: SocketAddr, packet: &[u8]) -> Option<Vec<u8>> {
        let source: IpAddr = source.parse().unwrap();
        in_netns(&self.ns.name, || {
            udp_exchange_from(source, server, packet, Duration::from_secs(3))
        })
    }

    fn autopath(&self, source: &str, name: &str, t: Rt) -> Message {
        let packet = Q::new(name, t).to_bytes();
        let raw = self
            .ask_from(source, self.nodens.dns, &packet)
            .unwrap_or_else(|| panic!("no answer to {name} from {source}"));
        Message::from_vec(&raw).unwrap()
    }

    /// Asks `name` from `source` of both servers, the one without
    /// autopath first: the replies must be the same bytes.
    fn assert_plain(&self, source: &str, name: &str) {
        let packet = Q::new(name, Rt::A).id(0x5a5a).to_bytes();
        let without = self
            .ask_from(source, self.plain.dns, &packet)
            .expect("plain answer");
        let with = self
            .ask_from(source, self.nodens.dns, &packet)
            .expect("answer");
        assert_eq!(
            with,
            without,
            "{name} from {source}: autopath must not change the answer\nwith:    {}\nwithout: {}",
            show(&with),
            show(&without)
        );
    }
}

fn create_pod(kube: &Kube, namespace: &str, name: &str, ip: &str, node: &str, spec: &str) {
    kube.create_pod(namespace, name, &[ip], node, spec);
}

/// A reply as text, for failure messages.
fn show(raw: &[u8]) -> String {
    Message::from_vec(raw).map_or_else(|e| format!("unparsable: {e}"), |m| m.to_string())
}

/// The answer records as `owner type data`, lower case, without TTLs.
fn records(m: &Message) -> Vec<String> {
    m.answers()
        .iter()
        .map(|r| format!("{} {} {}", r.name(), r.record_type(), r.data()).to_ascii_lowercase())
        .collect()
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A name no cache has seen: `u<N>.example.com` (the zone's wildcard).
fn fresh() -> String {
    format!("u{}.example.com", SEQ.fetch_add(1, Ordering::Relaxed))
}

#[test]
fn autopath_answers_verified_pods_and_no_one_else() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let lab = Lab::start();
    let answered = || lab.metric("nodens_autopath_answers_total", &[]);

    // A verified pod: the walk's end behind a CNAME, in one query.
    let m = lab.autopath(VERIFIED, "api.example.com.team-a.svc.cluster.local.", Rt::A);
    assert_eq!(m.response_code(), hickory_proto::op::ResponseCode::NoError);
    assert_eq!(
        m.queries()[0].name().to_ascii(),
        "api.example.com.team-a.svc.cluster.local."
    );
    assert_eq!(
        records(&m),
        [
            "api.example.com.team-a.svc.cluster.local. cname api.example.com.",
            "api.example.com. a 192.0.2.10"
        ]
    );
    assert_eq!(answered(), 1.0);
    // NODATA at the end of the walk: the CNAME and the zone's SOA.
    let m = lab.autopath(
        VERIFIED,
        "api.example.com.team-a.svc.cluster.local.",
        Rt::AAAA,
    );
    assert_eq!(
        records(&m),
        ["api.example.com.team-a.svc.cluster.local. cname api.example.com."]
    );
    assert_eq!(m.name_servers()[0].name().to_ascii(), "example.com.");
    // A chain at the end of the walk, a name of the node's search domain,
    // a Service of another namespace.
    for (name, end) in [
        (
            "www.example.com",
            vec![
                "www.example.com. cname api.example.com.",
                "api.example.com. a 192.0.2.10",
            ],
        ),
        ("intranet", vec!["intranet.corp.internal. a 192.0.2.30"]),
        (
            "db.team-b",
            vec!["db.team-b.svc.cluster.local. a 10.96.0.21"],
        ),
    ] {
        let asked = format!("{name}.team-a.svc.cluster.local.");
        let m = lab.autopath(VERIFIED, &asked, Rt::A);
        let first = format!("{asked} cname {}", end[0].split(' ').next().unwrap());
        let mut expected = vec![first];
        expected.extend(end.iter().map(|s| s.to_string()));
        assert_eq!(records(&m), expected, "{asked}");
    }
    // The pod's own Service answers for itself: no CNAME.
    let m = lab.autopath(VERIFIED, "web.team-a.svc.cluster.local.", Rt::A);
    assert_eq!(records(&m), ["web.team-a.svc.cluster.local. a 10.96.0.20"]);
    // A name of another namespace is no first expansion of this pod's.
    let before = answered();
    lab.assert_plain(VERIFIED, &format!("{}.team-b.svc.cluster.local.", fresh()));
    assert_eq!(answered(), before);

    // Everyone else: exactly what nodens without autopath answers.
    for source in [UNKNOWN, HOST_NETWORK, OWN_SEARCH, OTHER_NODE, REUSED] {
        lab.assert_plain(source, &format!("{}.team-a.svc.cluster.local.", fresh()));
    }
    lab.assert_plain(REUSED, &format!("{}.team-b.svc.cluster.local.", fresh()));
    assert_eq!(
        answered(),
        before,
        "no autopath answer for an unverified client"
    );
    // The query log names the pod the watch knows (a verified pod's
    // address), and no pod for an address it does not know.
    let logged_from = |source: &str| {
        let from = format!("[INFO] {source}:");
        wait_until(
            Duration::from_secs(10),
            &format!("a query log line from {source}"),
            || {
                let lines = lab.nodens.proc.lines();
                let found: Vec<String> = lines
                    .into_iter()
                    .filter(|l| l.contains(&from) && l.contains(" source="))
                    .collect();
                (!found.is_empty()).then_some(found)
            },
        )
    };
    for line in logged_from(VERIFIED) {
        assert!(
            line.ends_with(" namespace=team-a pod=client"),
            "the pod on its line: {line}"
        );
    }
    for line in logged_from(UNKNOWN) {
        assert!(!line.contains("namespace="), "no pod known: {line}");
    }

    // The old holder of the reused address terminating: still not trusted.
    lab.kube
        .try_kubectl(
            &["-n", "team-a", "delete", "pod", "old", "--wait=false"],
            None,
        )
        .unwrap();
    wait_until(Duration::from_secs(10), "pod old to be terminating", || {
        let out = lab
            .kube
            .try_kubectl(
                &[
                    "-n",
                    "team-a",
                    "get",
                    "pod",
                    "old",
                    "-o",
                    "jsonpath={.metadata.deletionTimestamp}",
                ],
                None,
            )
            .ok()?;
        (!out.is_empty()).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    lab.assert_plain(REUSED, &format!("{}.team-b.svc.cluster.local.", fresh()));
    // Gone from the API: the new pod is trusted, in its own namespace only.
    lab.kube
        .try_kubectl(
            &[
                "-n",
                "team-a",
                "delete",
                "pod",
                "old",
                "--grace-period=0",
                "--force",
            ],
            None,
        )
        .unwrap();
    lab.wait_pods(5.0);
    let name = format!("{}.team-b.svc.cluster.local.", fresh());
    let m = lab.autopath(REUSED, &name, Rt::A);
    assert_eq!(records(&m).len(), 2, "{m}");
    lab.assert_plain(REUSED, &format!("{}.team-a.svc.cluster.local.", fresh()));
}

#[test]
fn an_api_server_restart_under_load_loses_no_query() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns,
        Need::Alone
    );
    let mut lab = Lab::start();
    let stop = AtomicBool::new(false);
    let (lost, plain, chained, wrong) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let server = lab.nodens.dns;
    let ns_name = lab.ns.name.clone();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(240);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let base = fresh();
                    let packet =
                        Q::new(&format!("{base}.team-a.svc.cluster.local."), Rt::A).to_bytes();
                    let raw = in_netns(&ns_name, || {
                        udp_exchange_from(
                            VERIFIED.parse().unwrap(),
                            server,
                            &packet,
                            Duration::from_secs(3),
                        )
                    });
                    let Some(raw) = raw else {
                        lost.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let m = Message::from_vec(&raw).unwrap();
                    let r = records(&m);
                    let n = m.response_code().low();
                    if n == rcode::NXDOMAIN as u8 && r.is_empty() {
                        plain.fetch_add(1, Ordering::Relaxed);
                    } else if n == 0 && r.len() == 2 && r[1] == format!("{base}. a 192.0.2.99") {
                        chained.fetch_add(1, Ordering::Relaxed);
                    } else {
                        wrong.fetch_add(1, Ordering::Relaxed);
                        eprintln!("wrong answer: {m}");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
        }
        std::thread::sleep(Duration::from_secs(2));
        lab.kube.stop_apiserver();
        wait_until(
            Duration::from_secs(30),
            "the pod watch to fall back",
            || (lab.synced() == 0.0).then_some(()),
        );
        let plain_before = plain.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            plain.load(Ordering::Relaxed) > plain_before,
            "while the list may be out of date, answers are plain"
        );
        lab.kube.start_apiserver();
        lab.wait_pods(6.0);
        let chained_before = chained.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            chained.load(Ordering::Relaxed) > chained_before,
            "autopath again"
        );
        stop.store(true, Ordering::Relaxed);
    });
    let (lost, wrong) = (lost.into_inner(), wrong.into_inner());
    eprintln!(
        "under load: {} chained, {} plain, {lost} lost, {wrong} wrong",
        chained.into_inner(),
        plain.into_inner()
    );
    assert_eq!((lost, wrong), (0, 0));
    in_netns(&lab.ns.name, || lab.nodens.assert_alive());
}

#[test]
fn glibc_musl_and_go_look_an_external_name_up_in_one_round_trip() {
    needs!(
        Need::Root,
        Need::Tool("musl-gcc"),
        Need::Tool("go"),
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let bins = tempfile::tempdir().unwrap();
    let musl = build_musl_lookup(bins.path());
    let go = build_go_lookup(bins.path());
    let lab = Lab::start();
    let requests = || {
        in_netns(&lab.ns.name, || {
            sum_metric(
                &parse_metrics(&lab.nodens.metrics_text()),
                "coredns_dns_requests_total",
                &[],
            )
        })
    };
    let (musl, go) = (musl.to_str().unwrap(), go.to_str().unwrap());
    /// A resolver, the program that looks a name up with it, its environment.
    type Client<'a> = (&'a str, Vec<&'a str>, &'a [(&'a str, &'a str)]);
    let clients: [Client; 3] = [
        ("glibc", vec!["getent", "ahosts"], &[]),
        ("musl", vec![musl], &[]),
        ("Go", vec![go], &[("GODEBUG", "netdns=go")]),
    ];
    for (client, program, env) in &clients {
        for (name, address) in [
            ("api.example.com", "192.0.2.10"),
            ("intranet", "192.0.2.30"),
            ("db.team-b", "10.96.0.21"),
        ] {
            let before = requests();
            let mut args = program.clone();
            args.push(name);
            let out = lab
                .pod
                .run(&args, env)
                .unwrap_or_else(|e| panic!("{client} {name}: {e}"));
            assert!(out.contains(address), "{client} {name}: {out}");
            let asked = requests() - before;
            eprintln!("{client} {name}: {asked} queries");
            assert_eq!(
                asked, 2.0,
                "{client} {name}: A and AAAA of the first expansion only"
            );
        }
    }

    // nodens doctor, from the pod: the first expansion answered by
    // autopath is seen as such (not as an expansion that exists), and the
    // search-list tax is only a note, paid by the server.
    let nodens = nodens_bin();
    let out = lab
        .pod
        .run(
            &[
                nodens.to_str().unwrap(),
                "doctor",
                "--no-node",
                "--no-workloads",
                "--json",
                "--name",
                "api.example.com",
                "--tcp-max",
                "5",
            ],
            &[],
        )
        .unwrap_or_else(|e| panic!("doctor from the pod: {e}"));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let findings = report["findings"].as_array().unwrap();
    assert!(
        findings.iter().all(|f| f["severity"] != "critical"),
        "{report:#}"
    );
    let tax = findings
        .iter()
        .find(|f| f["id"] == "search-list-tax")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(tax["severity"], "info", "{tax}");
    let probes = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["title"] == "Probes")
        .unwrap()["lines"]
        .to_string();
    assert!(
        probes.contains(
            "api.example.com.team-a.svc.cluster.local answered by autopath (CNAME api.example.com.)"
        ),
        "{probes}"
    );
}
