//! Tests of the configuration as a whole: defaults, sections that need one another.

use super::*;

#[test]
fn hold_past_ttl_needs_follow_api_and_is_bounded() {
    let parse = |text: &str| Config::parse(&format!("[cluster]\n{text}"));
    let c = parse("follow_api = true\nhold_past_ttl = \"5m\"\n").unwrap();
    let plan = c.follow_api.unwrap();
    assert_eq!(plan.hold_past_ttl, std::time::Duration::from_secs(300));
    assert!(c.kubernetes.is_some(), "the watch needs the API");
    assert!(parse("").unwrap().follow_api.is_none());
    assert_eq!(plan.endpoints, FollowEndpoints::Headless, "the default");
    let all = parse("follow_api = true\nfollow_api_endpoints = \"all\"\n").unwrap();
    assert_eq!(all.follow_api.unwrap().endpoints, FollowEndpoints::All);
    let e = parse("follow_api = true\nfollow_api_endpoints = \"some\"\n").unwrap_err();
    assert!(
        e.to_string().contains("expected `all` or `headless`"),
        "{e}"
    );
    for (text, key, want) in [
        (
            "hold_past_ttl = \"5m\"\n",
            "hold_past_ttl",
            "needs `follow_api = true`",
        ),
        (
            "follow_api = true\nhold_past_ttl = \"2h\"\n",
            "hold_past_ttl",
            "more than the 1h",
        ),
        (
            "follow_api_endpoints = \"headless\"\n",
            "follow_api_endpoints",
            "needs `follow_api = true`",
        ),
        (
            "follow_api_endpoints = \"all\"\n",
            "follow_api_endpoints",
            "needs `follow_api = true`",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(want), "{e}");
    }
}

#[test]
fn defaults_serve() {
    let c = File::parse("").unwrap();
    assert_eq!(
        c.server
            .listen
            .iter()
            .map(|a| a.get_ref().0)
            .collect::<Vec<_>>(),
        vec!["127.0.0.1:1053".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!(c.zones.len(), 1);
    assert_eq!(c.zones[0].name.get_ref().0, ".");
    assert!(c.zones[0].upstreams.is_empty());
}

#[test]
fn syntax_error_names_line() {
    let e = File::parse("[server]\nlisten = [\"127.0.0.1:53\"\nworkers = 2\n").unwrap_err();
    assert!(e.position.is_some(), "{e}");
}

#[test]
fn bad_value_names_line() {
    let e = Config::parse("[server]\nworkers = 1\n\n[[zone]]\nname = \"cluster.local\"\nupstreams = [\"10.0.0.300\"]\n")
        .unwrap_err();
    assert_eq!(e.position.unwrap().0, 6, "{e}");
    assert!(e.message.contains("10.0.0.300"), "{e}");
}

#[test]
fn node_search_domains_from_a_resolv_conf() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolv.conf");
    std::fs::write(
        &path,
        "search . a.example Corp.Internal.\nnameserver 10.0.0.2\n",
    )
    .unwrap();
    let text = format!("[cluster]\nsearch_domains_from = \"{}\"\n", path.display());
    let c = Config::parse(&text).unwrap();
    assert_eq!(
        c.cluster.search().search_domains,
        [&b"\x01a\x07example\x00"[..], b"\x04corp\x08internal\x00"].map(Box::from)
    );
    let missing = format!(
        "[cluster]\n\nsearch_domains_from = \"{}/none\"\n",
        dir.path().display()
    );
    let e = Config::parse(&missing).unwrap_err();
    assert_eq!(e.position.unwrap().0, 3, "{e}");
    let both = format!("{text}search_domains = [\"x.example\"]\n");
    assert!(
        Config::parse(&both)
            .unwrap_err()
            .to_string()
            .contains("not both")
    );
}

#[test]
fn a_shared_directory_is_never_taken_for_a_socket_or_file() {
    for (text, line) in [
        ("[server]\ncontrol_socket = \"/run/control.sock\"\n", 2),
        ("[server]\nhandover_socket = \"/tmp/h.sock\"\n", 2),
        ("[cache]\nsnapshot_file = \"/var/lib/cache.snap\"\n", 2),
    ] {
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.map(|p| p.0), Some(line), "{e}");
        assert!(e.message.contains("other programs share"), "{e}");
    }
    let e = Config::parse("[node]\nsetup = true\nstate_dir = \"/run\"\n").unwrap_err();
    assert!(
        e.message.contains("node.state_dir: /run is a directory"),
        "{e}"
    );
    Config::parse("[server]\ncontrol_socket = \"/run/nodens/control.sock\"\n").unwrap();
}

