//! Watches that resume (`src/kubernetes/watch/`), against a real
//! kube-apiserver, with nodens reaching it through a TCP relay (a process
//! of its own, as a load balancer in front of API servers is) that can
//! reset every connection and refuse new ones for a moment. The API
//! server's audit log says which lists and watches nodens (user `nodens`)
//! made.
//!
//! A connection reset does not cost the API server a list: the watches go
//! on from their resource version, the change made while they were cut
//! off reaches the cache (a deleted Service's cached answer is dropped),
//! and the watches are current again. An API server restart, whose new
//! watch cache no longer has the old resource versions, costs one list per
//! watch, not more.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::rr::RecordType as Rt;
use support::*;

const NS: &str = "team-r";
/// Where the relay listens (inside the test's namespace).
const RELAY: &str = "127.0.0.1:6444";
const RESOURCES: [&str; 2] = ["services", "endpointslices"];

fn service(name: &str, cluster_ip: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         spec: {{clusterIP: {cluster_ip}, ports: [{{name: http, port: 80, protocol: TCP}}]}}\n"
    )
}

fn name(n: &str) -> String {
    format!("{n}.{NS}.svc.cluster.local.")
}

struct Lab {
    kube: Kube,
    _core: KubeDns,
    relay: Proc,
    nodens: Nodens,
    ns: Netns,
}

impl Lab {
    fn start(name: &str) -> Lab {
        Lab::start_on(name, Kube::start)
    }

    /// With an API server that serves streaming lists, and nodens asking
    /// for them.
    fn start_streaming(name: &str) -> Lab {
        Lab::start_on_with(name, Kube::start_streaming, "streaming_lists = true\n")
    }

    fn start_on(name: &str, kube: impl FnOnce(&Netns) -> Kube) -> Lab {
        Lab::start_on_with(name, kube, "")
    }

    /// With `extra` in `[kubernetes]`.
    fn start_on_with(name: &str, kube: impl FnOnce(&Netns) -> Kube, extra: &str) -> Lab {
        let ns = Netns::create(name);
        let kube = kube(&ns);
        kube.create(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"
        ));
        kube.create(&service("kept", "10.96.0.50"));
        kube.create(&service("gone", "10.96.0.51"));
        // Answers live 300 s: only the watch drops one within the test.
        let core = KubeDns::start_bound_ttl(&ns, &kube, 300);
        let relay_addr: SocketAddr = RELAY.parse().unwrap();
        let relay = kube.relay(relay_addr, Duration::from_secs(3));
        let toml = Cfg::new(&Net::fixed(21))
            .zone(Zone::new("cluster.local.", &[core.addr]))
            .raw(&format!(
                "[cluster]\nfollow_api = true\n[kubernetes]\nkubeconfig = \"{}\"\n{extra}",
                kube.nodens_kubeconfig(relay_addr).display()
            ))
            .to_toml();
        let mut nodens = Nodens::launch(&toml, &ns.exec());
        in_netns(&ns.name, || nodens.wait_ready());
        let lab = Lab {
            kube,
            _core: core,
            relay,
            nodens,
            ns,
        };
        lab.wait_current();
        lab
    }

    fn metric(&self, name: &str, resource: &str) -> f64 {
        let labels = [("resource", resource), ("watch", "follow_api")];
        in_netns(&self.ns.name, || self.nodens.metric(name, &labels))
    }

    fn current(&self) -> bool {
        RESOURCES
            .iter()
            .all(|r| self.metric("nodens_kubernetes_watch_synced", r) == 1.0)
    }

    fn wait_current(&self) {
        wait_until(Duration::from_secs(30), "the follow_api watches", || {
            self.current().then_some(())
        });
    }

    /// The lists nodens took of `resource`, by the API server's audit log.
    fn lists(&self, resource: &str) -> usize {
        let requests = self.kube.requests_of("nodens");
        requests
            .iter()
            .filter(|r| r.resource == resource && r.lists())
            .count()
    }

    fn ask(&self, n: &str) -> (u16, String) {
        let q = Q::new(&name(n), Rt::A);
        let reply = in_netns(&self.ns.name, || {
            udp_query_timeout(self.nodens.dns, &q, Duration::from_millis(500))
        })
        .unwrap_or_else(|| panic!("no answer for {n}"));
        (reply.rcode(), format!("{:?}", reply.answer_set()))
    }
}

