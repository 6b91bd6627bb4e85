//! AAAA only where a pod can use it (`[[zone]] no_aaaa_for_ipv4_pods`),
//! against a real kube-apiserver (the node's pods and their `podIPs`), the
//! `kubernetes` plugin of CoreDNS as the cluster DNS and CoreDNS serving
//! `example.com` outside, all in a network namespace:
//!
//! - a pod with only an IPv4 address gets NODATA with the zone's SOA for
//!   a name that exists (never NXDOMAIN), the A's own NXDOMAIN for one
//!   that does not, and no AAAA question reaches an upstream for it;
//! - a dual-stack pod, an unknown client, and every client of a nodens
//!   without the setting get the AAAA records;
//! - glibc, musl and Go, in the IPv4-only pod, look the name up and get its
//!   IPv4 address only;
//! - with autopath on as well, the pod's AAAA of a first expansion is
//!   answered with the CNAME to the walk's end and NODATA there, the walk
//!   having asked the names' A only.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use support::*;

const NODE: &str = "node-1";
const EXTERNAL: &str = "10.53.0.2";
const IPV4_POD: &str = "127.0.0.31";
const DUAL_POD: &str = "127.0.0.32";
const DUAL_POD_V6: &str = "fd00:244::32";
const UNKNOWN: &str = "127.0.0.33";
/// The resolver clients' pod (IPv4-only to the API), in a namespace of its own.
const CLIENT_POD: &str = "10.251.0.5";
const NODE_SIDE: &str = "10.251.0.1";

const OBJECTS: &str = "\
apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\n\
apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: team-a}\n\
spec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 80}]}\n";

fn external_zones() -> Vec<(&'static str, String)> {
    vec![(
        "example.com.",
        zone_file(
            "example.com.",
            "api 60 IN A 192.0.2.10\napi 60 IN AAAA 2001:db8::10\n\
             cold 60 IN A 192.0.2.12\ncold 60 IN AAAA 2001:db8::12\n\
             cold2 60 IN A 192.0.2.13\ncold2 60 IN AAAA 2001:db8::13\n\
             v6only 60 IN AAAA 2001:db8::11\n",
        ),
    )]
}

struct Lab {
    /// With `no_aaaa_for_ipv4_pods` on both zones.
    nodens: Nodens,
    /// The same without it.
    plain: Nodens,
    ns: Netns,
    pod: PodNet,
    _kube: Kube,
    core: KubeDns,
    external: CoreDns,
}

/// With `on`, the AAAA filter and autopath; without, neither.
fn config(net: &Net, kube: &Kube, core: SocketAddr, on: bool, listen: &[SocketAddr]) -> String {
    let mut listen = listen.to_vec();
    listen.insert(0, net.nodens());
    let external = SocketAddr::new(EXTERNAL.parse().unwrap(), 53);
    let autopath = if on {
        "[cluster]\nautopath = true\n\n"
    } else {
        ""
    };
    Cfg::new(net)
        .listen(&listen)
        .zone(Zone::new("cluster.local.", &[core]).no_aaaa_for_ipv4_pods(on))
        .zone(Zone::new(".", &[external]).no_aaaa_for_ipv4_pods(on))
        .raw(&format!("{autopath}{}", kube.pod_watch(NODE)))
        .to_toml()
}

impl Lab {
    fn start() -> Lab {
        let ns = Netns::create("v4pods");
        let kube = Kube::start(&ns);
        kube.create(OBJECTS);
        ns.add_to_lo(&[EXTERNAL, IPV4_POD, DUAL_POD, UNKNOWN]);
        ns.run(&[
            "ip",
            "addr",
            "add",
            &format!("{DUAL_POD_V6}/128"),
            "dev",
            "lo",
            "nodad",
        ]);
        let core = KubeDns::start_bound(&ns, &kube);
        let probe = Q::new("web.team-a.svc.cluster.local.", Rt::A);
        wait_until(
            Duration::from_secs(30),
            "CoreDNS to serve the cluster",
            || {
                in_netns(&ns.name, || {
                    udp_query_timeout(core.addr, &probe, Duration::from_millis(500))
                })
                .filter(|r| r.a() == [ipv4("10.96.0.20")])
            },
        );
        let external = CoreDns::launch(
            &ns.exec(),
            SocketAddr::new(EXTERNAL.parse().unwrap(), 53),
            &external_zones(),
        );
        in_netns(&ns.name, || external.wait_ready());
        let pod = client_pod(&ns);
        kube.create_pod("team-a", "v4", &[IPV4_POD], NODE, "");
        kube.create_pod("team-a", "dual", &[DUAL_POD, DUAL_POD_V6], NODE, "");
        kube.create_pod("team-a", "resolver", &[CLIENT_POD], NODE, "");

        let (a, b) = (Net::fixed(17), Net::fixed(18));
        let pod_side: SocketAddr = format!("{NODE_SIDE}:53").parse().unwrap();
        let mut nodens =
            Nodens::launch(&config(&a, &kube, core.addr, true, &[pod_side]), &ns.exec());
        let mut plain = Nodens::launch(&config(&b, &kube, core.addr, false, &[]), &ns.exec());
        in_netns(&ns.name, || {
            nodens.wait_ready();
            plain.wait_ready();
        });
        let lab = Lab {
            nodens,
            plain,
            ns,
            pod,
            _kube: kube,
            core,
            external,
        };
        wait_until(
            Duration::from_secs(30),
            "the pod watch to hold 3 pods",
            || {
                let objects = lab.metric(
                    "nodens_kubernetes_watch_objects",
                    &[("resource", "pods"), ("watch", NODE)],
                );
                (objects == 3.0).then_some(())
            },
        );
        lab
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        in_netns(&self.ns.name, || self.nodens.metric(name, labels))
    }