#[test]
fn autopath_takes_the_node_name() {
    let c =
        Config::parse("[cluster]\nautopath = true\n[kubernetes]\nnode_name = \"n1\"\n").unwrap();
    assert_eq!(c.kubernetes.unwrap().node_name.as_deref(), Some("n1"));
}

#[test]
fn a_startup_taint_is_a_taint_key_on_a_named_node() {
    let c = Config::parse(
        "[kubernetes]\nnode_name = \"n1\"\nstartup_taint = \"node.nodens.io/agent-not-ready\"\n",
    )
    .unwrap();
    let plan = c.kubernetes.expect("the API is wanted for the taint alone");
    assert_eq!(
        plan.startup_taint.as_deref(),
        Some("node.nodens.io/agent-not-ready")
    );
    let e = Config::parse("[kubernetes]\nnode_name = \"n1\"\nstartup_taint = \"Bad Key\"\n")
        .unwrap_err();
    assert!(
        e.to_string().starts_with("3:") && e.to_string().contains("not a taint key"),
        "{e}"
    );
}

#[test]
fn unknown_key_names_line() {
    let e = Config::parse("[cache]\ncapacity = \"1 MiB\"\nprefetch = 3\n").unwrap_err();
    assert_eq!(e.position.unwrap().0, 3, "{e}");
}

#[test]
fn duplicate_zone_names_second_line() {
    let text = "[[zone]]\nname = \"a.\"\nupstreams = [\"127.0.0.1\"]\n[[zone]]\nname = \"A\"\nupstreams = [\"127.0.0.1\"]\n";
    let e = Config::parse(text).unwrap_err();
    assert_eq!(e.position.unwrap().0, 5, "{e}");
}

#[test]
fn forwarding_loop_is_an_error() {
    let text = "[server]\nlisten = [\"127.0.0.1:1053\"]\n[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1053\"]\n";
    let e = Config::parse(text).unwrap_err();
    assert_eq!(e.position.unwrap().0, 5, "{e}");
}

#[test]
fn case_randomisation_is_off_by_default_under_the_cluster_domain() {
    let zone = |name: &str, extra: &str| {
        format!("[[zone]]\nname = \"{name}\"\nupstreams = [\"10.0.0.10\"]\n{extra}")
    };
    let text = [
        zone("cluster.local", ""),
        zone("svc.cluster.local", ""),
        zone("xcluster.local", ""),
        zone(".", ""),
        zone("corp.example", "randomize_case = false\n"),
        zone("team.cluster.local", "randomize_case = true\n"),
    ]
    .concat();
    let c = Config::parse(&text).unwrap();
    let on: Vec<bool> = c.zones.iter().map(|z| z.randomize_case).collect();
    assert_eq!(on, [false, false, true, true, false, true]);
    let c = Config::parse(&format!("[cluster]\ndomain = \"k8s.example\"\n{text}")).unwrap();
    let on: Vec<bool> = c.zones.iter().map(|z| z.randomize_case).collect();
    assert_eq!(on, [true, true, true, true, false, true]);
}

