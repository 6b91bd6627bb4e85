//! The local-answer stage against a real CoreDNS serving a Kubernetes-shaped
//! `cluster.local` (its `file` plugin; tests/integration/cluster_schema.rs pins what the
//! `kubernetes` plugin itself answers): names the schema rules out are
//! NXDOMAIN without an upstream query once the zone's SOA is known, names
//! below a denied namespace or Service are cut (RFC 8020), and every answer
//! a client sees is the one it would see without these features.

use std::time::{Duration, Instant};

use support::*;

/// `cluster.local` as the `kubernetes` plugin would serve it for a few
/// objects, plus a custom record that the schema does not allow
/// (`api.legacy`, as a `hosts` or `rewrite` block would add).
fn cluster_zone() -> String {
    zone_file(
        "cluster.local.",
        "web.team-a.svc 5 IN A 10.0.0.10\n\
         _http._tcp.web.team-a.svc 5 IN SRV 0 100 80 web.team-a.svc.cluster.local.\n\
         db-0.db.team-a.svc 5 IN A 10.1.0.5\n\
         10-1-0-6.db.team-a.svc 5 IN A 10.1.0.6\n\
         10-1-0-9.team-a.pod 5 IN A 10.1.0.9\n\
         kubernetes.default.svc 5 IN A 10.0.0.1\n\
         dns-version 28800 IN TXT \"1.1.0\"\n\
         ns.dns 5 IN A 10.0.0.10\n\
         api.legacy 5 IN A 10.0.0.99\n",
    )
}

/// An AKS-style cloud zone: `<vm>.<vnet-id>.<region>.internal.cloudapp.net`.
fn cloud_zone() -> String {
    zone_file("internal.cloudapp.net.", "vm1.abcd.bx 60 IN A 10.240.0.4\n")
}

const CLOUD_SUFFIX: &str =
    "[[cluster.cloud_suffix]]\nsuffix = \"internal.cloudapp.net\"\nmax_labels = 3\n";

fn upstream(net: &Net) -> CoreDns {
    CoreDns::start(
        net.upstream(0),
        &[
            ("cluster.local.", cluster_zone()),
            ("internal.cloudapp.net.", cloud_zone()),
        ],
    )
}

/// nodens forwarding both zones to `core`, with `cluster` as its
/// `[cluster]` text.
fn nodens_with(net: &Net, core: &CoreDns, cluster: &str) -> Nodens {
    Nodens::start(
        &Cfg::new(net)
            .zone(Zone::new("cluster.local.", &[core.addr]))
            .zone(Zone::new("internal.cloudapp.net.", &[core.addr]))
            .raw(cluster),
    )
}

fn local_nxdomains(nodens: &Nodens, rule: &str) -> f64 {
    nodens.metric("nodens_search_local_nxdomain_total", &[("rule", rule)])
}

/// The SOA of a negative answer: owner and TTL.
fn soa_of(reply: &Reply) -> (String, u32) {
    let soa = reply
        .msg
        .name_servers()
        .iter()
        .find(|r| r.record_type() == Rt::SOA)
        .expect("an SOA in the authority section");
    (soa.name().to_string(), soa.ttl())
}

