//! Cached cluster answers that follow the API (`[cluster] follow_api`),
//! against a real kube-apiserver and CoreDNS's `kubernetes` plugin with
//! kubeadm's `ttl 30` (tests/support/src/kube.rs) in a network namespace.
//! There is no controller-manager: the test writes the EndpointSlices.
//!
//! Under a lookup every 50 ms, three changes of the API: a Service
//! recreated with a new ClusterIP and port (A, SRV, PTR of the old and new
//! address), a headless Service's pod replaced (its hostname's A and the
//! new address's PTR), an EndpointSlice scaled (the Service's A set and
//! SRV). Through nodens with the feature, the new answer comes within 1 s
//! of the change and no wrong answer after it; through nodens without it,
//! the old answer is still served (the cache holds it for 30 s), so the
//! test would see a nodens that did not follow.
//!
//! Held answers: with `hold_past_ttl` and the zone's TTLs clamped to 1 s,
//! lookups over several TTLs reach CoreDNS once while the watch is
//! current, a change still shows within 1 s, and once the API server is
//! gone the answers expire at their TTL again (queries reach CoreDNS).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType as Rt;
use support::*;

const NS: &str = "team-a";
const ZONE: &str = "svc.cluster.local.";

fn name(n: &str) -> String {
    format!("{n}.{NS}.{ZONE}")
}

fn service(name: &str, cluster_ip: &str, port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         spec: {{clusterIP: {cluster_ip}, ports: [{{name: http, port: {port}, protocol: TCP}}]}}\n"
    )
}

/// A headless Service's EndpointSlice: `(address, hostname)` each, ready,
/// labelled as the EndpointSlice controller labels a headless Service's.
fn slice(service: &str, endpoints: &[(&str, &str)]) -> String {
    slice_labelled(service, endpoints, ", service.kubernetes.io/headless: \"\"")
}

/// A Service's EndpointSlice with `labels` added to its Service's name.
fn slice_labelled(service: &str, endpoints: &[(&str, &str)], labels: &str) -> String {
    let mut list = String::new();
    for (ip, host) in endpoints {
        list.push_str(&format!(
            "  - {{addresses: [\"{ip}\"], hostname: {host}, conditions: {{ready: true}}}}\n"
        ));
    }
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  \
         name: {service}-1\n  namespace: {NS}\n  labels: {{kubernetes.io/service-name: {service}{labels}}}\n\
         addressType: IPv4\nports: [{{name: http, port: 5432, protocol: TCP}}]\nendpoints:\n{list}"
    )
}

struct Lab {
    kube: Kube,
    core: KubeDns,
    /// With `follow_api`.
    follow: Nodens,
    /// Without it.
    plain: Nodens,
    /// node-local-dns's Corefile (its `cluster.local` and `in-addr.arpa`
    /// blocks), run by CoreDNS 1.13: the cache nodens replaces.
    _node_local: CorefileServer,
    ns: Netns,
}

/// Where node-local-dns's CoreDNS answers.
const NODE_LOCAL: &str = "127.0.23.1:53";

/// node-local-dns's Corefile for the cluster domain and the IPv4 reverse
/// zone (lab/kube/node-local-dns.yaml), forwarding to `core`.
fn node_local_corefile(core: SocketAddr) -> String {
    let ip = NODE_LOCAL.split(':').next().unwrap();
    let core = core.ip();
    format!(
        "cluster.local:53 {{\n    errors\n    cache {{\n        success 9984 30\n        \
         denial 9984 5\n    }}\n    bind {ip}\n    forward . {core} {{\n        force_tcp\n    \
         }}\n}}\nin-addr.arpa:53 {{\n    errors\n    cache 30\n    bind {ip}\n    \
         forward . {core} {{\n        force_tcp\n    }}\n}}\n"
    )
}

fn config(
    net: &Net,
    kube: &Kube,
    cluster: &str,
    zone: Zone,
    core: SocketAddr,
    prefetch_min_hits: u32,
) -> String {
    Cfg::new(net)
        .prefetch_min_hits(prefetch_min_hits)
        .zone(zone)
        .zone(reverse_zone(core))
        .raw(&format!(
            "[cluster]\n{cluster}\n[kubernetes]\nkubeconfig = \"{}\"\n",
            kube.kubeconfig.display()
        ))
        .to_toml()
}

