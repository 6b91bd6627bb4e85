//! The startup taint (`[kubernetes] startup_taint`), against a real
//! kube-apiserver in a network namespace: nodens removes the taint from
//! its own node once it serves, and nothing else.
//!
//! - a nodens that cannot serve (its listen address held by another
//!   process's socket) exits and leaves the taint on the node;
//! - a nodens that serves removes it from its node, keeps the node's other
//!   taints, and leaves another node's startup taint alone;
//! - `nodens_kubernetes_startup_taint_pending` is 0 after, and no attempt
//!   failed.

use std::net::{SocketAddr, UdpSocket};

use support::*;

const NODE: &str = "node-1";
const OTHER_NODE: &str = "node-2";
const TAINT: &str = "node.nodens.io/agent-not-ready";
const KEPT: &str = "dedicated.example/batch";

fn node(name: &str, taints: &[&str]) -> String {
    let taints: Vec<String> = taints
        .iter()
        .map(|k| format!("{{key: \"{k}\", effect: NoSchedule}}"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nspec:\n  taints: [{}]\n",
        taints.join(", ")
    )
}

fn taints(kube: &Kube, name: &str) -> String {
    kube.try_kubectl(
        &["get", "node", name, "-o", "jsonpath={.spec.taints[*].key}"],
        None,
    )
    .unwrap_or_else(|e| panic!("kubectl get node {name}: {e}"))
}

fn has(taints: &str, key: &str) -> bool {
    taints.split_whitespace().any(|k| k == key)
}

#[test]
fn the_startup_taint_comes_off_its_own_node_once_nodens_serves() {
    let ns = Netns::create("taint");
    let kube = Kube::start(&ns);
    kube.create(&node(NODE, &[TAINT, KEPT]));
    kube.create(&node(OTHER_NODE, &[TAINT]));
    let net = Net::fixed(23);
    let upstream = SocketAddr::new(net.ip(2), 53);
    let toml = Cfg::new(&net)
        .zone(Zone::new(".", &[upstream]))
        .raw(&format!(
            "{}startup_taint = \"{TAINT}\"\n",
            kube.pod_watch(NODE)
        ))
        .to_toml();

    // Its listen address held (no SO_REUSEPORT): nodens cannot serve.
    let squatter = in_netns(&ns.name, || UdpSocket::bind(net.nodens()).unwrap());
    let mut failed = Nodens::launch(&toml, &ns.exec());
    let status = failed
        .proc
        .wait_exit(secs(20))
        .expect("nodens exits when it cannot bind");
    assert!(!status.success(), "{status}");
    // It says why, and does not panic.
    let said = failed.proc.lines().join("\n");
    assert!(!said.contains("panicked"), "{said}");
    assert!(
        said.contains("Address already in use") || said.contains("address in use"),
        "{said}"
    );
    assert!(has(&taints(&kube, NODE), TAINT), "{}", taints(&kube, NODE));
    drop(squatter);

    let mut nodens = Nodens::launch(&toml, &ns.exec());
    in_netns(&ns.name, || nodens.wait_ready());
    wait_until(secs(20), "the startup taint to come off node-1", || {
        (!has(&taints(&kube, NODE), TAINT)).then_some(())
    });
    // The node's other taints stay (the API server adds its own
    // `node.kubernetes.io/not-ready` to a new node), and so does another
    // node's startup taint.
    assert!(has(&taints(&kube, NODE), KEPT), "{}", taints(&kube, NODE));
    assert!(
        has(&taints(&kube, OTHER_NODE), TAINT),
        "another node's taint"
    );
    in_netns(&ns.name, || {
        assert_eq!(
            nodens.metric("nodens_kubernetes_startup_taint_pending", &[]),
            0.0
        );
        assert_eq!(
            nodens.metric("nodens_kubernetes_startup_taint_errors_total", &[]),
            0.0
        );
    });
}

/// A taint nodens cannot remove keeps every pod off its node, and only a
/// gauge and the logs would say so: `nodens doctor`, reading the control
/// socket, names it with the API's answer. Here nodens is told a node
/// name the API does not know (as a DaemonSet without NODE_NAME from
/// spec.nodeName would be).
#[test]
fn doctor_names_a_startup_taint_nodens_cannot_remove() {
    let ns = Netns::create("taintdoc");
    let kube = Kube::start(&ns);
    let dir = private_dir();
    let socket = dir.path().join("control.sock");
    let net = Net::fixed(24);
    let upstream = SocketAddr::new(net.ip(2), 53);
    let toml = Cfg::new(&net)
        .server_option("control_socket", &format!("\"{}\"", socket.display()))
        .zone(Zone::new(".", &[upstream]))
        .raw(&format!(
            "{}startup_taint = \"{TAINT}\"\n",
            kube.pod_watch("node-nobody-knows")
        ))
        .to_toml();
    let mut nodens = Nodens::launch(&toml, &ns.exec());
    in_netns(&ns.name, || nodens.wait_ready());
    wait_until(secs(20), "a failed attempt", || {
        in_netns(&ns.name, || {
            (nodens.metric("nodens_kubernetes_startup_taint_errors_total", &[]) > 0.0).then_some(())
        })
    });
    let (report, passed) = doctor_against(&socket, "nameserver 127.0.0.1\n");
    let stuck = finding(&report, "startup-taint-stuck");
    assert!(stuck.contains("node-nobody-knows"), "{stuck}");
    assert!(stuck.contains("not found"), "the API's answer: {stuck}");
    assert!(!passed, "a critical finding fails doctor");
    in_netns(&ns.name, || nodens.assert_alive());
}