#[test]
fn impossible_names_are_answered_locally_once_the_soa_is_known() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = upstream(&net);
    let nodens = nodens_with(&net, &core, &format!("[cluster]\n{CLOUD_SUFFIX}"));

    // At start nodens asks the cluster DNS for one name its rules rule out
    // and learns the zone's SOA from the NXDOMAIN: from the first query on,
    // impossible names are answered locally.
    core.wait_queries("nodens-soa-probe.cluster.local.", "A", 1, secs(5));
    // The probe's answer may still be on its way when the log shows it: a
    // query before it is forwarded (and counted as a rule without SOA).
    wait_until(secs(5), "the probe's SOA learned", || {
        let r = udp_query(nodens.dns, &Q::new("api.example.com.cluster.local.", Rt::A));
        (local_nxdomains(&nodens, "zone_child") == 1.0).then_some(r)
    });
    let without_soa = nodens.metric("nodens_search_rule_without_soa_total", &[]);

    let junk = [
        ("api.example.org.cluster.local.", Rt::AAAA, "zone_child"),
        ("x.dns-version.cluster.local.", Rt::A, "reserved_name"),
        (
            "api.example.com.team-a.svc.cluster.local.",
            Rt::A,
            "svc_port_shape",
        ),
        (
            "api.example.com.team-a.svc.cluster.local.",
            Rt::AAAA,
            "svc_port_shape",
        ),
        ("a.b.c.d.e.svc.cluster.local.", Rt::A, "too_many_labels"),
        ("a.b.c.d.e.pod.cluster.local.", Rt::A, "too_many_labels"),
    ];
    for (name, t, rule) in junk {
        let before = local_nxdomains(&nodens, rule);
        let reply = udp_query(nodens.dns, &Q::new(name, t));
        assert_eq!(reply.rcode(), rcode::NXDOMAIN, "{name} {t}");
        assert!(reply.msg.answers().is_empty());
        let (owner, ttl) = soa_of(&reply);
        assert_eq!(owner, "cluster.local.", "{name}");
        assert!(
            ttl <= 3,
            "{name}: negative TTL {ttl}, the SOA's MINIMUM is 3"
        );
        assert_eq!(
            local_nxdomains(&nodens, rule),
            before + 1.0,
            "{name} counted under {rule}"
        );
    }
    core.sync_log();
    for (name, t, _) in junk {
        assert_eq!(
            core.count_queries(name, &t.to_string()),
            0,
            "{name} {t} reached upstream"
        );
    }
    assert_eq!(
        nodens.metric("nodens_search_rule_without_soa_total", &[]),
        without_soa,
        "a rule fired without an SOA once it was learned"
    );

    // A cloud suffix learns its own zone's SOA the same way.
    let first = udp_query(
        nodens.dns,
        &Q::new("api.example.com.abcd.bx.internal.cloudapp.net.", Rt::A),
    );
    assert_eq!(first.rcode(), rcode::NXDOMAIN);
    let reply = udp_query(
        nodens.dns,
        &Q::new("api.example.net.abcd.bx.internal.cloudapp.net.", Rt::A),
    );
    assert_eq!(reply.rcode(), rcode::NXDOMAIN);
    assert_eq!(soa_of(&reply).0, "internal.cloudapp.net.");
    assert_eq!(local_nxdomains(&nodens, "cloud_suffix"), 1.0);
    let vm = udp_query(
        nodens.dns,
        &Q::new("vm1.abcd.bx.internal.cloudapp.net.", Rt::A),
    );
    assert_eq!(vm.a(), [ipv4("10.240.0.4")]);
    core.sync_log();
    assert_eq!(
        core.count_queries("api.example.net.abcd.bx.internal.cloudapp.net.", "A"),
        0
    );
}

/// Names a pod's resolver sends, valid and junk, each asked of CoreDNS
/// directly, of nodens with the local answers, and of nodens without them.
const NAMES: &[(&str, Rt)] = &[
    ("cluster.local.", Rt::SOA),
    ("svc.cluster.local.", Rt::A),
    ("pod.cluster.local.", Rt::A),
    ("team-a.svc.cluster.local.", Rt::A),
    ("web.team-a.svc.cluster.local.", Rt::A),
    ("web.team-a.svc.cluster.local.", Rt::AAAA),
    ("_http._tcp.web.team-a.svc.cluster.local.", Rt::SRV),
    ("_tcp.web.team-a.svc.cluster.local.", Rt::SRV),
    ("db-0.db.team-a.svc.cluster.local.", Rt::A),
    ("10-1-0-6.db.team-a.svc.cluster.local.", Rt::A),
    ("10-1-0-9.team-a.pod.cluster.local.", Rt::A),
    ("dns-version.cluster.local.", Rt::TXT),
    ("ns.dns.cluster.local.", Rt::A),
    ("kubernetes.default.svc.cluster.local.", Rt::A),
    ("api.example.com.team-a.svc.cluster.local.", Rt::A),
    ("api.example.com.team-a.svc.cluster.local.", Rt::AAAA),
    ("api.example.com.svc.cluster.local.", Rt::A),
    ("api.example.com.svc.cluster.local.", Rt::AAAA),
    ("api.example.com.cluster.local.", Rt::A),
    ("api.example.com.cluster.local.", Rt::AAAA),
    ("com.svc.cluster.local.", Rt::A),
    ("www.example.com.svc.cluster.local.", Rt::A),
    ("a.b.c.d.e.svc.cluster.local.", Rt::A),
    ("x.dns.cluster.local.", Rt::A),
    ("vm1.abcd.bx.internal.cloudapp.net.", Rt::A),
    ("api.example.com.abcd.bx.internal.cloudapp.net.", Rt::A),
    ("api.example.com.abcd.bx.internal.cloudapp.net.", Rt::AAAA),
];