#[test]
fn addresses_default_to_port_53() {
    let c = Config::parse(
        "[[zone]]\nname = \"x\"\nupstreams = [\"::1\", \"[::1]:5353\", \"10.0.0.1\"]\n",
    )
    .unwrap();
    let ups: Vec<String> = c.zones[0].upstreams.iter().map(|u| u.to_string()).collect();
    assert_eq!(ups, ["[::1]:53", "[::1]:5353", "10.0.0.1:53"]);
    assert_eq!(c.zones[0].name, "x.");
}

#[test]
fn pool_table_belongs_to_its_zone() {
    let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\ntransport = \"force_tcp\"\n\
                [zone.pool]\nmax_connections = 2\nidle_timeout = \"1s\"\n\
                [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.2\"]\n";
    let c = Config::parse(text).unwrap();
    assert_eq!(c.zones[0].transport, Transport::ForceTcp);
    assert_eq!(c.zones[0].upstream.pool.max_connections, 2);
    assert_eq!(
        c.zones[0].upstream.pool.idle_timeout,
        Duration::from_secs(1)
    );
    assert_eq!(c.zones[1].transport, Transport::PreferUdp);
    assert_eq!(c.zones[1].upstream.pool.max_connections, 4);
    let e = Config::parse("[[zone]]\nname = \"a\"\n[zone.pool]\nmax_conns = 2\n").unwrap_err();
    assert_eq!(e.position.unwrap().0, 4, "{e}");
}