impl Lab {
    fn start(name: &str, follow_cluster: &str, zone: impl Fn(SocketAddr) -> Zone) -> Lab {
        Lab::start_with(name, follow_cluster, zone, 0, |ns, kube| {
            KubeDns::start_bound_ttl(ns, kube, 30)
        })
    }

    fn start_with(
        name: &str,
        follow_cluster: &str,
        zone: impl Fn(SocketAddr) -> Zone,
        prefetch_min_hits: u32,
        cluster_dns: impl FnOnce(&Netns, &Kube) -> KubeDns,
    ) -> Lab {
        let ns = Netns::create(name);
        let kube = Kube::start(&ns);
        kube.create(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"
        ));
        let core = cluster_dns(&ns, &kube);
        let launch = |n: u8, cluster: &str| {
            let toml = config(
                &Net::fixed(n),
                &kube,
                cluster,
                zone(core.addr),
                core.addr,
                prefetch_min_hits,
            );
            let mut nodens = Nodens::launch(&toml, &ns.exec());
            in_netns(&ns.name, || nodens.wait_ready());
            nodens
        };
        let follow = launch(21, follow_cluster);
        let plain = launch(22, "");
        let node_local = CorefileServer::launch(
            "node-local-dns",
            &ns.exec(),
            &node_local_corefile(core.addr),
            &[],
        );
        let lab = Lab {
            kube,
            core,
            follow,
            plain,
            _node_local: node_local,
            ns,
        };
        let probe = "kubernetes.default.svc.cluster.local.";
        wait_until(Duration::from_secs(30), "node-local-dns's CoreDNS", || {
            lab.ask(NODE_LOCAL.parse().unwrap(), probe, Rt::A)
        });
        lab.wait_synced();
        lab
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        in_netns(&self.ns.name, || self.follow.metric(name, labels))
    }

    fn synced(&self) -> bool {
        ["services", "endpointslices"].iter().all(|r| {
            self.metric(
                "nodens_kubernetes_watch_synced",
                &[("resource", r), ("watch", "follow_api")],
            ) == 1.0
        })
    }

    fn wait_synced(&self) {
        wait_until(Duration::from_secs(30), "the follow_api watches", || {
            self.synced().then_some(())
        });
    }

    /// The answer of `server` as comparable text (TTLs left out), with the
    /// rcode; None when it did not answer.
    fn ask(&self, server: SocketAddr, name: &str, t: Rt) -> Option<String> {
        let q = Q::new(name, t);
        let reply = in_netns(&self.ns.name, || {
            udp_query_timeout(server, &q, Duration::from_millis(500))
        })?;
        Some(format!("{} {:?}", reply.rcode(), reply.answer_set()))
    }

    /// Waits until CoreDNS answers `name` as `want` says.
    fn wait_core(&self, name: &str, t: Rt, want: impl Fn(&str) -> bool) -> String {
        wait_until(
            Duration::from_secs(30),
            &format!("CoreDNS: {name} {t}"),
            || self.ask(self.core.addr, name, t).filter(|a| want(a)),
        )
    }
}

/// What a lookup loop saw after an API change.
#[derive(Debug)]
struct Followed {
    /// How long the change took (kubectl, from its start until it
    /// returned): the change happened within that time.
    change_took: Duration,
    /// From the change to nodens's first correct answer.
    nodens: Duration,
    /// From the change to CoreDNS's first correct answer.
    core: Duration,
    /// Wrong answers nodens gave after its first correct one.
    wrong_after: usize,
    /// What nodens without the feature answered at the end.
    plain_last: String,
    /// What node-local-dns's configuration answered at the end, and how
    /// many of its answers after nodens's first correct one were wrong.
    node_local_last: String,
    node_local_wrong: usize,
}