#[test]
fn every_answer_matches_the_cluster_dns_name_by_name() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = upstream(&net);
    let with = nodens_with(&net, &core, &format!("[cluster]\n{CLOUD_SUFFIX}"));
    let net_b = Net::alloc();
    let without = nodens_with(
        &net_b,
        &core,
        &format!("[cluster]\nlocal_nxdomain = false\nnxdomain_cut = false\n{CLOUD_SUFFIX}"),
    );
    // Twice over: the second round is answered locally where it can be.
    for round in 0..2 {
        for &(name, t) in NAMES {
            let q = Q::new(name, t);
            let direct = udp_query(core.addr, &q);
            for (which, server) in [("with", with.dns), ("without", without.dns)] {
                let got = udp_query(server, &q);
                let at = format!("round {round}, {name} {t}, nodens {which} local answers");
                assert_eq!(got.rcode(), direct.rcode(), "{at}: rcode");
                assert_eq!(got.answer_set(), direct.answer_set(), "{at}: answers");
                assert_eq!(
                    got.authority_set(),
                    direct.authority_set(),
                    "{at}: authority"
                );
                assert_eq!(
                    got.question_bytes(),
                    direct.question_bytes(),
                    "{at}: question"
                );
            }
        }
    }
    let local: f64 = [
        "zone_child",
        "reserved_name",
        "too_many_labels",
        "svc_port_shape",
        "cloud_suffix",
    ]
    .iter()
    .map(|r| local_nxdomains(&with, r))
    .sum();
    let cuts = with.metric("nodens_search_nxdomain_cut_total", &[]);
    assert!(
        local + cuts >= 8.0,
        "{local} local NXDOMAINs and {cuts} cuts: the rules did not fire"
    );
    assert_eq!(local_nxdomains(&without, "zone_child"), 0.0);
}

#[test]
fn a_denied_namespace_or_service_denies_the_names_below_it() {
    needs!(Need::CoreDns);
    let (net, core) = {
        let net = Net::alloc();
        let core = upstream(&net);
        (net, core)
    };
    let nodens = nodens_with(&net, &core, "[cluster]\n");
    let start = Instant::now();

    // CoreDNS answers NXDOMAIN for a namespace that does not exist...
    let ns = udp_query(nodens.dns, &Q::new("com.svc.cluster.local.", Rt::A));
    assert_eq!(ns.rcode(), rcode::NXDOMAIN);
    // ... and every name below it is settled by that answer.
    for t in [Rt::A, Rt::AAAA] {
        let r = udp_query(nodens.dns, &Q::new("api.example.com.svc.cluster.local.", t));
        assert_eq!(r.rcode(), rcode::NXDOMAIN);
        assert_eq!(soa_of(&r).0, "cluster.local.");
    }
    assert_eq!(nodens.metric("nodens_search_nxdomain_cut_total", &[]), 2.0);

    // A Service that does not exist cuts its SRV and endpoint names.
    let svc = udp_query(nodens.dns, &Q::new("gone.team-a.svc.cluster.local.", Rt::A));
    assert_eq!(svc.rcode(), rcode::NXDOMAIN);
    let srv = udp_query(
        nodens.dns,
        &Q::new("_http._tcp.gone.team-a.svc.cluster.local.", Rt::SRV),
    );
    assert_eq!(srv.rcode(), rcode::NXDOMAIN);
    assert_eq!(nodens.metric("nodens_search_nxdomain_cut_total", &[]), 3.0);

    // A namespace that exists (an empty non-terminal: NODATA) cuts nothing.
    let ent = udp_query(nodens.dns, &Q::new("team-a.svc.cluster.local.", Rt::A));
    assert_eq!(ent.rcode(), rcode::NOERROR);
    let below = udp_query(nodens.dns, &Q::new("nope.team-a.svc.cluster.local.", Rt::A));
    assert_eq!(below.rcode(), rcode::NXDOMAIN);
    let web = udp_query(nodens.dns, &Q::new("web.team-a.svc.cluster.local.", Rt::A));
    assert_eq!(web.a(), [ipv4("10.0.0.10")]);

    core.sync_log();
    assert_eq!(
        core.count_queries("api.example.com.svc.cluster.local.", "A"),
        0
    );
    assert_eq!(
        core.count_queries("api.example.com.svc.cluster.local.", "AAAA"),
        0
    );
    assert_eq!(
        core.count_queries("_http._tcp.gone.team-a.svc.cluster.local.", "SRV"),
        0
    );
    assert_eq!(core.count_queries("nope.team-a.svc.cluster.local.", "A"), 1);
    assert_eq!(nodens.metric("nodens_search_nxdomain_cut_total", &[]), 3.0);

    // The cut lasts as long as the denial would be cached (MINIMUM 3 s);
    // then the namespace node is asked again before the name itself, when
    // the name is a lookup's second expansion (its first one came before).
    sleep_until(start, Duration::from_millis(3300));
    let first = udp_query(
        nodens.dns,
        &Q::new("www.example.com.team-a.svc.cluster.local.", Rt::A),
    );
    assert_eq!(first.rcode(), rcode::NXDOMAIN);
    let later = udp_query(
        nodens.dns,
        &Q::new("www.example.com.svc.cluster.local.", Rt::A),
    );
    assert_eq!(later.rcode(), rcode::NXDOMAIN);
    core.wait_queries("com.svc.cluster.local.", "A", 2, secs(5));
    core.sync_log();
    assert_eq!(
        core.count_queries("www.example.com.svc.cluster.local.", "A"),
        0
    );
    assert_eq!(
        nodens.metric(
            "nodens_search_namespace_checks_total",
            &[("result", "denied")]
        ),
        1.0
    );
}

