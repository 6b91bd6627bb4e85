//! Per-zone cache policy (`[zone.cache]`), the `round_robin` upstream
//! policy, and the kube-dns ConfigMap followed live, against real CoreDNS
//! upstreams and silent ones.
//!
//! Two zones with different policies in one nodens: serve-stale at once in
//! one and off in the other when the upstream dies; caching off in one
//! (every query reaches the upstream's query log) and on in the other;
//! failures cached in one zone and not in the other; prefetch in one zone
//! only. `round_robin` spreads queries over three upstreams exactly evenly,
//! as CoreDNS's `forward ... { policy round_robin }` does. A stub domain
//! written into the ConfigMap's directory is forwarded to its server within
//! the poll interval, a bad file keeps the running zones (and counts a
//! failed reload), and a removed stub domain goes back to the root zone.

use std::path::Path;
use std::time::Instant;

use support::*;

/// One CoreDNS serving `a.test.` and `b.test.`, each with the standard
/// records, on `net.upstream(0)`.
fn two_zone_upstream(net: &Net) -> CoreDns {
    CoreDns::start(
        net.upstream(0),
        &[
            ("a.test.", zone_file("a.test.", &test_records())),
            ("b.test.", zone_file("b.test.", &test_records())),
        ],
    )
}

/// `[[zone]]` for `name` forwarding to `upstreams`, with `[zone.cache]`
/// holding `cache` (TOML lines).
fn zone_with_cache(name: &str, upstreams: &[std::net::SocketAddr], cache: &str) -> String {
    let list: Vec<String> = upstreams.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[[zone]]\nname = \"{name}\"\nupstreams = [{}]\nupstream_timeout = \"500ms\"\n\n[zone.cache]\n{cache}\n",
        list.join(", ")
    )
}

#[test]
fn serve_stale_at_once_in_one_zone_and_off_in_the_other() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let mut core = two_zone_upstream(&net);
    let cfg = Cfg::new(&net)
        .query_timeout(secs(2))
        .stale_ttl(secs(30))
        .raw(&zone_with_cache(
            "a.test",
            &[core.addr],
            "stale_max_age = \"1h\"\nstale_answer_timeout = \"0s\"",
        ))
        .raw(&zone_with_cache(
            "b.test",
            &[core.addr],
            "stale_max_age = \"0s\"",
        ));
    let nodens = Nodens::start(&cfg);

    let t0 = Instant::now();
    for name in ["short.a.test.", "short.b.test."] {
        let r = udp_query(nodens.dns, &Q::new(name, Rt::A));
        assert_eq!(r.a(), vec![ipv4("192.0.2.2")], "{name}");
    }
    core.stop();
    sleep_until(t0, ms(3200)); // TTL 2: both expired

    let r = udp_query(nodens.dns, &Q::new("short.a.test.", Rt::A));
    assert_eq!(r.rcode(), rcode::NOERROR, "zone a serves stale");
    assert_eq!(r.a(), vec![ipv4("192.0.2.2")]);
    assert!(
        r.ttls().iter().all(|&t| t == 30),
        "stale TTLs {:?}",
        r.ttls()
    );
    assert!(
        r.elapsed < ms(400),
        "immediate: the stale answer does not wait for the upstream ({:?})",
        r.elapsed
    );

    let r = udp_query(nodens.dns, &Q::new("short.b.test.", Rt::A));
    assert_eq!(
        r.rcode(),
        rcode::SERVFAIL,
        "zone b has serve-stale off: its expired name is not served"
    );
    let labels = [("zones", "a.test.")];
    assert!(nodens.metric("coredns_cache_served_stale_total", &labels) >= 1.0);
    assert_eq!(
        nodens.metric("coredns_cache_served_stale_total", &[("zones", "b.test.")]),
        0.0
    );
}

#[test]
fn a_zone_with_caching_off_sends_every_query_upstream() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = two_zone_upstream(&net);
    let cfg = Cfg::new(&net)
        .raw(&zone_with_cache("a.test", &[core.addr], "enabled = false"))
        .raw(&zone_with_cache("b.test", &[core.addr], ""));
    let nodens = Nodens::start(&cfg);

    for _ in 0..5 {
        for name in ["www.a.test.", "nope.a.test.", "www.b.test.", "nope.b.test."] {
            let r = udp_query(nodens.dns, &Q::new(name, Rt::A));
            let want = if name.starts_with("www") {
                rcode::NOERROR
            } else {
                rcode::NXDOMAIN
            };
            assert_eq!(r.rcode(), want, "{name}");
        }
    }
    core.sync_log();
    assert_eq!(
        core.count_queries("www.a.test.", "A"),
        5,
        "caching off: each query upstream"
    );
    assert_eq!(
        core.count_queries("nope.a.test.", "A"),
        5,
        "denials are not cached either"
    );
    assert_eq!(core.count_queries("www.b.test.", "A"), 1, "zone b caches");
    assert_eq!(core.count_queries("nope.b.test.", "A"), 1);
}

