//! A zone's upstreams from its Service's EndpointSlices, against a real
//! kube-apiserver (tests/support/src/kube.rs) in a network namespace: the ready
//! endpoints are asked directly and the ClusterIP not at all; a third pod
//! added to the slice gets queries without a restart; with no ready
//! endpoint, and while the API server is down, the ClusterIP answers; an
//! API server restart under load loses no query.
//!
//! Each "pod" and the "ClusterIP" is a CoreDNS on its own address in the
//! namespace, logging what it is asked, so the test sees who was asked.

use std::time::Duration;

use support::*;

const CLUSTER_IP: &str = "10.96.0.10";
const PODS: [&str; 3] = ["10.244.1.11", "10.244.1.12", "10.244.1.13"];

/// The EndpointSlice of `kube-dns` with `ready` endpoints and `unready` ones.
fn slice(ready: &[&str], unready: &[&str]) -> String {
    let mut endpoints = String::new();
    for (ips, is_ready) in [(ready, true), (unready, false)] {
        for ip in ips {
            endpoints.push_str(&format!(
                "  - addresses: [\"{ip}\"]\n    conditions: {{ready: {is_ready}}}\n"
            ));
        }
    }
    if endpoints.is_empty() {
        endpoints = "  []\n".into();
    }
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  \
         name: kube-dns-x1\n  namespace: kube-system\n  labels:\n    \
         kubernetes.io/service-name: kube-dns\naddressType: IPv4\nports:\n  \
         - {{name: dns, port: 53, protocol: UDP}}\n  - {{name: dns-tcp, port: 53, protocol: TCP}}\n\
         endpoints:\n{endpoints}"
    )
}

struct Lab {
    nodens: Nodens,
    pods: Vec<CoreDns>,
    cluster_ip: CoreDns,
    kube: Kube,
    ns: Netns,
    sent: std::sync::atomic::AtomicUsize,
}

impl Lab {
    fn start() -> Lab {
        let ns = Netns::create("eps");
        let kube = Kube::start(&ns);
        kube.create(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: kube-dns, namespace: kube-system}}\n\
             spec:\n  clusterIP: {CLUSTER_IP}\n  ports:\n  - {{name: dns, port: 53, protocol: UDP}}\n  \
             - {{name: dns-tcp, port: 53, protocol: TCP}}\n---\n{}",
            slice(&PODS[..2], &[])
        ));
        let coredns = |ip: &str| {
            ns.add_to_lo(&[ip]);
            let addr = format!("{ip}:53").parse().unwrap();
            CoreDns::launch(&ns.exec(), addr, &[("test.", test_zone(""))])
        };
        let pods: Vec<CoreDns> = PODS.iter().map(|ip| coredns(ip)).collect();
        let cluster_ip = coredns(CLUSTER_IP);
        for c in pods.iter().chain([&cluster_ip]) {
            in_netns(&ns.name, || c.wait_ready());
        }
        let toml = Cfg::new(&Net::fixed(11))
            .raw(&format!(
                "[kubernetes]\nkubeconfig = \"{}\"\n\n[[zone]]\nname = \"test.\"\n\
                 upstreams = [\"{CLUSTER_IP}\"]\n\
                 endpoints = {{ service = \"kube-dns\", namespace = \"kube-system\" }}\n",
                kube.kubeconfig.display()
            ))
            .to_toml();
        let mut nodens = Nodens::launch(&toml, &ns.exec());
        in_netns(&ns.name, || nodens.wait_ready());
        Lab {
            nodens,
            pods,
            cluster_ip,
            kube,
            ns,
            sent: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn discovered(&self) -> f64 {
        in_netns(&self.ns.name, || {
            self.nodens
                .metric("nodens_zone_discovered_upstreams", &[("zone", "test.")])
        })
    }

    fn wait_discovered(&self, n: f64) {
        wait_until(
            Duration::from_secs(30),
            &format!("nodens to ask {n} discovered upstreams"),
            || (self.discovered() == n).then_some(()),
        );
    }

    /// `n` queries for names no cache holds; every one must be answered.
    fn ask(&self, n: usize) {
        let first = self.sent.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        in_netns(&self.ns.name, || {
            for i in first..first + n {
                let reply = udp_query(self.nodens.dns, &Q::new(&format!("q{i}.nope.test."), Rt::A));
                assert_eq!(reply.rcode(), rcode::NXDOMAIN, "q{i}");
            }
        });
    }

    /// Queries each server got (pods, then the ClusterIP) since `counts`.
    fn asked(&self) -> Vec<usize> {
        for c in self.pods.iter().chain([&self.cluster_ip]) {
            c.sync_log_via(|name| {
                in_netns(&self.ns.name, || {
                    let _ =
                        udp_query_timeout(c.addr, &Q::new(name, Rt::TXT), Duration::from_secs(2));
                })
            });
        }
        self.pods
            .iter()
            .chain([&self.cluster_ip])
            .map(|c| {
                c.queries()
                    .iter()
                    .filter(|q| q.name.ends_with("nope.test."))
                    .count()
            })
            .collect()
    }
}

