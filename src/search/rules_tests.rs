//! Unit tests of `search::rules`.

use super::*;
use crate::wire::name::from_text;

#[test]
fn the_namespace_node_of_a_name_below_it() {
    let r = rules();
    let at = |t: &str| r.svc_namespace_node(&from_text(t).unwrap());
    assert_eq!(at("web.team-a.svc.cluster.local"), Some(4));
    assert_eq!(at("a.b.team-a.svc.cluster.local"), Some(4));
    assert_eq!(at("team-a.svc.cluster.local"), None);
    assert_eq!(at("web.team-a.pod.cluster.local"), None);
    assert_eq!(at("web.team-a.svc.example.com"), None);
}

fn rules() -> ClusterRules {
    ClusterRules::new(
        from_text("cluster.local").unwrap(),
        true,
        true,
        &[],
        vec![from_text("legacy.cluster.local").unwrap()],
        vec![
            CloudSuffix::new("internal.cloudapp.net", 3),
            CloudSuffix::new("c.*.internal", 2),
            CloudSuffix::new("google.internal", 1),
        ],
    )
}

fn verdict(r: &ClusterRules, name: &str) -> Option<Rule> {
    r.cannot_exist(&from_text(name).unwrap())
}

#[test]
fn every_form_of_the_specification_may_exist() {
    let r = rules();
    for name in [
        "cluster.local",
        "svc.cluster.local",
        "pod.cluster.local",
        "dns-version.cluster.local",
        "dns.cluster.local",
        "ns.dns.cluster.local",
        "team-a.svc.cluster.local",
        "web.team-a.svc.cluster.local",
        "db-0.db.team-a.svc.cluster.local",
        "10-1-0-6.db.team-a.svc.cluster.local",
        "_tcp.web.team-a.svc.cluster.local",
        "_http._tcp.web.team-a.svc.cluster.local",
        "http.tcp.web.team-a.svc.cluster.local",
        "_dns._UDP.web.team-a.svc.cluster.local",
        "_x._sctp.web.team-a.svc.cluster.local",
        "team-a.pod.cluster.local",
        "10-1-0-9.team-a.pod.cluster.local",
        "x.10-1-0-9.team-a.pod.cluster.local",
        "x.y.10-1-0-9.team-a.pod.cluster.local",
        // other zones are not the schema's business
        "api.example.com",
        "cluster.local.example.com",
        "local",
        "vm1.abcd.bx.internal.cloudapp.net",
        "vm1.us-central1-a.c.my-project.internal",
        "metadata.google.internal",
    ] {
        let wire = from_text(name).unwrap().to_ascii_lowercase();
        assert_eq!(r.cannot_exist(&wire), None, "{name}");
    }
}

#[test]
fn search_list_junk_is_ruled_out() {
    let r = rules();
    let cases = [
        ("api.example.com.cluster.local", Rule::ZoneChild),
        ("foo.bar.cluster.local", Rule::ZoneChild),
        ("x.dns-version.cluster.local", Rule::ReservedName),
        ("x.dns.cluster.local", Rule::ReservedName),
        ("a.ns.dns.cluster.local", Rule::ReservedName),
        (
            "api.example.com.team-a.svc.cluster.local",
            Rule::SvcPortShape,
        ),
        ("a.b.c.d.e.svc.cluster.local", Rule::TooManyLabels),
        ("a.b.c.d.e.pod.cluster.local", Rule::TooManyLabels),
        (
            "api.example.com.abcd.bx.internal.cloudapp.net",
            Rule::CloudSuffix,
        ),
        ("api.example.com.c.my-project.internal", Rule::CloudSuffix),
        ("api.example.com.google.internal", Rule::CloudSuffix),
    ];
    for (name, rule) in cases {
        assert_eq!(verdict(&r, name), Some(rule), "{name}");
    }
}