/// `example.com` for the final name of a lookup.
/// The probes a nodens with `abcd.bx.internal.cloudapp.net` as a search
/// domain sends at start (src/serve/prime.rs), for the SOAs of the cluster
/// domain and of the cloud zone; waits for both (each once more per call).
fn wait_primed(core: &CoreDns) {
    for probe in [
        "nodens-soa-probe.cluster.local.",
        "nodens-soa-probe.x.abcd.bx.internal.cloudapp.net.",
    ] {
        let seen = core.count_queries(probe, "A");
        core.wait_queries(probe, "A", seen.max(1), secs(5));
    }
}

fn external_zone() -> String {
    zone_file(
        "example.com.",
        "api 300 IN A 192.0.2.80\napi 300 IN AAAA 2001:db8::80\n",
    )
}

/// A pod in namespace team-a looks up `api.example.com` the way glibc does
/// with `search team-a.svc.cluster.local svc.cluster.local cluster.local
/// abcd.bx.internal.cloudapp.net` and `ndots:5`: A and AAAA of each
/// expansion in turn.
fn pod_lookup(nodens: &Nodens) -> Vec<(Reply, Reply)> {
    let expansions = [
        "api.example.com.team-a.svc.cluster.local.",
        "api.example.com.svc.cluster.local.",
        "api.example.com.cluster.local.",
        "api.example.com.abcd.bx.internal.cloudapp.net.",
        "api.example.com.",
    ];
    expansions
        .iter()
        .map(|name| {
            (
                udp_query(nodens.dns, &Q::new(name, Rt::A)),
                udp_query(nodens.dns, &Q::new(name, Rt::AAAA)),
            )
        })
        .collect()
}

