//! A differential of the Kubernetes DNS specification: a real
//! kube-apiserver holding every kind of object the specification names
//! (`cluster_spec/cases.rs`), CoreDNS's `kubernetes` plugin serving them
//! (the plugin's default TTL, 5 s), and two nodens in front of it: the
//! chart's defaults, and every cluster feature on (autopath, `follow_api`
//! with `hold_past_ttl`, `no_aaaa_for_ipv4_pods`, speculation, local
//! NXDOMAIN, the namespace watch's denials, budgets, the workload
//! counters). Every question the specification answers about the objects
//! is asked of CoreDNS directly and of each nodens, then again from their
//! caches, and again after each change of the API (a Service created and
//! a headless Service scaled up; endpoints replaced and a hostname gone; a
//! Service deleted): nodens with every feature as soon as `follow_api`
//! promises (a second after CoreDNS shows the change), and both once the
//! answers cached before the change have expired. Any difference fails
//! the test unless [`cases::KNOWN`] lists it with its reason.
//!
//! The questions come from an address that is no pod, and, for the
//! search-list walks of short names, from a pod of `spec-a` on the node
//! (IPv4 only), whose queries autopath and `no_aaaa_for_ipv4_pods` answer:
//! there the addresses the walk ends with are compared, as a resolver
//! sees them. The test API server has an IPv4 and an IPv6 service range,
//! so a dual-stack Service is among the objects.

#[path = "cluster_spec/cases.rs"]
mod cases;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::rr::{RData, RecordType as Rt};
use support::*;

use cases::{KNOWN, LATE, NS};

const NODE: &str = "node-1";
/// The client pod of `spec-a` on the node (an address on the namespace's
/// loopback, as the pod watch maps it).
const POD: &str = "127.0.0.61";
/// Its search list (ndots:5).
const SEARCH: [&str; 3] = [
    "spec-a.svc.cluster.local.",
    "svc.cluster.local.",
    "cluster.local.",
];
/// Short names a pod of `spec-a` looks up, each ending in the cluster.
const SHORT: [&str; 6] = [
    "web",
    "web.spec-a",
    "db-0.db",
    "pnr-0.pnr",
    "kubernetes.default",
    "late",
];
/// The plugin's TTL for every answer and denial: what a cache may serve
/// after a change.
const TTL: Duration = Duration::from_secs(5);

struct Lab {
    ns: Netns,
    kube: Kube,
    core: KubeDns,
    /// The chart's defaults.
    defaults: Nodens,
    /// Every cluster feature on.
    features: Nodens,
}

fn zones(cfg: Cfg, core: SocketAddr, no_aaaa: bool) -> Cfg {
    cfg.zone(Zone::new("cluster.local.", &[core]).no_aaaa_for_ipv4_pods(no_aaaa))
        .zone(Zone::new("in-addr.arpa.", &[core]))
        .zone(Zone::new("ip6.arpa.", &[core]))
}

impl Lab {
    fn start() -> Lab {
        let ns = Netns::create("spec");
        let kube = Kube::start(&ns);
        kube.create(&cases::objects());
        ns.add_to_lo(&[POD]);
        kube.create_pod(NS, "client", &[POD], NODE, "");
        let core = KubeDns::start_bound_ttl(&ns, &kube, TTL.as_secs() as u32);
        let probe = Q::new("db-0.db.spec-a.svc.cluster.local.", Rt::A);
        wait_until(secs(30), "CoreDNS to serve the objects", || {
            in_netns(&ns.name, || udp_query_timeout(core.addr, &probe, ms(500)))
                .filter(|r| r.a() == [ipv4("10.244.2.20")])
        });
        let defaults = zones(Cfg::new(&Net::fixed(30)), core.addr, false).to_toml();
        let features = zones(Cfg::new(&Net::fixed(31)), core.addr, true)
            .server_option("workload_counters", "true")
            .raw(&format!(
                "[cluster]\nautopath = true\nfollow_api = true\nhold_past_ttl = \"5m\"\n\
                 namespaces_from_api = true\n\n[budget]\nqueries_per_second = 100000\n\
                 misses_in_flight = 1000\n\n{}",
                kube.pod_watch(NODE)
            ))
            .to_toml();
        let launch = |toml: &str| {
            let mut nodens = Nodens::launch(toml, &ns.exec());
            in_netns(&ns.name, || nodens.wait_ready());
            nodens
        };
        let defaults = launch(&defaults);
        let features = launch(&features);
        let lab = Lab {
            ns,
            kube,
            core,
            defaults,
            features,
        };
        wait_until(secs(30), "the feature nodens's watches", || {
            lab.synced().then_some(())
        });
        lab
    }