fn delta(after: &[usize], before: &[usize]) -> Vec<usize> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

#[test]
fn upstreams_follow_the_endpointslices() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let mut lab = Lab::start();
    let pid = lab.nodens.proc.id();

    // Two ready pods: both asked, the ClusterIP never.
    lab.wait_discovered(2.0);
    let before = lab.asked();
    lab.ask(40);
    let d = delta(&lab.asked(), &before);
    assert!(d[0] > 0 && d[1] > 0, "both pods asked: {d:?}");
    assert_eq!((d[2], d[3]), (0, 0), "no third pod, no ClusterIP: {d:?}");

    // A third pod: asked too, by the same process.
    lab.kube.apply(&slice(&PODS, &[]));
    lab.wait_discovered(3.0);
    let before = lab.asked();
    lab.ask(60);
    let d = delta(&lab.asked(), &before);
    assert!(d[..3].iter().all(|&n| n > 0), "all three pods asked: {d:?}");
    assert_eq!(d[3], 0, "ClusterIP: {d:?}");
    assert_eq!(lab.nodens.proc.id(), pid, "no restart");

    // No ready endpoint: the ClusterIP.
    lab.kube.apply(&slice(&[], &PODS));
    lab.wait_discovered(0.0);
    let before = lab.asked();
    lab.ask(10);
    assert_eq!(delta(&lab.asked(), &before), [0, 0, 0, 10]);

    // The API server down and back under load: the ClusterIP meanwhile,
    // the pods again after a relist, and no query lost on the way.
    lab.kube.apply(&slice(&PODS[..2], &PODS[2..]));
    lab.wait_discovered(2.0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let lost = std::sync::atomic::AtomicUsize::new(0);
    let answered = std::sync::atomic::AtomicUsize::new(0);
    let (ns_name, dns) = (lab.ns.name.clone(), lab.nodens.dns);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (stop, lost, answered, ns_name) = (&stop, &lost, &answered, &ns_name);
            s.spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(240);
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed)
                    && std::time::Instant::now() < deadline
                {
                    let q = Q::new(&format!("load{t}-{i}.nope.test."), Rt::A);
                    let reply = in_netns(ns_name, || {
                        udp_query_timeout(dns, &q, Duration::from_secs(3))
                    });
                    match reply {
                        Some(r) if r.rcode() == rcode::NXDOMAIN => {
                            answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                        }
                        _ => lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    };
                    i += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
        }
        lab.kube.stop_apiserver();
        lab.wait_discovered(0.0);
        std::thread::sleep(Duration::from_secs(1));
        lab.kube.start_apiserver();
        lab.wait_discovered(2.0);
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    eprintln!(
        "API server restart under load: {} answered, {} lost",
        answered.load(std::sync::atomic::Ordering::Relaxed),
        lost.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert_eq!(
        lost.into_inner(),
        0,
        "queries lost across the API server restart"
    );
    assert!(answered.into_inner() > 100);
    let watch_metric = |name: &str| {
        in_netns(&lab.ns.name, || {
            lab.nodens.metric(
                name,
                &[
                    ("resource", "endpointslices"),
                    ("watch", "kube-system/kube-dns"),
                ],
            )
        })
    };
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as f64
    };
    let stopped_at = unix_now();
    lab.kube.stop_apiserver();
    lab.ask(20);
    lab.wait_discovered(0.0);
    assert_eq!(watch_metric("nodens_kubernetes_watch_synced"), 0.0);
    // Staleness: the moment the watch lost the API, standing still while out.
    let lost_at = watch_metric("nodens_kubernetes_watch_current_timestamp_seconds");
    assert!(
        lost_at >= stopped_at - 1.0 && lost_at <= unix_now(),
        "lost at {lost_at}, API stopped at {stopped_at}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        watch_metric("nodens_kubernetes_watch_current_timestamp_seconds"),
        lost_at
    );
    let before = lab.asked();
    lab.ask(10);
    assert_eq!(delta(&lab.asked(), &before), [0, 0, 0, 10]);

    // Back: the pods again, after a relist.
    lab.kube.start_apiserver();
    lab.ask(20);
    lab.wait_discovered(2.0);
    assert_eq!(watch_metric("nodens_kubernetes_watch_synced"), 1.0);
    assert!(watch_metric("nodens_kubernetes_watch_current_timestamp_seconds") > lost_at);
    let before = lab.asked();
    lab.ask(40);
    let d = delta(&lab.asked(), &before);
    assert!(d[0] > 0 && d[1] > 0 && d[2] == 0 && d[3] == 0, "{d:?}");
    lab.nodens.assert_alive();
}