#[test]
fn the_first_expansion_resolves_the_later_ones_ahead() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::start(
        net.upstream(0),
        &[
            ("cluster.local.", cluster_zone()),
            ("internal.cloudapp.net.", cloud_zone()),
            ("example.com.", external_zone()),
        ],
    );
    let cluster =
        format!("[cluster]\nsearch_domains = [\"abcd.bx.internal.cloudapp.net\"]\n{CLOUD_SUFFIX}");
    let start = |net: &Net, extra: &str| {
        // `extra` goes into [cluster], before the cloud suffix table.
        let text = cluster.replacen("[cluster]\n", &format!("[cluster]\n{extra}"), 1);
        Nodens::start(
            &Cfg::new(net)
                .zone(Zone::new("cluster.local.", &[core.addr]))
                .zone(Zone::new("internal.cloudapp.net.", &[core.addr]))
                .zone(Zone::new("example.com.", &[core.addr]))
                .raw(&text),
        )
    };
    // A nodens just started: it learns the zones' SOAs by itself, one
    // probe a zone, and the first lookup pays no more than any other.
    let nodens = start(&net, "");
    wait_primed(&core);
    core.sync_log();
    let before = core.queries().len();

    // The first expansion: answered locally, and the rest worked ahead.
    let first = udp_query(
        nodens.dns,
        &Q::new("api.example.com.team-a.svc.cluster.local.", Rt::A),
    );
    assert_eq!(first.rcode(), rcode::NXDOMAIN);
    core.wait_queries("api.example.com.", "A", 1, secs(5));
    let replies = pod_lookup(&nodens);
    let (a, aaaa) = &replies[4];
    assert_eq!(a.a(), [ipv4("192.0.2.80")]);
    assert_eq!(aaaa.rcode(), rcode::NOERROR);
    for (name_a, name_aaaa) in &replies[..4] {
        assert_eq!(name_a.rcode(), rcode::NXDOMAIN);
        assert_eq!(name_aaaa.rcode(), rcode::NXDOMAIN);
    }
    core.sync_log();
    let asked: Vec<String> = core.queries()[before..]
        .iter()
        .filter(|q| !q.name.starts_with("_sync"))
        .map(|q| format!("{} {}", q.name, q.qtype))
        .collect();
    // The namespace `com` once, the final name's A and AAAA: nothing else.
    // The AAAA may be asked twice: the pod's AAAA expansions start a
    // speculation of it, and the pod's own AAAA for the final name can miss
    // in the microseconds between that fetch's end and its answer's store
    // (miss.rs, `Start::JustLookedUp`: a redundant query accepted there).
    let mut distinct = asked.clone();
    distinct.sort();
    distinct.dedup();
    let extra: Vec<&String> = asked
        .iter()
        .enumerate()
        .filter(|(i, q)| asked[..*i].contains(q))
        .map(|(_, q)| q)
        .collect();
    assert!(
        distinct.len() <= 3
            && extra.iter().all(|q| *q == "api.example.com. AAAA")
            && extra.len() <= 1,
        "upstream queries for one lookup: {asked:?}"
    );
    assert!(
        asked.contains(&"com.svc.cluster.local. A".to_string()),
        "{asked:?}"
    );
    assert_eq!(core.count_queries("api.example.com.", "A"), 1);
    assert!(nodens.metric("nodens_search_speculation_sent_total", &[]) >= 1.0);
    assert!(nodens.metric("nodens_search_speculation_used_total", &[]) >= 1.0);

    // Without speculation the client gets the same answers, one by one.
    let net_b = Net::alloc();
    let plain = start(&net_b, "speculate = false\n");
    wait_primed(&core);
    let without = pod_lookup(&plain);
    for ((a1, b1), (a2, b2)) in replies.iter().zip(&without) {
        for (x, y) in [(a1, a2), (b1, b2)] {
            assert_eq!(x.rcode(), y.rcode());
            assert_eq!(x.answer_set(), y.answer_set());
            assert_eq!(x.authority_set(), y.authority_set());
        }
    }
    assert_eq!(
        plain.metric("nodens_search_speculation_sent_total", &[]),
        0.0
    );
}

#[test]
fn exceptions_and_switched_off_rules_forward() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = upstream(&net);
    // Without an exception, a custom record outside the schema is denied
    // once the SOA is known: what `exceptions` is for.
    let strict = nodens_with(&net, &core, "[cluster]\n");
    udp_query(strict.dns, &Q::new("nothing.here.cluster.local.", Rt::A));
    let denied = udp_query(strict.dns, &Q::new("api.legacy.cluster.local.", Rt::A));
    assert_eq!(denied.rcode(), rcode::NXDOMAIN);
    drop(strict);

    let net_b = Net::alloc();
    let lenient = nodens_with(
        &net_b,
        &core,
        "[cluster]\nexceptions = [\"legacy.cluster.local\"]\ndisable_rules = [\"svc_port_shape\"]\n",
    );
    udp_query(lenient.dns, &Q::new("nothing.here.cluster.local.", Rt::A));
    let kept = udp_query(lenient.dns, &Q::new("api.legacy.cluster.local.", Rt::A));
    assert_eq!(kept.a(), [ipv4("10.0.0.99")]);
    let off = udp_query(
        lenient.dns,
        &Q::new("a.b.c.team-a.svc.cluster.local.", Rt::A),
    );
    assert_eq!(off.rcode(), rcode::NXDOMAIN);
    core.wait_queries("a.b.c.team-a.svc.cluster.local.", "A", 1, secs(5));
    assert_eq!(local_nxdomains(&lenient, "svc_port_shape"), 0.0);
}