#[test]
fn shared_upstream_needs_one_pool_setting() {
    let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n[zone.pool]\nmax_connections = 2\n\
                [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.1\"]\n";
    let e = Config::parse(text).unwrap_err();
    assert_eq!(e.position.unwrap().0, 8, "{e}");
}

#[test]
fn allow_list_errors_name_the_line() {
    let c = Config::parse("[server]\nallow = [\"10.0.0.0/8\", \"::/0\"]\n").unwrap();
    assert_eq!(c.server.allow.len(), 2);
    assert_eq!(
        Config::parse("[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1\"]\n")
            .unwrap()
            .server
            .allow
            .len(),
        9
    );
    let e = Config::parse("[server]\nworkers = 1\nallow = [\"10.0.0.0/33\"]\n").unwrap_err();
    assert_eq!(e.position.unwrap().0, 3, "{e}");
}

#[test]
fn server_and_cache_errors_name_the_line() {
    let e = Config::parse("[server]\nworkers = 1\nquery_timeout = \"0s\"\n").unwrap_err();
    assert_eq!(e.position.unwrap().0, 3, "{e}");
    let e = Config::parse("[cache]\n\nprefetch_percent = 101\n").unwrap_err();
    assert_eq!(e.position.unwrap().0, 3, "{e}");
    let e = Config::parse("[metrics]\nlisten = \"nowhere\"\n").unwrap_err();
    assert_eq!(e.position.unwrap().0, 2, "{e}");
    let e = Config::parse("\n[log]\nlevel = \"=[\"\n").unwrap_err();
    assert_eq!(e.position.unwrap().0, 3, "{e}");
}

#[test]
fn zone_errors_name_the_field() {
    let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\nhealth_check = \"0s\"\n";
    let e = Config::parse(text).unwrap_err();
    assert_eq!(e.position.unwrap().0, 4, "{e}");
}

#[test]
fn a_zones_bulkhead_is_its_own_or_half_the_servers_and_never_above_it() {
    let zones = |text: &str| Config::parse(text).map(|c| c.zones);
    let text = "[server]\nmax_misses_in_flight = 100\n\
                [[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\nmax_misses_in_flight = 7\n\
                [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.2\"]\n";
    let z = zones(text).unwrap();
    assert_eq!(
        (z[0].max_misses_in_flight, z[1].max_misses_in_flight),
        (7, 50)
    );
    let per_zone = text.replace(
        "max_misses_in_flight = 100\n",
        "max_misses_in_flight = 100\nmax_misses_in_flight_per_zone = 0\n",
    );
    assert_eq!(
        zones(&per_zone).unwrap()[1].max_misses_in_flight,
        0,
        "0: no bound"
    );
    let above = text.replace("max_misses_in_flight = 7", "max_misses_in_flight = 700");
    let e = zones(&above).unwrap_err();
    assert_eq!(e.position.unwrap().0, 6, "{e}");
    assert!(
        e.message
            .contains("more than [server] max_misses_in_flight (100)"),
        "{e}"
    );
    let server = text.replace(
        "max_misses_in_flight = 100\n",
        "max_misses_in_flight = 100\nmax_misses_in_flight_per_zone = 101\n",
    );
    assert!(
        zones(&server)
            .unwrap_err()
            .message
            .contains("max_misses_in_flight_per_zone")
    );
}

#[test]
fn a_key_left_out_is_located_through_its_table() {
    use crate::vocab::position::Step::{Index, Key};
    let text = "[server]\nworkers = 1\n\n[[zone]]\nname = \"a\"\n";
    let doc = Document::new(text);
    let at = |path: &[crate::vocab::position::Step<'_>]| {
        doc.locate(path).map(|s| doc.line_col(s.start).0)
    };
    assert_eq!(at(&[Key("server"), Key("query_timeout")]), Some(1));
    assert_eq!(at(&[Key("zone"), Index(0), Key("resolv_conf")]), Some(4));
    assert_eq!(at(&[Key("cache"), Key("capacity")]), None);
}

#[test]
fn missing_resolv_conf_names_the_zone() {
    let text = "[[zone]]\nname = \"a\"\nresolv_conf = \"/nonexistent/resolv.conf\"\n";
    let e = Config::parse(text).unwrap_err();
    assert_eq!(e.position.unwrap().0, 3, "{e}");
    assert!(e.message.contains("/nonexistent/resolv.conf"), "{e}");
}

#[test]
fn tls_zones_are_checked_before_any_query_goes_out() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    // Not a certificate, but PEM of another kind: no roots in it.
    std::fs::write(
        &ca,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let zone = |upstream: &str, transport: &str, tls: &str| {
        format!(
            "[[zone]]\nname = \"a\"\nupstreams = [\"{upstream}\"]\ntransport = \"{transport}\"\n{tls}"
        )
    };
    for (text, line, want) in [
        (
            zone(
                "127.0.0.1:853",
                "force_tcp",
                "[zone.tls]\nserver_name = \"dns.a\"\n",
            ),
            5,
            "transport is not \"tls\"",
        ),
        (zone("127.0.0.1", "tls", ""), 3, "served on port 853"),
        (
            zone(
                "127.0.0.1:853",
                "tls",
                "[zone.tls]\nserver_name = \"not a name!\"\n",
            ),
            5,
            "not a DNS name",
        ),
        (
            zone("127.0.0.1:853", "tls", "[zone.tls]\ncert = \"/c.pem\"\n"),
            5,
            "set both or neither",
        ),
        (
            zone(
                "127.0.0.1:853",
                "tls",
                "[zone.tls]\nca = \"/nonexistent/ca.pem\"\n",
            ),
            5,
            "cannot read /nonexistent/ca.pem",
        ),
        (
            zone(
                "127.0.0.1:853",
                "tls",
                &format!("[zone.tls]\nca = \"{}\"\n", ca.display()),
            ),
            5,
            "holds no PEM certificates",
        ),
    ] {
        let e = Config::parse(&text).unwrap_err();
        assert!(e.to_string().contains(want), "{text}\n{e}");
        assert_eq!(e.position.map(|p| p.0), Some(line), "{text}\n{e}");
    }
}

#[test]
fn zones_sharing_a_tls_upstream_must_agree_on_its_name() {
    let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1:853\"]\ntransport = \"tls\"\n\
                [zone.tls]\nserver_name = \"one.example\"\n\
                [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.1:853\"]\ntransport = \"tls\"\n\
                [zone.tls]\nserver_name = \"two.example\"\n";
    let e = Config::parse(text).unwrap_err();
    assert!(e.to_string().contains("TLS settings"), "{e}");
    assert_eq!(e.position.map(|p| p.0), Some(9), "{e}");
}