    fn synced(&self) -> bool {
        [
            ("services", "follow_api"),
            ("endpointslices", "follow_api"),
            ("namespaces", "all"),
            ("pods", NODE),
        ]
        .iter()
        .all(|(resource, watch)| {
            in_netns(&self.ns.name, || {
                self.features.metric(
                    "nodens_kubernetes_watch_synced",
                    &[("resource", resource), ("watch", watch)],
                )
            }) == 1.0
        })
    }

    fn ask(&self, to: SocketAddr, name: &str, t: Rt) -> Compared {
        let q = Q::new(name, t);
        Compared::of_option(in_netns(&self.ns.name, || udp_query_timeout(to, &q, secs(3))).as_ref())
    }

    /// Waits until CoreDNS answers `name` with the addresses `a` (none:
    /// NXDOMAIN, or NODATA where the name has other records).
    fn core_shows(&self, name: &str, a: &[&str]) {
        let q = Q::new(name, Rt::A);
        let want: Vec<_> = a.iter().map(|a| ipv4(a)).collect();
        wait_until(secs(30), &format!("CoreDNS to show {name} {a:?}"), || {
            let r = in_netns(&self.ns.name, || {
                udp_query_timeout(self.core.addr, &q, ms(500))
            })?;
            let mut got = r.a();
            got.sort();
            let answered = matches!(r.rcode(), rcode::NXDOMAIN | rcode::NOERROR);
            (answered && got == want).then_some(())
        });
    }