#[test]
fn no_rule_concerns_a_name_out_of_scope() {
    let r = rules().with_search(SearchPlan {
        namespace_check: true,
        speculate: true,
        ..SearchPlan::default()
    });
    let names = [
        ("example.com", false),
        ("cluster.local.example.com", false),
        ("api.example.com.external", false),
        // Its last label is that of `c.*.internal`: may be below it.
        ("api.example.com.internal", true),
        ("cluster.local", true),
        ("kubernetes.default.svc.cluster.local", true),
        ("api.example.com.team-a.svc.cluster.local", true),
        ("api.example.com.abcd.bx.internal.cloudapp.net", true),
        ("api.example.com.c.my-project.internal", true),
        ("x.google.internal", true),
    ];
    for (text, in_scope) in names {
        let name = from_text(text).unwrap();
        assert_eq!(r.in_scope(&name), in_scope, "{text}");
        if !in_scope {
            assert_eq!(r.cannot_exist(&name), None, "{text}");
            assert_eq!(r.namespace_to_check(&name), None, "{text}");
            assert_eq!(r.first_expansion(&name), None, "{text}");
            assert_eq!(r.namespace_node(&name), None, "{text}");
            assert_eq!(r.svc_namespace(&name), None, "{text}");
            assert_eq!(r.cut_points(&name).count(), 0, "{text}");
            assert!(!r.is_cut_node(&name), "{text}");
            assert!(
                !r.may_learn_soa(&name, &from_text("com").unwrap()),
                "{text}"
            );
        }
    }
}

#[test]
fn exceptions_and_switches() {
    let r = rules();
    assert_eq!(verdict(&r, "a.b.legacy.cluster.local"), None);
    assert_eq!(verdict(&r, "legacy.cluster.local"), None);
    let off = ClusterRules::new(
        from_text("cluster.local").unwrap(),
        true,
        true,
        &[Rule::SvcPortShape, Rule::CloudSuffix],
        vec![],
        vec![CloudSuffix::new("google.internal", 1)],
    );
    assert_eq!(verdict(&off, "api.example.com.ns.svc.cluster.local"), None);
    assert_eq!(verdict(&off, "a.b.google.internal"), None);
    assert_eq!(
        verdict(&off, "api.example.com.cluster.local"),
        Some(Rule::ZoneChild)
    );
    let none = ClusterRules::new(
        from_text("cluster.local").unwrap(),
        false,
        true,
        &[],
        vec![],
        vec![],
    );
    assert_eq!(verdict(&none, "api.example.com.cluster.local"), None);
}

#[test]
fn custom_cluster_domain() {
    let r = ClusterRules::new(
        from_text("k8s.corp.example").unwrap(),
        true,
        true,
        &[],
        vec![],
        vec![],
    );
    assert_eq!(
        verdict(&r, "api.example.com.k8s.corp.example"),
        Some(Rule::ZoneChild)
    );
    assert_eq!(verdict(&r, "web.ns.svc.k8s.corp.example"), None);
    assert_eq!(verdict(&r, "api.example.com.cluster.local"), None);
}

#[test]
fn cut_points_are_namespace_and_service_nodes() {
    let r = rules();
    let points = |name: &str| {
        let wire = from_text(name).unwrap();
        r.cut_points(&wire)
            .map(|at| crate::wire::name::to_text(&wire[at..]))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        points("api.example.com.svc.cluster.local"),
        ["com.svc.cluster.local.", "example.com.svc.cluster.local."]
    );
    assert_eq!(
        points("_http._tcp.web.team-a.svc.cluster.local"),
        ["team-a.svc.cluster.local.", "web.team-a.svc.cluster.local."]
    );
    assert_eq!(
        points("x.team-a.pod.cluster.local"),
        ["team-a.pod.cluster.local."]
    );
    assert!(points("web.team-a.svc.cluster.local").len() == 1);
    assert!(points("team-a.svc.cluster.local").is_empty());
    assert!(points("ns.dns.cluster.local").is_empty());
    assert!(points("api.example.com").is_empty());
    let node = |n: &str| r.is_cut_node(&from_text(n).unwrap());
    assert!(node("com.svc.cluster.local"));
    assert!(node("example.com.svc.cluster.local"));
    assert!(node("team-a.pod.cluster.local"));
    assert!(!node("dns.cluster.local"));
    assert!(!node("_tcp.web.team-a.svc.cluster.local"));
    assert!(!node("svc.cluster.local"));
    assert!(!node("x.team-a.pod.cluster.local"));
}