#[test]
fn a_bad_cluster_section_is_a_config_error_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for (text, line, words) in [
        (
            "[cluster]\ndisable_rules = [\"no_such_rule\"]\n",
            2,
            "unknown variant",
        ),
        ("[cluster]\ndomain = \".\"\n", 2, "root"),
        (
            "[cluster]\n[[cluster.cloud_suffix]]\nsuffix = \"a*b.internal\"\nmax_labels = 2\n",
            3,
            "not a suffix",
        ),
        (
            "[cluster]\n[[cluster.cloud_suffix]]\nsuffix = \"google.internal\"\nmax_labels = 0\n",
            4,
            "at least 1",
        ),
    ] {
        let path = dir.path().join("nodens.toml");
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(nodens_bin())
            .arg("check-config")
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}: {err}");
        assert!(
            err.contains(&format!("nodens.toml:{line}:")),
            "{text}: {err}"
        );
        assert!(err.contains(words), "{text}: {err}");
    }
}

#[test]
fn speculation_stays_within_its_budget() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let erratic = "erratic {\n    delay 1 500ms\n  }";
    let core = CoreDns::start_with_blocks(
        net.upstream(0),
        &[("cluster.local.", cluster_zone())],
        &[("delay.test.", erratic)],
    );
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .zone(Zone::new("cluster.local.", &[core.addr]))
            .zone(Zone::new("delay.test.", &[core.addr]))
            .raw("[cluster]\nmax_speculations = 2\n"),
    );
    udp_query(nodens.dns, &Q::new("x.y.cluster.local.", Rt::A));
    // Ten first expansions at once: each wants its final name `nK.delay.test.`
    // resolved ahead, which takes the upstream 500 ms.
    for k in 0..10 {
        let name = format!("n{k}.delay.test.team-a.svc.cluster.local.");
        let reply = udp_query(nodens.dns, &Q::new(&name, Rt::A));
        assert_eq!(reply.rcode(), rcode::NXDOMAIN, "{name}");
    }
    wait_until(secs(5), "speculations skipped", || {
        (nodens.metric("nodens_search_speculation_skipped_total", &[]) >= 5.0).then_some(())
    });
    core.sync_log();
    let finals = core
        .queries()
        .iter()
        .filter(|q| q.name.ends_with(".delay.test.") && q.name.starts_with('n'))
        .count();
    assert!(
        finals <= 2,
        "{finals} speculative queries in flight at once, budget 2"
    );
    assert!(nodens.metric("nodens_search_speculation_sent_total", &[]) <= 2.0);
}

#[test]
fn an_in_cluster_short_name_is_not_worked_past_its_namespace() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::start_with_blocks(
        net.upstream(0),
        &[("cluster.local.", cluster_zone())],
        &[(".", "whoami")],
    );
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .zone(Zone::new("cluster.local.", &[core.addr]))
            .zone(Zone::new(".", &[core.addr]))
            .raw("[cluster]\n"),
    );
    // The node has seen namespace team-a (any answer under it shows it).
    let web = udp_query(nodens.dns, &Q::new("web.team-a.svc.cluster.local.", Rt::A));
    assert_eq!(web.a(), [ipv4("10.0.0.10")]);
    // A pod in `default` looks up `web.team-a`: its first expansion.
    let first = udp_query(
        nodens.dns,
        &Q::new("web.team-a.default.svc.cluster.local.", Rt::A),
    );
    assert_eq!(first.rcode(), rcode::NXDOMAIN);
    // An external name's first expansion, for comparison: worked to the end.
    let ext = udp_query(
        nodens.dns,
        &Q::new("api.example.com.default.svc.cluster.local.", Rt::A),
    );
    assert_eq!(ext.rcode(), rcode::NXDOMAIN);
    core.wait_queries("api.example.com.", "A", 1, secs(5));
    core.sync_log();
    assert_eq!(
        core.count_queries("web.team-a.", "A"),
        0,
        "an in-cluster name went to the external upstreams"
    );
}