    fn ask(&self, server: SocketAddr, source: &str, name: &str, t: Rt) -> Message {
        let source: IpAddr = source.parse().unwrap();
        let packet = Q::new(name, t).to_bytes();
        let raw = in_netns(&self.ns.name, || {
            udp_exchange_from(source, server, &packet, Duration::from_secs(3))
        })
        .unwrap_or_else(|| panic!("no answer to {name} {t:?} from {source}"));
        Message::from_vec(&raw).unwrap()
    }

    /// Until the external CoreDNS has logged every query before this one.
    fn sync(&self) {
        in_netns(&self.ns.name, || self.external.sync_log());
    }

    fn aaaa_queries(&self, name: &str) -> usize {
        self.external.count_queries(name, "AAAA")
    }
}

/// The resolver clients' pod: a namespace behind a veth, with an IPv6
/// address of its own (so getaddrinfo's AI_ADDRCONFIG asks AAAA) although
/// the API lists only its IPv4 one, and the standard search list.
fn client_pod(node: &Netns) -> PodNet {
    let addrs = PodAddrs {
        veth: "vv4p0",
        node_side: NODE_SIDE,
        ipv4: CLIENT_POD,
        ipv6: "fd00:251::5",
    };
    let pod = PodNet::create(node, "v4pod", &addrs);
    pod.resolv_conf(&format!(
        "search team-a.svc.cluster.local svc.cluster.local cluster.local\n\
         nameserver {NODE_SIDE}\noptions ndots:5 timeout:2 attempts:2\n"
    ));
    pod
}

fn records(m: &Message, t: RecordType) -> Vec<String> {
    m.answers()
        .iter()
        .filter(|r| r.record_type() == t)
        .map(|r| r.data().to_string())
        .collect()
}

fn soa_owner(m: &Message) -> Option<String> {
    m.name_servers()
        .iter()
        .find(|r| r.record_type() == RecordType::SOA)
        .map(|r| r.name().to_string())
}