#[test]
fn servfail_ttl_is_per_zone() {
    let net = Net::alloc();
    let silent_a = Silent::bind(net.silent(0));
    let silent_b = Silent::bind(net.silent(1));
    let cfg = Cfg::new(&net)
        .query_timeout(secs(1))
        .servfail_ttl(secs(30))
        .raw(&zone_with_cache("a.test", &[silent_a.addr], ""))
        .raw(&zone_with_cache(
            "b.test",
            &[silent_b.addr],
            "servfail_ttl = \"0s\"",
        ));
    let nodens = Nodens::start(&cfg);

    for name in ["x.a.test.", "x.b.test."] {
        for round in 0..3 {
            let r = udp_query(nodens.dns, &Q::new(name, Rt::A));
            assert_eq!(r.rcode(), rcode::SERVFAIL, "{name} round {round}");
        }
    }
    // Each question the upstream got was one try of one miss.
    let asked = |s: &Silent| {
        s.drain()
            .iter()
            .filter(|(_, q)| {
                question_of(q).is_some_and(|(n, _)| n.to_ascii_lowercase().starts_with("x."))
            })
            .count()
    };
    assert_eq!(asked(&silent_a), 1, "zone a caches the failure for 30 s");
    assert_eq!(asked(&silent_b), 3, "zone b caches no failure");
}

#[test]
fn prefetch_is_per_zone() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = two_zone_upstream(&net);
    let on = "prefetch_min_hits = 1\nprefetch_percent = 50";
    let cfg = Cfg::new(&net)
        .raw(&zone_with_cache("a.test", &[core.addr], on))
        .raw(&zone_with_cache("b.test", &[core.addr], ""));
    let nodens = Nodens::start(&cfg);

    // pf has TTL 8: past 4 s, half of it is left and a hit starts the
    // refresh in zone a; zone b has prefetch off (the harness's [cache]).
    let t0 = Instant::now();
    for name in ["pf.a.test.", "pf.b.test."] {
        assert_eq!(
            udp_query(nodens.dns, &Q::new(name, Rt::A)).rcode(),
            rcode::NOERROR
        );
    }
    sleep_until(t0, ms(5000));
    for name in ["pf.a.test.", "pf.b.test."] {
        assert_eq!(
            udp_query(nodens.dns, &Q::new(name, Rt::A)).rcode(),
            rcode::NOERROR
        );
    }
    core.wait_queries("pf.a.test.", "A", 2, secs(3));
    core.sync_log();
    assert_eq!(
        core.count_queries("pf.a.test.", "A"),
        2,
        "zone a refreshed once"
    );
    assert_eq!(
        core.count_queries("pf.b.test.", "A"),
        1,
        "zone b did not prefetch"
    );
}

/// Queries for `count` names never asked before under `zone`, one after
/// the other, each answered.
fn ask_distinct(nodens: &Nodens, zone: &str, count: usize) {
    for i in 0..count {
        let r = udp_query(nodens.dns, &Q::new(&format!("rr{i}.{zone}"), Rt::A));
        assert_eq!(r.rcode(), rcode::NXDOMAIN, "rr{i}.{zone}");
    }
}

/// How many of each CoreDNS's logged queries were for names under `prefix`.
fn spread(cores: &[CoreDns], prefix: &str) -> Vec<usize> {
    cores
        .iter()
        .map(|c| {
            c.sync_log();
            c.queries()
                .iter()
                .filter(|q| q.name.to_ascii_lowercase().starts_with(prefix))
                .count()
        })
        .collect()
}