#[test]
fn svc_names_name_their_namespace_when_the_api_is_watched() {
    let plan = |on: bool| SearchPlan {
        namespaces_from_api: on,
        autopath: false,
        ..SearchPlan::default()
    };
    let ns = |r: &ClusterRules, n: &str| {
        r.svc_namespace(&from_text(n).unwrap())
            .map(|l| String::from_utf8(l.to_vec()).unwrap())
    };
    let r = rules().with_search(plan(true));
    assert_eq!(
        ns(&r, "web.team-a.svc.cluster.local").as_deref(),
        Some("team-a")
    );
    assert_eq!(
        ns(&r, "_http._tcp.web.team-a.svc.cluster.local").as_deref(),
        Some("team-a")
    );
    assert_eq!(
        ns(&r, "team-a.svc.cluster.local").as_deref(),
        Some("team-a")
    );
    assert_eq!(ns(&r, "svc.cluster.local"), None);
    assert_eq!(ns(&r, "1-2-3-4.team-a.pod.cluster.local"), None);
    assert_eq!(ns(&r, "web.team-a.svc.example.com"), None);
    assert_eq!(
        ns(
            &rules().with_search(plan(false)),
            "web.team-a.svc.cluster.local"
        ),
        None
    );
}

#[test]
fn namespace_checks_and_first_expansions() {
    let r = rules().with_search(SearchPlan {
        namespace_check: true,
        speculate: true,
        search_domains: vec![],
        max_speculations: 8,
        namespaces_from_api: false,
        autopath: false,
    });
    let w = |n: &str| from_text(n).unwrap();
    let check = |n: &str| {
        let wire = w(n);
        r.namespace_to_check(&wire)
            .map(|at| crate::wire::name::to_text(&wire[at..]))
    };
    assert_eq!(
        check("api.example.com.svc.cluster.local").as_deref(),
        Some("com.svc.cluster.local.")
    );
    assert_eq!(
        check("db-0.db.team-a.svc.cluster.local").as_deref(),
        Some("team-a.svc.cluster.local.")
    );
    assert_eq!(check("web.team-a.svc.cluster.local"), None);
    assert_eq!(check("x.team-a.pod.cluster.local"), None);
    assert_eq!(check("api.example.com"), None);
    let first = |n: &str| r.first_expansion(&w(n)).map(|f| f.certain);
    assert_eq!(
        first("api.example.com.team-a.svc.cluster.local"),
        Some(true)
    );
    assert_eq!(first("web.other.team-a.svc.cluster.local"), Some(false));
    assert_eq!(first("_http._tcp.web.team-a.svc.cluster.local"), None);
    assert_eq!(first("web.team-a.svc.cluster.local"), None);
    assert_eq!(first("api.example.com.cluster.local"), None);
    let off = rules();
    assert_eq!(
        off.first_expansion(&w("api.example.com.ns.svc.cluster.local")),
        None
    );
    assert_eq!(
        off.namespace_to_check(&w("api.example.com.svc.cluster.local")),
        None
    );
}

#[test]
fn soa_learning_is_bounded_to_the_zone() {
    let r = rules();
    let w = |n: &str| from_text(n).unwrap();
    assert!(r.may_learn_soa(&w("x.cluster.local"), &w("cluster.local")));
    assert!(!r.may_learn_soa(&w("x.cluster.local"), &w("local")));
    assert!(!r.may_learn_soa(&w("x.cluster.local"), &w(".")));
    assert!(r.may_learn_soa(
        &w("a.b.c.d.internal.cloudapp.net"),
        &w("internal.cloudapp.net")
    ));
    assert!(!r.may_learn_soa(&w("a.b.c.d.internal.cloudapp.net"), &w("other.net")));
    assert!(!r.may_learn_soa(&w("api.example.com"), &w("com")));
}