#[test]
fn a_watch_cut_off_resumes_without_a_list_and_misses_no_change() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let mut lab = Lab::start("wresume");
    // Both names cached (300 s).
    assert!(lab.ask("kept").1.contains("10.96.0.50"));
    assert!(lab.ask("gone").1.contains("10.96.0.51"));
    let lists: Vec<usize> = RESOURCES.iter().map(|r| lab.lists(r)).collect();
    assert_eq!(lists, [1, 1], "one list each at the start");
    let metric =
        |lab: &Lab, m: &str| -> Vec<f64> { RESOURCES.iter().map(|r| lab.metric(m, r)).collect() };
    let errors = metric(&lab, "nodens_kubernetes_watch_errors_total");
    let resumes = metric(&lab, "nodens_kubernetes_watch_resumes_total");

    // Every connection reset, none taken for 3 s; meanwhile a Service goes.
    lab.relay.signal(libc::SIGUSR1);
    let cut = lab
        .relay
        .wait_for_line(1, Duration::from_secs(5), "the cut", |l| {
            l.starts_with("cut")
        });
    eprintln!("relay: {cut}");
    lab.kube
        .try_kubectl(&["delete", "service", "-n", NS, "gone"], None)
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        "both watches to see the cut",
        || {
            let now = metric(&lab, "nodens_kubernetes_watch_errors_total");
            now.iter().zip(&errors).all(|(n, e)| n > e).then_some(())
        },
    );
    wait_until(Duration::from_secs(30), "the watches to resume", || {
        let now = metric(&lab, "nodens_kubernetes_watch_resumes_total");
        (lab.current() && now.iter().zip(&resumes).all(|(n, r)| n > r)).then_some(())
    });

    // No list: the watches went on from their resource versions...
    let lists: Vec<usize> = RESOURCES.iter().map(|r| lab.lists(r)).collect();
    let requests = lab.kube.requests_of("nodens");
    for r in &requests {
        eprintln!("{} {}", r.verb, r.uri);
    }
    assert_eq!(lists, [1, 1], "a reset costs no list");
    assert!(
        requests
            .iter()
            .filter(|r| r.verb == "watch" && !r.uri.contains("resourceVersion=0"))
            .count()
            >= 2,
        "the watches resumed from their resource versions"
    );
    // ...and the change made while they were cut off reached the cache.
    let (rcode, answer) = lab.ask("gone");
    assert_eq!(rcode, 3, "NXDOMAIN: {answer}");
    assert!(lab.ask("kept").1.contains("10.96.0.50"));
    in_netns(&lab.ns.name, || lab.nodens.assert_alive());
}

#[test]
fn an_api_server_restart_costs_one_list_per_watch() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let mut lab = Lab::start("wrestart");
    lab.kube.stop_apiserver();
    wait_until(
        Duration::from_secs(15),
        "the watches to lose the API",
        || (!lab.current()).then_some(()),
    );
    lab.kube.start_apiserver();
    lab.kube.create(&service("new", "10.96.0.52"));
    lab.wait_current();
    // The new API server's watch cache begins after the old resource
    // versions (410 Gone): one list each, and no more.
    let lists: Vec<usize> = RESOURCES.iter().map(|r| lab.lists(r)).collect();
    eprintln!("lists: {lists:?}");
    assert!(lists.iter().all(|&n| n <= 2), "{lists:?}");
    assert!(lab.ask("new").1.contains("10.96.0.52"));
    in_netns(&lab.ns.name, || lab.nodens.assert_alive());
}

/// Where the API server serves streaming lists (the WatchList gate on,
/// etcd 3.5), a list is one watch that sends the objects and a bookmark:
/// no list request at all, and the watch goes on from the list's end.
#[test]
fn lists_are_streamed_where_the_api_server_serves_them() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let mut lab = Lab::start_streaming("wstream");
    let requests = lab.kube.requests_of("nodens");
    for r in &requests {
        eprintln!("{} {} {}", r.verb, r.code, r.uri);
    }
    for resource in RESOURCES {
        let of = |r: &&ApiRequest| r.resource == resource;
        let streamed = requests
            .iter()
            .filter(of)
            .filter(|r| r.uri.contains("sendInitialEvents=true") && r.code == 200)
            .count();
        let paged = requests
            .iter()
            .filter(of)
            .filter(|r| r.verb == "list")
            .count();
        assert_eq!((streamed, paged), (1, 0), "{resource}: one streaming list");
        assert_eq!(lab.lists(resource), 1);
    }
    // The stream goes on as the watch: a deletion reaches the cache.
    assert!(lab.ask("gone").1.contains("10.96.0.51"));
    lab.kube
        .try_kubectl(&["delete", "service", "-n", NS, "gone"], None)
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        "the deletion to reach nodens",
        || (lab.ask("gone").0 == 3).then_some(()),
    );
    assert!(lab.ask("kept").1.contains("10.96.0.50"));
    in_netns(&lab.ns.name, || lab.nodens.assert_alive());
}
