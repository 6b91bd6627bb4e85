//! Unit tests of `upstream`.

use super::*;

/// The router of a config's zones (built on a runtime of its own).
fn router(config: &str) -> Router {
    let config = crate::config::Config::parse(config).unwrap();
    let metrics = Arc::new(UpstreamMetrics::register(&crate::metrics::Registry::new()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _main = runtime.enter();
    Router::build(
        &config.zones,
        &config.listen,
        &metrics,
        &Upkeep::current(),
        None,
    )
}

#[test]
fn longest_suffix_wins() {
    let text = "[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1\"]\n\
                [[zone]]\nname = \"cluster.local\"\nupstreams = [\"127.0.0.1:2\"]\n\
                [[zone]]\nname = \"svc.cluster.local\"\nupstreams = [\"127.0.0.1:3\"]\n";
    let router = router(text);
    let zone = |n: &str| {
        router
            .route(&name::from_text(n).unwrap())
            .unwrap()
            .name
            .clone()
    };
    assert_eq!(zone("a.b.svc.cluster.local"), "svc.cluster.local.");
    assert_eq!(zone("pod.cluster.local"), "cluster.local.");
    assert_eq!(zone("cluster.local"), "cluster.local.");
    assert_eq!(zone("xcluster.local"), ".");
    assert_eq!(zone("example.com"), ".");
    assert_eq!(zone("."), ".");
}

#[test]
fn each_listener_routes_in_its_view() {
    let a: SocketAddr = "127.0.0.1:1053".parse().unwrap();
    let b: SocketAddr = "127.0.0.2:1053".parse().unwrap();
    let c: SocketAddr = "127.0.0.3:1053".parse().unwrap();
    let text = "[server]\nlisten = [\"127.0.0.1:1053\", \"127.0.0.2:1053\", \"127.0.0.3:1053\"]\n\
                [[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1\"]\n\
                [[zone]]\nname = \"example\"\nupstreams = [\"127.0.0.1:2\"]\nlisten = [\"127.0.0.1:1053\", \"127.0.0.3:1053\"]\n\
                [[zone]]\nname = \"example\"\nupstreams = [\"127.0.0.1:3\"]\nlisten = [\"127.0.0.2:1053\"]\n";
    let router = router(text);
    let (va, vb, vc) = (router.view_of(a), router.view_of(b), router.view_of(c));
    assert!(va != 0 && vb != 0 && va != vb, "{va} {vb}");
    assert_eq!(va, vc, "listeners that see the same zones share a view");
    let upstream = |view, n: &str| {
        let zone = router.route_in(view, &name::from_text(n).unwrap()).unwrap();
        (zone.upstreams[0].addr.port(), zone.view.clone())
    };
    assert_eq!(
        upstream(va, "x.example"),
        (2, "127.0.0.1:1053,127.0.0.3:1053".into())
    );
    assert_eq!(upstream(vb, "x.example"), (3, "127.0.0.2:1053".into()));
    assert_eq!(upstream(vb, "x.other"), (1, String::new()));
    assert!(
        router.route(&name::from_text("x.other").unwrap()).is_none(),
        "view 0 is empty"
    );
}

#[test]
fn without_views_every_listener_is_view_0() {
    let router = router("[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1\"]\n");
    assert_eq!(router.view_of("127.0.0.1:1053".parse().unwrap()), 0);
    assert!(router.route(&name::from_text("a").unwrap()).is_some());
}

#[test]
fn a_suffix_of_a_zone_names_length_is_still_compared() {
    let text = "[[zone]]\nname = \"cluster.local\"\nupstreams = [\"127.0.0.1:2\"]\n";
    let router = router(text);
    let routed = |n: &str| router.route(&name::from_text(n).unwrap()).is_some();
    assert!(routed("a.cluster.local"));
    // Same wire length as cluster.local, other bytes: no zone.
    assert!(!routed("a.abcdefg.local"));
    assert!(!routed("example.com"));
    assert!(!routed("."));
}