#[test]
fn round_robin_spreads_queries_evenly_like_coredns() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let cores: Vec<CoreDns> = (0..3)
        .map(|k| CoreDns::test_zone(net.upstream(k), ""))
        .collect();
    let addrs: Vec<_> = cores.iter().map(|c| c.addr).collect();
    let nodens =
        Nodens::start(&Cfg::new(&net).zone(Zone::new("test.", &addrs).policy("round_robin")));
    ask_distinct(&nodens, "test.", 30);
    assert_eq!(spread(&cores, "rr"), [10, 10, 10], "nodens round_robin");

    // The reference: CoreDNS's forward with the same policy, the same way.
    let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let front = net.other(150, 5300);
    let directives = format!(
        "forward . {} {{\n    policy round_robin\n  }}",
        list.join(" ")
    );
    let reference = CoreDns::start_with_blocks(
        front,
        &[("ref.", zone_file("ref.", ""))],
        &[("test.", directives.as_str())],
    );
    for i in 0..30 {
        let r = udp_query(reference.addr, &Q::new(&format!("cr{i}.test."), Rt::A));
        assert_eq!(r.rcode(), rcode::NXDOMAIN);
    }
    assert_eq!(spread(&cores, "cr"), [10, 10, 10], "CoreDNS round_robin");
}

/// A ConfigMap volume as the kubelet writes it: the data in a timestamped
/// directory, `..data` pointing at it, each key a symlink through `..data`;
/// an update writes a new directory and swaps `..data` in one rename.
struct ConfigMapDir {
    dir: tempfile::TempDir,
    version: u32,
}

impl ConfigMapDir {
    fn new() -> ConfigMapDir {
        let mut d = ConfigMapDir {
            dir: tempfile::tempdir().unwrap(),
            version: 0,
        };
        d.write(&[]);
        for key in ["stubDomains", "upstreamNameservers"] {
            std::os::unix::fs::symlink(format!("..data/{key}"), d.path().join(key)).unwrap();
        }
        d
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A new version holding `files` (name, content); others absent.
    fn write(&mut self, files: &[(&str, &str)]) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        let data = self.path().join(&version);
        std::fs::create_dir(&data).unwrap();
        for (name, text) in files {
            std::fs::write(data.join(name), text).unwrap();
        }
        let tmp = self.path().join("..data_tmp");
        std::os::unix::fs::symlink(&version, &tmp).unwrap();
        std::fs::rename(&tmp, self.path().join("..data")).unwrap();
    }
}

#[test]
fn kube_dns_stub_domains_are_followed_live() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    // Both answer every name under acme.local., each with its own address.
    let root = CoreDns::start(
        net.upstream(0),
        &[(
            "acme.local.",
            zone_file("acme.local.", "* 300 IN A 192.0.2.100"),
        )],
    );
    let stub = CoreDns::start(
        net.upstream(1),
        &[(
            "acme.local.",
            zone_file("acme.local.", "* 300 IN A 192.0.2.200"),
        )],
    );
    let mut cm = ConfigMapDir::new();
    let cfg = Cfg::new(&net)
        .zone(Zone::new(".", &[root.addr]))
        .raw(&format!(
            "[kubernetes]\nkube_dns_config = \"{}\"\nkube_dns_config_interval = \"200ms\"\n",
            cm.path().display()
        ));
    let nodens = Nodens::start(&cfg);
    let mut n = 0;
    let mut answer = || {
        n += 1;
        udp_query(nodens.dns, &Q::new(&format!("h{n}.acme.local."), Rt::A)).a()
    };
    assert_eq!(answer(), vec![ipv4("192.0.2.100")], "no stub domain yet");

    let t = Instant::now();
    cm.write(&[(
        "stubDomains",
        &format!(r#"{{"acme.local": ["{}"]}}"#, stub.addr),
    )]);
    wait_until(secs(5), "the stub domain to be followed", || {
        (answer() == vec![ipv4("192.0.2.200")]).then_some(())
    });
    assert!(t.elapsed() < secs(3), "followed after {:?}", t.elapsed());
    // The new zones are published a moment before the reload is counted.
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "success")], 1.0);

    // A bad file: the running zones stay, the failed reload is counted once.
    cm.write(&[("stubDomains", r#"{"acme.local": ["#)]);
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "failure")], 1.0);
    std::thread::sleep(ms(600)); // three more polls of the same bad file
    assert_eq!(
        nodens.metric("nodens_config_reloads_total", &[("result", "failure")]),
        1.0,
        "one bad version, one failed reload"
    );
    assert_eq!(
        answer(),
        vec![ipv4("192.0.2.200")],
        "the last good zones serve"
    );

    // Removed: back to the root zone.
    cm.write(&[("stubDomains", "{}")]);
    wait_until(secs(5), "the stub domain to be dropped", || {
        (answer() == vec![ipv4("192.0.2.100")]).then_some(())
    });
}