    /// Asks every question of CoreDNS and of `which` nodens; the
    /// differences not known, each as a line.
    fn differences(&self, phase: &str, which: &[(&'static str, &Nodens)]) -> Vec<String> {
        let mut out = Vec::new();
        for (name, t) in cases::questions() {
            let direct = self.ask(self.core.addr, &name, t);
            for (config, nodens) in which {
                let got = self.ask(nodens.dns, &name, t);
                out.extend(judge(phase, config, &name, t, got == direct, || {
                    format!("CoreDNS {direct}, nodens {got}")
                }));
            }
        }
        out
    }

    /// `name` asked from the client pod; None without an answer.
    fn ask_from_pod(&self, to: SocketAddr, name: &str, t: Rt) -> Option<Reply> {
        let source: IpAddr = POD.parse().unwrap();
        let packet = Q::new(name, t).to_bytes();
        let raw = in_netns(&self.ns.name, || {
            udp_exchange_from(source, to, &packet, secs(3))
        })?;
        Some(Reply::parse(raw, Duration::ZERO))
    }

    /// What a resolver of the client pod ends a walk of `short` with:
    /// the first candidate of its search list that has records, as its
    /// rcode and the addresses (whatever CNAME led there), or the last
    /// failure.
    fn walk(&self, to: SocketAddr, short: &str, t: Rt) -> (u16, BTreeSet<IpAddr>) {
        let mut last = (rcode::SERVFAIL, BTreeSet::new());
        for search in SEARCH {
            let Some(reply) = self.ask_from_pod(to, &format!("{short}.{search}"), t) else {
                return (u16::MAX, BTreeSet::new());
            };
            let addresses: BTreeSet<IpAddr> = reply
                .msg
                .answers()
                .iter()
                .filter_map(|r| match r.data() {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                    _ => None,
                })
                .collect();
            last = (reply.rcode(), addresses);
            if !last.1.is_empty() || !matches!(last.0, rcode::NXDOMAIN | rcode::NOERROR) {
                return last;
            }
        }
        last
    }

    /// The walks of [`SHORT`] through CoreDNS and through `which`: the
    /// differences not known, each as a line.
    fn walk_differences(&self, phase: &str, which: &[(&'static str, &Nodens)]) -> Vec<String> {
        let mut out = Vec::new();
        for short in SHORT {
            for t in [Rt::A, Rt::AAAA] {
                let direct = self.walk(self.core.addr, short, t);
                for (config, nodens) in which {
                    let got = self.walk(nodens.dns, short, t);
                    let name = format!("walk {short}");
                    out.extend(judge(phase, config, &name, t, got == direct, || {
                        format!("from the pod: CoreDNS {direct:?}, nodens {got:?}")
                    }));
                }
            }
        }
        out
    }

    /// The features' nodens at follow_api's promise, then both once the
    /// answers cached before the change have expired.
    fn after_change(&self, phase: &'static str, found: &mut Vec<String>) {
        std::thread::sleep(Duration::from_secs(1));
        let at_once = [("features, at once", &self.features)];
        found.extend(self.differences(phase, &at_once));
        found.extend(self.walk_differences(phase, &at_once));
        std::thread::sleep(TTL + Duration::from_secs(1));
        let both = [("defaults", &self.defaults), ("features", &self.features)];
        found.extend(self.differences(phase, &both));
        found.extend(self.walk_differences(phase, &both));
    }
}

/// One comparison of `config`'s answer to `name` `t` with CoreDNS's: a
/// difference [`KNOWN`] lists is printed (those listed depend on timing,
/// so one not seen is no failure), one it does not list is returned as a
/// line.
fn judge(
    phase: &str,
    config: &str,
    name: &str,
    t: Rt,
    same: bool,
    show: impl FnOnce() -> String,
) -> Option<String> {
    if same {
        return None;
    }
    let known = KNOWN.iter().find(|k| {
        k.config == config && k.phases.contains(&phase) && k.name == name && k.qtype == t
    });
    match known {
        Some(k) => {
            eprintln!("known: [{phase}] {config}: {name} {t}: {}", k.why);
            None
        }
        None => Some(format!("[{phase}] {config}: {name} {t}: {}", show())),
    }
}

#[test]
fn nodens_answers_the_specification_as_coredns_while_the_api_changes() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let mut lab = Lab::start();
    let both: [(&str, &Nodens); 2] = [("defaults", &lab.defaults), ("features", &lab.features)];
    // The pod's first AAAA of a name autopath walks (nothing cached yet)
    // gets the filter's NODATA, as every later one: it has no IPv6.
    let first = lab.ask_from_pod(
        lab.features.dns,
        "db-0.db.spec-a.svc.cluster.local.",
        Rt::AAAA,
    );
    let first = first.map(|r| (r.rcode(), r.msg.answers().len()));
    assert_eq!(
        first,
        Some((rcode::NOERROR, 0)),
        "db-0.db AAAA from the pod"
    );
    let mut found = lab.differences("start", &both);
    found.extend(lab.walk_differences("start", &both));
    found.extend(lab.differences("start, cached", &both));
    found.extend(lab.walk_differences("start, cached", &both));

    // A Service created, a headless Service scaled up.
    lab.kube.create(LATE);
    lab.kube.apply(&cases::db_slice(&[
        ("db-0", "10.244.2.20", true),
        ("db-1", "10.244.2.21", false),
        ("db-2", "10.244.2.22", true),
    ]));
    lab.core_shows("db-2.db.spec-a.svc.cluster.local.", &["10.244.2.22"]);
    lab.core_shows("late.spec-a.svc.cluster.local.", &["10.96.2.50"]);
    lab.after_change("created", &mut found);

    // Endpoints replaced, a hostname gone.
    lab.kube.apply(&cases::web_slice(&["10.244.2.12"]));
    lab.kube.apply(&cases::db_slice(&[
        ("db-1", "10.244.2.21", true),
        ("db-2", "10.244.2.22", true),
    ]));
    lab.core_shows("db-0.db.spec-a.svc.cluster.local.", &[]);
    lab.core_shows(
        "10-244-2-12.web.spec-a.svc.cluster.local.",
        &["10.244.2.12"],
    );
    lab.after_change("replaced", &mut found);

    // A Service deleted.
    lab.kube
        .try_kubectl(&["-n", NS, "delete", "service", "late"], None)
        .unwrap();
    lab.kube
        .try_kubectl(&["-n", NS, "delete", "endpointslice", "late-1"], None)
        .unwrap();
    lab.core_shows("late.spec-a.svc.cluster.local.", &[]);
    lab.after_change("deleted", &mut found);

    let ns = lab.ns.name.clone();
    in_netns(&ns, || {
        lab.defaults.assert_alive();
        lab.features.assert_alive();
    });
    assert!(
        found.is_empty(),
        "{} differences from CoreDNS:\n{}",
        found.len(),
        found.join("\n")
    );
}