/// Changes the API with `change`, then asks `name` every 50 ms for 2 s
/// past the first correct answer (at most 10 s) through the nodens with
/// the feature, CoreDNS and the nodens without.
fn follow_change(
    lab: &Lab,
    name: &str,
    t: Rt,
    change: impl FnOnce(),
    correct: impl Fn(&str) -> bool,
) -> Followed {
    let requested = Instant::now();
    change();
    let changed = Instant::now();
    let change_took = changed - requested;
    let (mut nodens, mut core) = (None, None);
    let mut wrong_after = 0;
    let mut plain_last = String::new();
    let (mut node_local_last, mut node_local_wrong) = (String::new(), 0);
    while changed.elapsed() < Duration::from_secs(10) {
        let ours = lab.ask(lab.follow.dns, name, t).unwrap_or_default();
        let at = changed.elapsed();
        if correct(&ours) {
            nodens.get_or_insert(at);
        } else if nodens.is_some() {
            eprintln!("wrong answer after the first correct one: {ours}");
            wrong_after += 1;
        }
        if core.is_none() && lab.ask(lab.core.addr, name, t).is_some_and(|a| correct(&a)) {
            core = Some(at);
        }
        plain_last = lab.ask(lab.plain.dns, name, t).unwrap_or_default();
        node_local_last = lab
            .ask(NODE_LOCAL.parse().unwrap(), name, t)
            .unwrap_or_default();
        if nodens.is_some() && !correct(&node_local_last) {
            node_local_wrong += 1;
        }
        if nodens.is_some_and(|n| at > n + Duration::from_secs(2)) && core.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let followed = Followed {
        change_took,
        nodens: nodens.unwrap_or_else(|| panic!("nodens never answered {name} {t} right")),
        core: core.unwrap_or_else(|| panic!("CoreDNS never answered {name} {t} right")),
        wrong_after,
        plain_last,
        node_local_last,
        node_local_wrong,
    };
    eprintln!("{name} {t}: {followed:?}");
    followed
}

/// The target: nodens answers right within 1 s of the change (or, on a
/// machine so loaded that CoreDNS's own watch took longer, no later than
/// 0.5 s after CoreDNS did), and never wrong after.
fn assert_followed(f: &Followed) {
    eprintln!(
        "first correct answer {:?} after kubectl returned, {:?} after it started",
        f.nodens,
        f.nodens + f.change_took
    );
    let bound = Duration::from_secs(1).max(f.core + Duration::from_millis(500));
    assert!(f.nodens <= bound, "{f:?}");
    assert_eq!(f.wrong_after, 0, "{f:?}");
}

/// The headless Service `db`'s pod `db-0` replaced by one at a new address
/// (10.244.1.5 to 10.244.1.6), followed through `db0`'s A answers.
fn replace_db0(lab: &Lab, db0: &str) -> Followed {
    follow_change(
        lab,
        db0,
        Rt::A,
        || lab.kube.apply(&slice("db", &[("10.244.1.6", "db-0")])),
        |a| a.contains("10.244.1.6") && !a.contains("10.244.1.5"),
    )
}

/// The cluster domain and the reverse zones, to the cluster DNS.
fn cluster_zone(core: SocketAddr) -> Zone {
    Zone::new("cluster.local.", &[core])
}

fn reverse_zone(core: SocketAddr) -> Zone {
    Zone::new("in-addr.arpa.", &[core])
}

#[test]
fn changes_of_the_api_reach_the_cache_within_a_second() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let mut lab = Lab::start("follow", "follow_api = true\n", cluster_zone);
    let plain = lab.plain.dns;
    let follow = lab.follow.dns;

    // A Service recreated with a new ClusterIP and port.
    lab.kube.create(&service("web", "10.96.0.20", 80));
    let web = name("web");
    let srv = format!("_http._tcp.{web}");
    lab.wait_core(&web, Rt::A, |a| a.contains("10.96.0.20"));
    let node_local: SocketAddr = NODE_LOCAL.parse().unwrap();
    for server in [follow, plain, node_local] {
        assert!(lab.ask(server, &web, Rt::A).unwrap().contains("10.96.0.20"));
        assert!(lab.ask(server, &srv, Rt::SRV).unwrap().contains(" 80 "));
        let ptr = lab
            .ask(server, "20.0.96.10.in-addr.arpa.", Rt::PTR)
            .unwrap();
        assert!(ptr.contains(&web), "{ptr}");
        assert!(
            lab.ask(server, "30.0.96.10.in-addr.arpa.", Rt::PTR)
                .unwrap()
                .starts_with("3 ")
        );
    }
    let recreated = follow_change(
        &lab,
        &web,
        Rt::A,
        || {
            lab.kube
                .try_kubectl(&["delete", "service", "-n", NS, "web"], None)
                .unwrap();
            lab.kube.create(&service("web", "10.96.0.30", 8080));
        },
        |a| a.contains("10.96.0.30") && !a.contains("10.96.0.20"),
    );
    assert_followed(&recreated);
    assert!(
        recreated.plain_last.contains("10.96.0.20"),
        "without the feature the cached old address is still served: {recreated:?}"
    );
    assert!(
        recreated.node_local_last.contains("10.96.0.20") && recreated.node_local_wrong > 0,
        "node-local-dns too: {recreated:?}"
    );
    // The SRV, the new address's PTR and the old one's, all at once.
    assert!(lab.ask(follow, &srv, Rt::SRV).unwrap().contains(" 8080 "));
    assert!(lab.ask(plain, &srv, Rt::SRV).unwrap().contains(" 80 "));
    let ptr = lab
        .ask(follow, "30.0.96.10.in-addr.arpa.", Rt::PTR)
        .unwrap();
    assert!(ptr.contains(&web), "{ptr}");
    assert!(
        lab.ask(plain, "30.0.96.10.in-addr.arpa.", Rt::PTR)
            .unwrap()
            .starts_with("3 ")
    );
    let old_ptr = lab
        .ask(follow, "20.0.96.10.in-addr.arpa.", Rt::PTR)
        .unwrap();
    assert!(old_ptr.starts_with("3 "), "{old_ptr}");

    // A headless Service's pod deleted and replaced by one at a new address.
    lab.kube.create(&format!(
        "{}---\n{}",
        service("db", "None", 5432),
        slice("db", &[("10.244.1.5", "db-0")])
    ));
    let db0 = format!("db-0.{}", name("db"));
    lab.wait_core(&db0, Rt::A, |a| a.contains("10.244.1.5"));
    for server in [follow, plain, node_local] {
        assert!(lab.ask(server, &db0, Rt::A).unwrap().contains("10.244.1.5"));
    }
    let replaced = replace_db0(&lab, &db0);
    assert_followed(&replaced);
    assert!(replaced.plain_last.contains("10.244.1.5"), "{replaced:?}");
    assert!(
        replaced.node_local_last.contains("10.244.1.5"),
        "{replaced:?}"
    );
    let ptr = lab
        .ask(follow, "6.1.244.10.in-addr.arpa.", Rt::PTR)
        .unwrap();
    assert!(ptr.contains(&db0), "{ptr}");

    // The slice scaled from one endpoint to two: the Service's addresses
    // and its SRV records.
    let db = name("db");
    let db_srv = format!("_http._tcp.{db}");
    for server in [follow, plain, node_local] {
        let srv = lab.ask(server, &db_srv, Rt::SRV).unwrap();
        assert!(srv.contains("db-0") && !srv.contains("db-1"), "{srv}");
        assert!(!lab.ask(server, &db, Rt::A).unwrap().contains("10.244.1.7"));
    }
    let scaled = follow_change(
        &lab,
        &db,
        Rt::A,
        || {
            lab.kube.apply(&slice(
                "db",
                &[("10.244.1.6", "db-0"), ("10.244.1.7", "db-1")],
            ))
        },
        |a| a.contains("10.244.1.6") && a.contains("10.244.1.7"),
    );
    assert_followed(&scaled);
    assert!(!scaled.plain_last.contains("10.244.1.7"), "{scaled:?}");
    assert!(!scaled.node_local_last.contains("10.244.1.7"), "{scaled:?}");
    let srv = lab.ask(follow, &db_srv, Rt::SRV).unwrap();
    assert!(srv.contains("db-0") && srv.contains("db-1"), "{srv}");

    assert!(lab.metric("nodens_cluster_purged_entries_total", &[]) > 0.0);

    // A reload turns the watch on in the one and off in the other.
    let reload = |nodens: &Nodens, n: u8, cluster: &str| {
        let core = lab.core.addr;
        nodens.reload(&config(
            &Net::fixed(n),
            &lab.kube,
            cluster,
            cluster_zone(core),
            core,
            0,
        ));
    };
    reload(&lab.plain, 22, "follow_api = true\n");
    reload(&lab.follow, 21, "follow_api = false\n");
    let synced = |nodens: &Nodens| {
        ["services", "endpointslices"].iter().all(|r| {
            in_netns(&lab.ns.name, || {
                nodens.metric(
                    "nodens_kubernetes_watch_synced",
                    &[("resource", r), ("watch", "follow_api")],
                )
            }) == 1.0
        })
    };
    wait_until(Duration::from_secs(30), "the reloads", || {
        (synced(&lab.plain) && !synced(&lab.follow)).then_some(())
    });
    for server in [follow, plain] {
        assert!(!lab.ask(server, &db, Rt::A).unwrap().contains("10.244.1.8"));
    }
    lab.kube.apply(&slice(
        "db",
        &[
            ("10.244.1.6", "db-0"),
            ("10.244.1.7", "db-1"),
            ("10.244.1.8", "db-2"),
        ],
    ));
    lab.wait_core(&db, Rt::A, |a| a.contains("10.244.1.8"));
    wait_until(
        Duration::from_secs(1),
        "the reloaded nodens to follow",
        || {
            lab.ask(plain, &db, Rt::A)
                .filter(|a| a.contains("10.244.1.8"))
        },
    );
    let stopped = lab.ask(follow, &db, Rt::A).unwrap();
    assert!(
        !stopped.contains("10.244.1.8"),
        "a stopped watch drops nothing: {stopped}"
    );
    in_netns(&lab.ns.name, || lab.follow.assert_alive());
}