#[test]
fn an_ipv4_only_pod_gets_nodata_for_aaaa_and_the_others_their_records() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let lab = Lab::start();
    let on = lab.nodens.dns;

    // The IPv4-only pod: NODATA with an SOA for a name that exists, and no
    // AAAA query upstream for it.
    let a = lab.ask(on, IPV4_POD, "api.example.com.", Rt::A);
    assert_eq!(records(&a, RecordType::A), ["192.0.2.10"]);
    let aaaa = lab.ask(on, IPV4_POD, "api.example.com.", Rt::AAAA);
    assert_eq!(aaaa.response_code(), ResponseCode::NoError, "{aaaa}");
    assert!(aaaa.answers().is_empty(), "{aaaa}");
    assert_eq!(soa_owner(&aaaa).as_deref(), Some("."), "{aaaa}");
    // Before any A of it is cached: answered from the A's fetch.
    let cold = lab.ask(on, IPV4_POD, "cold.example.com.", Rt::AAAA);
    assert_eq!(cold.response_code(), ResponseCode::NoError, "{cold}");
    assert!(cold.answers().is_empty(), "{cold}");
    lab.sync();
    assert_eq!(lab.external.count_queries("cold.example.com.", "A"), 1);
    // A name that does not exist stays NXDOMAIN (its A's denial, with the
    // zone's own SOA): a search-list walk goes on.
    let none = lab.ask(on, IPV4_POD, "nothere.example.com.", Rt::AAAA);
    assert_eq!(none.response_code(), ResponseCode::NXDomain, "{none}");
    assert_eq!(soa_owner(&none).as_deref(), Some("example.com."), "{none}");
    // A name with no A: its NODATA, as for the A.
    let v6only = lab.ask(on, IPV4_POD, "v6only.example.com.", Rt::AAAA);
    assert_eq!(v6only.response_code(), ResponseCode::NoError);
    assert!(v6only.answers().is_empty(), "{v6only}");
    // A cluster name: NODATA with the cluster domain's SOA.
    let web = lab.ask(on, IPV4_POD, "web.team-a.svc.cluster.local.", Rt::AAAA);
    assert_eq!(web.response_code(), ResponseCode::NoError, "{web}");
    assert!(web.answers().is_empty(), "{web}");
    // Autopath: the first expansion of a short name is answered with the
    // CNAME to the walk's end, and there as the filter answers (NODATA),
    // the walk having asked the A of each name, never the AAAA.
    let first = lab.ask(
        on,
        IPV4_POD,
        "api.example.com.team-a.svc.cluster.local.",
        Rt::AAAA,
    );
    assert_eq!(first.response_code(), ResponseCode::NoError, "{first}");
    assert_eq!(
        records(&first, RecordType::CNAME),
        ["api.example.com."],
        "{first}"
    );
    assert!(records(&first, RecordType::AAAA).is_empty(), "{first}");
    assert_eq!(soa_owner(&first).as_deref(), Some("."), "{first}");
    let walked = lab.ask(
        on,
        IPV4_POD,
        "cold2.example.com.team-a.svc.cluster.local.",
        Rt::AAAA,
    );
    assert_eq!(
        records(&walked, RecordType::CNAME),
        ["cold2.example.com."],
        "{walked}"
    );
    assert!(records(&walked, RecordType::AAAA).is_empty(), "{walked}");
    lab.sync();
    for name in [
        "api.example.com.",
        "cold.example.com.",
        "cold2.example.com.",
        "nothere.example.com.",
        "v6only.example.com.",
    ] {
        assert_eq!(lab.aaaa_queries(name), 0, "{name} AAAA went upstream");
    }
    assert!(lab.metric("nodens_aaaa_for_ipv4_pods_total", &[]) >= 6.0);

    // The dual-stack pod and an unknown client: the AAAA record, asked.
    for source in [DUAL_POD, UNKNOWN] {
        let aaaa = lab.ask(on, source, "api.example.com.", Rt::AAAA);
        assert_eq!(
            records(&aaaa, RecordType::AAAA),
            ["2001:db8::10"],
            "{source}"
        );
    }
    // The first expansion the schema rules out was denied locally, its A
    // never asked either.
    assert_eq!(
        lab.core
            .count_queries("api.example.com.team-a.svc.cluster.local.", "A"),
        0
    );
    // Without the setting, the IPv4-only pod gets it too.
    let plain = lab.ask(lab.plain.dns, IPV4_POD, "api.example.com.", Rt::AAAA);
    assert_eq!(records(&plain, RecordType::AAAA), ["2001:db8::10"]);
    lab.sync();
    assert!(lab.aaaa_queries("api.example.com.") >= 1);
}

#[test]
fn glibc_musl_and_go_in_an_ipv4_only_pod_get_its_ipv4_address_only() {
    needs!(
        Need::Root,
        Need::Tool("musl-gcc"),
        Need::Tool("go"),
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let bins = tempfile::tempdir().unwrap();
    let musl = build_musl_lookup(bins.path());
    let go = build_go_lookup(bins.path());
    let lab = Lab::start();
    let (musl, go) = (musl.to_str().unwrap(), go.to_str().unwrap());
    /// A resolver, the program that looks a name up with it, its environment.
    type Client<'a> = (&'a str, Vec<&'a str>, &'a [(&'a str, &'a str)]);
    let clients: [Client; 3] = [
        ("glibc", vec!["getent", "ahosts"], &[]),
        ("musl", vec![musl], &[]),
        ("Go", vec![go], &[("GODEBUG", "netdns=go")]),
    ];
    for (client, program, env) in &clients {
        for (name, address) in [("api.example.com", "192.0.2.10"), ("web", "10.96.0.20")] {
            let mut args = program.clone();
            args.push(name);
            let t0 = Instant::now();
            let out = lab.pod.run(&args, env);
            let took = t0.elapsed();
            let text = out.unwrap_or_else(|e| panic!("{client} {name}: {e}"));
            assert!(text.contains(address), "{client} {name}: {text}");
            assert!(!text.contains("2001:db8"), "{client} {name}: {text}");
            eprintln!("{client} {name}: {:.1} ms", took.as_secs_f64() * 1000.0);
        }
    }
    lab.sync();
    assert_eq!(lab.aaaa_queries("api.example.com."), 0);
}