/// The walk a glibc pod in namespace team-a makes for `name` with a GKE
/// node's search list and `ndots:5`, A and AAAA of each expansion in turn,
/// until one is not NXDOMAIN; returns the expansions asked.
fn gke_walk(nodens: &Nodens, name: &str) -> Vec<String> {
    let suffixes = [
        "team-a.svc.cluster.local.",
        "svc.cluster.local.",
        "cluster.local.",
        "us-central1-a.c.proj.internal.",
        "c.proj.internal.",
        "google.internal.",
        "",
    ];
    let mut asked = Vec::new();
    for suffix in suffixes {
        let expansion = if suffix.is_empty() {
            format!("{name}.")
        } else {
            format!("{name}.{suffix}")
        };
        let a = udp_query(nodens.dns, &Q::new(&expansion, Rt::A));
        let aaaa = udp_query(nodens.dns, &Q::new(&expansion, Rt::AAAA));
        asked.push(expansion);
        if a.rcode() != rcode::NXDOMAIN || aaaa.rcode() != rcode::NXDOMAIN {
            break;
        }
    }
    asked
}

/// Speculation sends no cluster name to the upstreams of other zones, and
/// an in-cluster lookup costs the cluster DNS no more than the pod's own
/// walk (`kubernetes.default` cost 9 upstream queries against the walk's
/// 4, two of them to the external resolver). An external name is still
/// worked ahead: its final name is asked before the pod reaches it.
#[test]
fn speculation_sends_no_cluster_name_outside_the_cluster() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let cluster = CoreDns::start(net.upstream(0), &[("cluster.local.", cluster_zone())]);
    // The resolver outside: `com` with one name and the cloud's `internal`,
    // NXDOMAIN for the rest of them.
    let external = CoreDns::start(
        net.upstream(1),
        &[
            (
                "com.",
                zone_file("com.", "api.example 300 IN A 192.0.2.80\n"),
            ),
            ("internal.", zone_file("internal.", "")),
        ],
    );
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .zone(Zone::new("cluster.local.", &[cluster.addr]))
            .zone(Zone::new(".", &[external.addr]))
            .raw(
                "[cluster]\nsearch_domains = [\"us-central1-a.c.proj.internal\", \
                 \"c.proj.internal\", \"google.internal\"]\n",
            ),
    );
    cluster.wait_queries("nodens-soa-probe.cluster.local.", "A", 1, secs(5));
    // In-cluster names: each walk ends in the cluster.
    let in_cluster = [
        (
            "kubernetes.default",
            "kubernetes.default.svc.cluster.local.",
        ),
        ("db-0.db", "db-0.db.team-a.svc.cluster.local."),
        ("web.team-a", "web.team-a.svc.cluster.local."),
    ];
    let walks: Vec<Vec<String>> = in_cluster
        .iter()
        .map(|(name, ends_at)| {
            let walk = gke_walk(&nodens, name);
            assert_eq!(walk.last().map(String::as_str), Some(*ends_at), "{name}");
            walk
        })
        .collect();
    // An external name, after them: worked ahead to its final name, which
    // the pod then finds answered. Its walk takes round trips in which any
    // speculation the in-cluster walks started has long been sent.
    let walk = gke_walk(&nodens, "api.example.com");
    assert_eq!(walk.last().map(String::as_str), Some("api.example.com."));
    assert_eq!(external.count_queries("api.example.com.", "A"), 1);
    assert!(nodens.metric("nodens_search_speculation_sent_total", &[]) >= 1.0);
    external.sync_log();
    cluster.sync_log();
    let leaked: Vec<String> = external
        .queries()
        .iter()
        .filter(|q| {
            in_cluster
                .iter()
                .any(|(n, _)| q.name.starts_with(&format!("{n}.")))
        })
        .map(|q| format!("{} {}", q.name, q.qtype))
        .collect();
    assert!(leaked.is_empty(), "cluster names sent outside: {leaked:?}");
    // The cluster DNS saw each in-cluster walk's own queries (A and AAAA of
    // each expansion) and no more.
    for ((name, _), walk) in in_cluster.iter().zip(&walks) {
        let asked: Vec<String> = cluster
            .queries()
            .iter()
            .filter(|q| q.name.starts_with(&format!("{name}.")))
            .map(|q| format!("{} {}", q.name, q.qtype))
            .collect();
        assert!(
            asked.len() <= 2 * walk.len(),
            "{name}: the cluster DNS saw {asked:?} for a walk of {walk:?}"
        );
    }
}