/// By default (`follow_api_endpoints = "headless"`) only the headless
/// Services' EndpointSlices are read (the ones kube-proxy leaves out), and
/// their changes are followed as with every slice; with `"all"`, every
/// slice.
#[test]
fn only_headless_services_slices_are_watched_unless_all_are_asked() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let mut lab = Lab::start("fheadless", "follow_api = true\n", cluster_zone);
    // A ClusterIP Service's slice (no headless label) and a headless one.
    lab.kube.create(&format!(
        "{}---\n{}---\n{}---\n{}",
        service("web", "10.96.0.20", 80),
        slice_labelled("web", &[("10.244.2.5", "web-0")], ""),
        service("db", "None", 5432),
        slice("db", &[("10.244.1.5", "db-0")])
    ));
    let db0 = format!("db-0.{}", name("db"));
    lab.wait_core(&db0, Rt::A, |a| a.contains("10.244.1.5"));
    assert!(
        lab.ask(lab.follow.dns, &db0, Rt::A)
            .unwrap()
            .contains("10.244.1.5")
    );
    let replaced = replace_db0(&lab, &db0);
    assert_followed(&replaced);
    // Of the two slices, the watch holds the headless Service's.
    let objects = lab.metric(
        "nodens_kubernetes_watch_objects",
        &[("resource", "endpointslices"), ("watch", "follow_api")],
    );
    assert_eq!(objects, 1.0, "only the headless Service's slice");
    in_netns(&lab.ns.name, || lab.follow.assert_alive());
    // With "all", both.
    let core = lab.core.addr;
    lab.follow.reload(&config(
        &Net::fixed(21),
        &lab.kube,
        "follow_api = true\nfollow_api_endpoints = \"all\"\n",
        cluster_zone(core),
        core,
        0,
    ));
    let slices = || {
        lab.metric(
            "nodens_kubernetes_watch_objects",
            &[("resource", "endpointslices"), ("watch", "follow_api")],
        )
    };
    wait_until(Duration::from_secs(30), "every slice with \"all\"", || {
        (slices() == 2.0).then_some(())
    });
}