#[test]
fn kube_dns_upstream_nameservers_replace_the_roots() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let first = CoreDns::test_zone(net.upstream(0), "");
    let second = CoreDns::test_zone(net.upstream(1), "");
    let mut cm = ConfigMapDir::new();
    cm.write(&[("upstreamNameservers", &format!(r#"["{}"]"#, second.addr))]);
    let cfg = Cfg::new(&net)
        .zone(Zone::new(".", &[first.addr]))
        .raw(&format!(
            "[kubernetes]\nkube_dns_config = \"{}\"\nkube_dns_config_interval = \"200ms\"\n",
            cm.path().display()
        ));
    let nodens = Nodens::start(&cfg);
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).rcode(),
        rcode::NOERROR
    );
    second.sync_log();
    first.sync_log();
    assert_eq!(second.count_queries("www.test.", "A"), 1);
    assert_eq!(first.count_queries("www.test.", "A"), 0);

    cm.write(&[]);
    let mut n = 0;
    wait_until(secs(5), "the root zone's own upstreams back", || {
        n += 1;
        let name = format!("n{n}.test.");
        udp_query(nodens.dns, &Q::new(&name, Rt::A));
        first.sync_log();
        (first.count_queries(&name, "A") == 1).then_some(())
    });
}

/// What others edit must not stop a start: a kube-dns ConfigMap that is no
/// JSON and a hosts file that is no hosts file, both written before nodens
/// starts. Before, each was a configuration error: nodens (and the
/// fail-open guard, which loads the same file) exited and the pod
/// crash-looped. Now nodens serves the file's own zones, says what it
/// skipped (log and metric), and follows both once they are fixed.
#[test]
fn a_bad_configmap_or_hosts_file_at_start_is_skipped_and_nodens_serves() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let root = CoreDns::start(
        net.upstream(0),
        &[(
            "acme.local.",
            zone_file("acme.local.", "* 300 IN A 192.0.2.100"),
        )],
    );
    let stub = CoreDns::start(
        net.upstream(1),
        &[(
            "acme.local.",
            zone_file("acme.local.", "* 300 IN A 192.0.2.200"),
        )],
    );
    let mut cm = ConfigMapDir::new();
    cm.write(&[("stubDomains", r#"{"acme.local": ["#)]);
    let hosts = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(hosts.path(), "not-an-address www.hosts.example\n").unwrap();
    let cfg = Cfg::new(&net)
        .log_level("info")
        .zone(Zone::new(".", &[root.addr]))
        .raw(&format!(
            "[kubernetes]\nkube_dns_config = \"{}\"\nkube_dns_config_interval = \"200ms\"\n",
            cm.path().display()
        ));
    let toml = cfg.to_toml().replacen(
        "[[zone]]\n",
        &format!(
            "[[zone]]\nhosts = {{ files = [\"{}\"], zones = [\"hosts.example\"], reload = \"200ms\" }}\n",
            hosts.path().display()
        ),
        1,
    );
    let mut nodens = Nodens::launch(&toml, &[]);
    nodens.wait_ready();
    let mut n = 0;
    let mut answer = || {
        n += 1;
        udp_query(nodens.dns, &Q::new(&format!("h{n}.acme.local."), Rt::A)).a()
    };
    assert_eq!(
        answer(),
        vec![ipv4("192.0.2.100")],
        "the file's own zones serve"
    );
    assert_eq!(
        nodens.metric("nodens_config_inputs_skipped_total", &[]),
        2.0
    );
    let lines = nodens.proc.lines().join("\n");
    assert!(
        lines.contains("kube_dns_config") && lines.contains("skipped at start"),
        "{lines}"
    );
    assert!(
        lines.contains(&hosts.path().display().to_string()),
        "{lines}"
    );
    // Fixed: the hosts file is read again (its own reload), and the
    // ConfigMap's change reloads the configuration (strict, as every
    // reload: it would fail, keeping the running zones, while the hosts
    // file was still bad).
    std::fs::write(hosts.path(), "192.0.2.7 www.hosts.example\n").unwrap();
    wait_until(secs(10), "the fixed hosts file read", || {
        let r = udp_query(nodens.dns, &Q::new("www.hosts.example.", Rt::A));
        (r.a() == vec![ipv4("192.0.2.7")]).then_some(())
    });
    cm.write(&[(
        "stubDomains",
        &format!(r#"{{"acme.local": ["{}"]}}"#, stub.addr),
    )]);
    wait_until(secs(5), "the fixed ConfigMap followed", || {
        (answer() == vec![ipv4("192.0.2.200")]).then_some(())
    });
    nodens.assert_alive();
}
