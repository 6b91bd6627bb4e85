//! Near endpoints first (`[zone.endpoints] topology`, `kubernetes::near`),
//! against a real kube-apiserver in a network namespace: nodens on node-1
//! (zone "a", its Node's label) asks the cluster DNS pod in its zone and not
//! the two in zone "b"; when the slice says that pod is not ready any more,
//! the others take over within the watch's delay, and none of the queries
//! in between is lost. Each "pod" is a CoreDNS logging what it is asked.

use std::time::{Duration, Instant};

use support::*;

const CLUSTER_IP: &str = "10.96.0.10";
/// In zone a (on another node of it), then two in zone b.
const PODS: [(&str, &str, &str); 3] = [
    ("10.244.1.21", "node-2", "a"),
    ("10.244.1.22", "node-3", "b"),
    ("10.244.1.23", "node-4", "b"),
];

fn slice(near_ready: bool) -> String {
    let mut endpoints = String::new();
    for (i, (ip, node, zone)) in PODS.iter().enumerate() {
        let ready = i > 0 || near_ready;
        endpoints.push_str(&format!(
            "  - addresses: [\"{ip}\"]\n    nodeName: {node}\n    zone: {zone}\n    \
             conditions: {{ready: {ready}}}\n"
        ));
    }
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  \
         name: kube-dns-x1\n  namespace: kube-system\n  labels:\n    \
         kubernetes.io/service-name: kube-dns\naddressType: IPv4\nports:\n  \
         - {{name: dns, port: 53, protocol: UDP}}\n  - {{name: dns-tcp, port: 53, protocol: TCP}}\n\
         endpoints:\n{endpoints}"
    )
}

#[test]
fn the_pod_in_this_nodes_zone_is_asked_first_and_the_others_take_over() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let ns = Netns::create("near");
    let kube = Kube::start(&ns);
    kube.create(&format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: node-1, labels: {{topology.kubernetes.io/zone: a}}}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: kube-dns, namespace: kube-system}}\n\
         spec:\n  clusterIP: {CLUSTER_IP}\n  ports:\n  - {{name: dns, port: 53, protocol: UDP}}\n  \
         - {{name: dns-tcp, port: 53, protocol: TCP}}\n---\n{}",
        slice(true)
    ));
    let coredns = |ip: &str| {
        ns.add_to_lo(&[ip]);
        CoreDns::launch(
            &ns.exec(),
            format!("{ip}:53").parse().unwrap(),
            &[("test.", test_zone(""))],
        )
    };
    let pods: Vec<CoreDns> = PODS.iter().map(|(ip, _, _)| coredns(ip)).collect();
    for c in &pods {
        in_netns(&ns.name, || c.wait_ready());
    }
    let toml = Cfg::new(&Net::fixed(12))
        .raw(&format!(
            "[kubernetes]\nkubeconfig = \"{}\"\nnode_name = \"node-1\"\n\n[[zone]]\nname = \"test.\"\n\
             upstreams = [\"{CLUSTER_IP}\"]\n\
             endpoints = {{ service = \"kube-dns\", namespace = \"kube-system\", topology = \"prefer_close\" }}\n",
            kube.kubeconfig.display()
        ))
        .to_toml();
    let mut nodens = Nodens::launch(&toml, &ns.exec());
    in_netns(&ns.name, || nodens.wait_ready());
    wait_until(Duration::from_secs(30), "the three pods discovered", || {
        let n = in_netns(&ns.name, || {
            nodens.metric("nodens_zone_discovered_upstreams", &[("zone", "test.")])
        });
        (n == 3.0).then_some(())
    });
    let asked = || -> Vec<usize> {
        for c in &pods {
            c.sync_log_via(|name| {
                in_netns(&ns.name, || {
                    let _ =
                        udp_query_timeout(c.addr, &Q::new(name, Rt::TXT), Duration::from_secs(2));
                })
            });
        }
        pods.iter()
            .map(|c| {
                c.queries()
                    .iter()
                    .filter(|q| q.name.ends_with("nope.test."))
                    .count()
            })
            .collect()
    };
    let mut sent = 0;
    let mut ask = |n: usize| {
        in_netns(&ns.name, || {
            for i in sent..sent + n {
                let reply = udp_query(nodens.dns, &Q::new(&format!("q{i}.nope.test."), Rt::A));
                assert_eq!(reply.rcode(), rcode::NXDOMAIN, "q{i}");
            }
        });
        sent += n;
    };
    ask(40);
    let near = asked();
    eprintln!("40 misses, asked per pod (zone a, b, b): {near:?}");
    assert_eq!(near, [40, 0, 0], "the pod in this node's zone only");

    // The near pod is not ready any more: the others take over once the
    // watch says so; every query in between is answered.
    let changed = Instant::now();
    kube.apply(&slice(false));
    let mut first_far = None;
    while changed.elapsed() < Duration::from_secs(10) && first_far.is_none() {
        let before = asked();
        ask(1);
        let after = asked();
        if after[1] + after[2] > before[1] + before[2] {
            first_far = Some(changed.elapsed());
        }
    }
    let took = first_far.expect("the pods of zone b asked within 10 s");
    eprintln!("the pods of zone b asked {took:?} after the slice change");
    assert!(took < Duration::from_secs(3), "failover after {took:?}");
    let before = asked();
    ask(20);
    let after = asked();
    assert_eq!(after[0], before[0], "the pod no longer ready is not asked");
    assert_eq!(after[1] + after[2] - before[1] - before[2], 20);
    in_netns(&ns.name, || nodens.assert_alive());
}