#[test]
fn answers_are_held_past_their_ttl_only_while_the_watch_is_current() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    // Answers live 1 s in the cache: holding is what keeps them.
    let zone = |core| {
        cluster_zone(core)
            .max_ttl(Duration::from_secs(1))
            .query_log("{}")
    };
    // Prefetch on, as nodens's default and the chart's: a held answer is
    // not refreshed either.
    let hold = "follow_api = true\nhold_past_ttl = \"5m\"\n";
    let mut lab = Lab::start_with("hold", hold, zone, 3, |ns, kube| {
        KubeDns::start_bound_ttl(ns, kube, 30)
    });
    let follow = lab.follow.dns;
    lab.kube.create(&service("held", "10.96.0.40", 80));
    let held = name("held");
    lab.wait_core(&held, Rt::A, |a| a.contains("10.96.0.40"));
    let asked = |lab: &Lab| lab.core.count_queries(&held, "A");

    // For a second after the change that created it, the name's answers
    // are not stored (the cluster DNS may not have seen it yet); then one
    // is, and a lookup is a cache hit.
    wait_until(
        Duration::from_secs(10),
        "nodens to cache the answer",
        || {
            let hits = lab.metric("coredns_cache_hits_total", &[]);
            lab.ask(follow, &held, Rt::A)?;
            (lab.metric("coredns_cache_hits_total", &[]) > hits).then_some(())
        },
    );
    // Over 4 s (four TTLs), every 100 ms: no query reaches CoreDNS (at
    // most the warm-up's last one, which its log may show late). Without
    // holding, four would.
    let before = asked(&lab);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        let a = lab.ask(follow, &held, Rt::A).unwrap();
        assert!(a.contains("10.96.0.40"), "{a}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let reached = asked(&lab) - before;
    assert!(
        reached <= 1,
        "held answers stay off the cluster DNS: {reached}"
    );
    assert!(lab.metric("nodens_cache_held_answers_total", &[]) >= 20.0);

    // A change still shows at once.
    let recreated = follow_change(
        &lab,
        &held,
        Rt::A,
        || {
            lab.kube
                .try_kubectl(&["delete", "service", "-n", NS, "held"], None)
                .unwrap();
            lab.kube.create(&service("held", "10.96.0.41", 80));
        },
        |a| a.contains("10.96.0.41") && !a.contains("10.96.0.40"),
    );
    assert_followed(&recreated);

    // Without the API, the watch is not current: answers expire at their
    // TTL again and the cluster DNS (which keeps what it listed) is asked.
    lab.kube.stop_apiserver();
    wait_until(Duration::from_secs(15), "the watch to lose the API", || {
        (!lab.synced()).then_some(())
    });
    let before = asked(&lab);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        let a = lab.ask(follow, &held, Rt::A).unwrap();
        assert!(a.contains("10.96.0.41"), "{a}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let refreshed = asked(&lab) - before;
    eprintln!("CoreDNS queries for 40 lookups over 4 TTLs: {reached} held, {refreshed} not held");
    assert!(
        refreshed >= 2,
        "at its TTL again: {refreshed} queries in 4 s"
    );
    in_netns(&lab.ns.name, || lab.follow.assert_alive());
}

/// The chart's `cache.prefetchMinHits`: the lab below runs with prefetch on,
/// as the chart does, so a prefetch cannot hold an old answer either.
const CHART_PREFETCH_MIN_HITS: u32 = 3;

/// kubeadm's Corefile caches the `kubernetes` plugin's answers (`cache
/// 30`): after a change the cluster DNS itself gives the old answer until
/// its cached copy expires, and no node cache asking it can be fresher.
/// What nodens must not do is hold that old answer past its TTL as if the
/// watch vouched for it: nothing would ever drop it.
#[test]
fn an_old_answer_from_the_cluster_dns_cache_is_never_held() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    const TTL: u64 = 5;
    let hold = "follow_api = true\nhold_past_ttl = \"5m\"\n";
    let mut lab = Lab::start_with(
        "cached",
        hold,
        cluster_zone,
        CHART_PREFETCH_MIN_HITS,
        |ns, kube| KubeDns::start_cached(ns, kube, TTL as u32),
    );
    let follow = lab.follow.dns;
    lab.kube.create(&service("cached", "10.96.0.50", 80));
    let cached = name("cached");
    lab.wait_core(&cached, Rt::A, |a| a.contains("10.96.0.50"));
    assert!(
        lab.ask(follow, &cached, Rt::A)
            .unwrap()
            .contains("10.96.0.50")
    );

    let recreated = follow_change(
        &lab,
        &cached,
        Rt::A,
        || {
            // Another client of the cluster DNS has just asked: its cache
            // holds the old answer for up to TTL seconds after the change.
            lab.ask(lab.core.addr, &cached, Rt::A).unwrap();
            lab.kube
                .try_kubectl(&["delete", "service", "-n", NS, "cached"], None)
                .unwrap();
            lab.kube.create(&service("cached", "10.96.0.51", 80));
        },
        |a| a.contains("10.96.0.51") && !a.contains("10.96.0.50"),
    );
    eprintln!("behind a caching cluster DNS: {recreated:?}");
    assert!(
        recreated.core > Duration::from_secs(1),
        "the cluster DNS gave its cached old answer for a while: {recreated:?}"
    );
    // As fresh as the cluster DNS (its cache and nodens's copy of the
    // same answer expire together, to the second), and never wrong after.
    assert!(
        recreated.nodens <= recreated.core + Duration::from_millis(1500),
        "{recreated:?}"
    );
    assert_eq!(recreated.wrong_after, 0, "{recreated:?}");
    // Right after, every answer is the new one. (Not held yet: an answer
    // aged in the cluster DNS's cache may predate the change for 30 s.)
    let held = lab.metric("nodens_cache_held_answers_total", &[]);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(TTL + 2) {
        let a = lab.ask(follow, &cached, Rt::A).unwrap();
        assert!(a.contains("10.96.0.51") && !a.contains("10.96.0.50"), "{a}");
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "held answers after the change: {}",
        lab.metric("nodens_cache_held_answers_total", &[]) - held
    );
    in_netns(&lab.ns.name, || lab.follow.assert_alive());
}
