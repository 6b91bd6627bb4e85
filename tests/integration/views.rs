//! Views (`[[zone]] listen`): one zone name answered from other upstreams
//! on another listen address, a cache that keeps each view's answers to
//! itself, and a reload that changes which listeners share a view.

use support::*;

/// Two listen addresses, `example.` from upstream `a` on the first and
/// from upstream `b` on the second; `.` (no listen: both) from `a`.
fn config(net: &Net, a: std::net::SocketAddr, b: std::net::SocketAddr) -> String {
    let (pods, node) = (net.nodens(), std::net::SocketAddr::new(net.ip(5), 1053));
    format!(
        "[server]\nlisten = [\"{pods}\", \"{node}\"]\n\
         [metrics]\nlisten = \"{metrics}\"\n\
         [[zone]]\nname = \"example\"\nupstreams = [\"{a}\"]\nlisten = [\"{pods}\"]\n\
         [[zone]]\nname = \"example\"\nupstreams = [\"{b}\"]\nlisten = [\"{node}\"]\n\
         [[zone]]\nname = \".\"\nupstreams = [\"{a}\"]\n",
        metrics = net.metrics(),
    )
}

fn answer(at: std::net::SocketAddr, name: &str) -> Vec<std::net::Ipv4Addr> {
    let r = udp_query(at, &Q::new(name, Rt::A));
    assert_eq!(r.rcode(), rcode::NOERROR, "{name} at {at}");
    r.a()
}

#[test]
fn each_listener_answers_from_its_view_across_reloads() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let zone = |ip: &str| {
        [(
            "example.",
            zone_file("example.", &format!("www 300 IN A {ip}")),
        )]
    };
    let (a, b) = (net.upstream(0), net.upstream(1));
    let up_a = CoreDns::start(a, &zone("10.0.0.1"));
    let _up_b = CoreDns::start(b, &zone("10.0.0.2"));
    let (pods, node) = (net.nodens(), std::net::SocketAddr::new(net.ip(5), 1053));
    let mut nodens = Nodens::start_toml(&config(&net, a, b));

    // The pods' answer is cached first; the node's view must not get it.
    assert_eq!(answer(pods, "www.example."), [ipv4("10.0.0.1")]);
    assert_eq!(answer(node, "www.example."), [ipv4("10.0.0.2")]);
    assert_eq!(answer(pods, "www.example."), [ipv4("10.0.0.1")]);
    // A name of the shared zone: from `a` on both.
    up_a.sync_log();
    let before = up_a.count_queries("www.example.", "A");
    assert_eq!(before, 1, "the pods' second query is a cache hit");

    // A reload that puts both listeners in one view (`example.` from `b` on
    // both): the pods' cached answer must not reach the node, which now
    // shares the pods' partition number.
    let shared = config(&net, a, b).replace(
        &format!("[[zone]]\nname = \"example\"\nupstreams = [\"{a}\"]\nlisten = [\"{pods}\"]\n"),
        "",
    );
    let shared = shared.replace(
        &format!("listen = [\"{node}\"]\n[[zone]]"),
        &format!("listen = [\"{pods}\", \"{node}\"]\n[[zone]]"),
    );
    assert_eq!(shared.matches("name = \"example\"").count(), 1, "{shared}");
    nodens.reload(&shared);
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "success")], 1.0);
    assert_eq!(answer(node, "www.example."), [ipv4("10.0.0.2")]);
    assert_eq!(answer(pods, "www.example."), [ipv4("10.0.0.2")]);

    // Two views on one address: refused at reload, the running one kept.
    let overlapping = config(&net, b, a).replace(
        &format!("listen = [\"{node}\"]\n[[zone]]\nname = \".\""),
        &format!("listen = [\"{pods}\"]\n[[zone]]\nname = \".\""),
    );
    assert_ne!(overlapping, config(&net, b, a));
    nodens.reload(&overlapping);
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "failure")], 1.0);
    assert_eq!(answer(node, "www.example."), [ipv4("10.0.0.2")]);
    nodens.assert_alive();
    let metrics = nodens.metrics_text();
    assert!(
        metrics.contains(&format!("view=\"{node}\"")),
        "no view label:\n{metrics}"
    );
}
