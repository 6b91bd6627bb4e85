//! The schema rules of src/search/rules.rs against the real thing: a
//! kube-apiserver (on etcd) holding a few Services and EndpointSlices, and
//! CoreDNS's `kubernetes` plugin serving `cluster.local` from it, all in a
//! network namespace the test makes (tests/support/src/kube.rs).
//!
//! For every form of name the Kubernetes DNS specification allows, CoreDNS
//! answers as the table says and no rule denies the name; for every name a
//! rule denies, CoreDNS answers NXDOMAIN. Then nodens, forwarding
//! `cluster.local` to that CoreDNS with `[cluster]` at its defaults, gives
//! a client CoreDNS's answer for every name, answers the denied ones itself
//! (once a first negative answer has taught it the zone's SOA), and answers
//! none of the allowed ones with a rule.
//!
//! Two more pin where the plugin's answers shaped nodens's defaults: with
//! 0x20 the plugin answers the apex NS and `ns.dns` by the case of the
//! question (so 0x20 is off by default under the cluster domain), and SOA
//! questions about denied names get NODATA (so they are never answered
//! locally).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};

use hickory_proto::rr::RData;
use nodens::Rule;
use nodens::Rule::*;
use support::*;

/// The cluster: two namespaces (team-b empty), a ClusterIP Service with
/// TCP, UDP and SCTP ports, a headless one whose endpoints are a hostname
/// and an address, an ExternalName, and kube-dns, whose endpoint is
/// CoreDNS's own address (so `ns.dns` has an answer). No kubelet and no
/// controllers: the EndpointSlices are written here, ready.
const OBJECTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: team-a}
spec:
  clusterIP: 10.96.1.10
  ports:
  - {name: http, port: 80, protocol: TCP}
  - {name: dns, port: 53, protocol: UDP}
  - {name: sig, port: 9899, protocol: SCTP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: team-a
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
- {name: dns, port: 5353, protocol: UDP}
- {name: sig, port: 9899, protocol: SCTP}
endpoints:
- addresses: [10.244.0.10]
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: team-a}
spec:
  clusterIP: None
  ports:
  - {name: pg, port: 5432, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-1
  namespace: team-a
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports:
- {name: pg, port: 5432, protocol: TCP}
endpoints:
- addresses: [10.244.0.5]
  hostname: db-0
  conditions: {ready: true}
- addresses: [10.244.0.6]
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: team-a}
spec:
  type: ExternalName
  externalName: www.example.org
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-1
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns}
addressType: IPv4
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
endpoints:
- addresses: [COREDNS_IP]
  conditions: {ready: true}
"#;

/// What CoreDNS answers a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Real {
    Records,
    NoData,
    NxDomain,
}
use Real::*;

impl Real {
    fn of(r: &Reply) -> Option<Real> {
        match r.rcode() {
            rcode::NXDOMAIN => Some(NxDomain),
            rcode::NOERROR if r.msg.answers().is_empty() => Some(NoData),
            rcode::NOERROR => Some(Records),
            _ => None,
        }
    }
}

/// Every form the schema allows, and CoreDNS's answer for [`OBJECTS`]:
/// forwarded by nodens whether the name exists or not.
#[rustfmt::skip]
const VALID: &[(&str, Rt, Real)] = &[
    // The zone and its reserved names (the plugin's quirks: `dns-version`
    // has a TXT and no name for A, `dns` is NXDOMAIN above `ns.dns`).
    ("cluster.local.", Rt::SOA, Records),
    ("cluster.local.", Rt::NS, Records),
    ("dns-version.cluster.local.", Rt::TXT, Records),
    ("dns-version.cluster.local.", Rt::A, NxDomain),
    ("ns.dns.cluster.local.", Rt::A, Records),
    ("dns.cluster.local.", Rt::A, NxDomain),
    // Empty non-terminals, and a namespace that does not exist.
    ("svc.cluster.local.", Rt::A, NoData),
    ("pod.cluster.local.", Rt::A, NoData),
    ("team-a.svc.cluster.local.", Rt::A, NoData),
    ("team-b.svc.cluster.local.", Rt::A, NoData),
    ("team-a.pod.cluster.local.", Rt::A, NoData),
    ("nope.svc.cluster.local.", Rt::A, NxDomain),
    // <svc>.<ns>.svc
    ("web.team-a.svc.cluster.local.", Rt::A, Records),
    ("web.team-a.svc.cluster.local.", Rt::AAAA, NoData),
    ("web.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("db.team-a.svc.cluster.local.", Rt::A, Records),
    ("ext.team-a.svc.cluster.local.", Rt::A, Records),
    ("ext.team-a.svc.cluster.local.", Rt::CNAME, Records),
    ("kubernetes.default.svc.cluster.local.", Rt::A, Records),
    ("kube-dns.kube-system.svc.cluster.local.", Rt::A, Records),
    ("missing.team-a.svc.cluster.local.", Rt::A, NxDomain),
    ("web.team-b.svc.cluster.local.", Rt::A, NxDomain),
    ("web.nope.svc.cluster.local.", Rt::A, NxDomain),
    // <endpoint>.<svc>.<ns>.svc: a hostname or the dashed address, of a
    // headless or a ClusterIP Service.
    ("db-0.db.team-a.svc.cluster.local.", Rt::A, Records),
    ("10-244-0-6.db.team-a.svc.cluster.local.", Rt::A, Records),
    ("10-244-0-10.web.team-a.svc.cluster.local.", Rt::A, Records),
    ("db-9.db.team-a.svc.cluster.local.", Rt::A, NxDomain),
    // The non-terminal above the SRV names: the plugin reads it as an
    // endpoint named `_tcp`.
    ("_tcp.web.team-a.svc.cluster.local.", Rt::SRV, NxDomain),
    // _<port>._<proto>.<svc>.<ns>.svc: underscores optional, any case, an
    // empty label a wildcard.
    ("_http._tcp.web.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("_dns._udp.web.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("_sig._sctp.web.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("_dns._udp.kube-dns.kube-system.svc.cluster.local.", Rt::SRV, Records),
    ("_pg._tcp.db.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("_http._tcp.web.team-a.svc.cluster.local.", Rt::A, Records),
    ("http.tcp.web.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("_HTTP._TCP.web.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("_._tcp.web.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("_http._.web.team-a.svc.cluster.local.", Rt::SRV, Records),
    ("_http._udp.web.team-a.svc.cluster.local.", Rt::SRV, NxDomain),
    ("_pg._tcp.gone.team-a.svc.cluster.local.", Rt::SRV, NxDomain),
    // <a-b-c-d>.<ns>.pod (`pods insecure`), and up to two labels more.
    ("10-244-0-9.team-a.pod.cluster.local.", Rt::A, Records),
    ("10-244-0-9.team-a.pod.cluster.local.", Rt::AAAA, NoData),
    ("fd00--9.team-a.pod.cluster.local.", Rt::AAAA, Records),
    ("x.10-244-0-9.team-a.pod.cluster.local.", Rt::A, Records),
    ("x.y.10-244-0-9.team-a.pod.cluster.local.", Rt::A, Records),
    ("10-244-0-9.nope.pod.cluster.local.", Rt::A, NxDomain),
    ("not-an-ip.team-a.pod.cluster.local.", Rt::A, NxDomain),
    // The reverse names of a Service and of an endpoint.
    ("10.1.96.10.in-addr.arpa.", Rt::PTR, Records),
    ("5.0.244.10.in-addr.arpa.", Rt::PTR, Records),
];

/// Names a rule denies, and the rule: what a pod's search list makes of
/// `api.example.com`, `web.team-a` and the like, and longer junk.
#[rustfmt::skip]
const RULED_OUT: &[(&str, Rt, Rule)] = &[
    ("api.example.com.cluster.local.", Rt::A, ZoneChild),
    ("api.example.com.cluster.local.", Rt::AAAA, ZoneChild),
    ("api.example.com.cluster.local.", Rt::HTTPS, ZoneChild),
    ("web.team-a.cluster.local.", Rt::A, ZoneChild),
    ("x.dns-version.cluster.local.", Rt::TXT, ReservedName),
    ("x.dns.cluster.local.", Rt::A, ReservedName),
    ("a.ns.dns.cluster.local.", Rt::A, ReservedName),
    ("a.b.c.d.e.svc.cluster.local.", Rt::A, TooManyLabels),
    ("x._http._tcp.web.team-a.svc.cluster.local.", Rt::SRV, TooManyLabels),
    ("x.y.z.10-244-0-9.team-a.pod.cluster.local.", Rt::A, TooManyLabels),
    ("api.example.com.team-a.svc.cluster.local.", Rt::A, SvcPortShape),
    ("api.example.com.team-a.svc.cluster.local.", Rt::AAAA, SvcPortShape),
    ("api.example.com.nope.svc.cluster.local.", Rt::A, SvcPortShape),
    ("_http.x.web.team-a.svc.cluster.local.", Rt::SRV, SvcPortShape),
    // A multicluster name (`<endpoint>.<cluster-id>`), in a zone that is not one.
    ("db-0.east.db.team-a.svc.cluster.local.", Rt::A, SvcPortShape),
];

/// What a client relies on in an answer: the rcode, the answer records,
/// and the SOA of a negative answer (owner and fields, but not the serial:
/// the plugin's serial is the time of the last change it saw). Names in
/// any case, as DNS compares them: with 0x20, the names inside records
/// (SOA, SRV) keep the random case CoreDNS echoed from nodens's question.
fn gist(r: &Reply) -> (u16, BTreeSet<String>, Option<String>) {
    let soa = r.msg.name_servers().iter().find_map(|rr| match rr.data() {
        RData::SOA(soa) => Some(format!(
            "{} {} {} {} {} {} {}",
            rr.name(),
            soa.mname(),
            soa.rname(),
            soa.refresh(),
            soa.retry(),
            soa.expire(),
            soa.minimum()
        )),
        _ => None,
    });
    let lower = |s: String| s.to_ascii_lowercase();
    let answers = r.answer_set().into_iter().map(lower).collect();
    (r.rcode(), answers, soa.map(lower))
}

struct Lab {
    nodens: Nodens,
    core: KubeDns,
    kube: Kube,
    ns: Netns,
    toml: String,
}

impl Lab {
    /// The cluster with [`OBJECTS`], CoreDNS serving them, and nodens
    /// forwarding `cluster.local` (0x20 as given, or at its default) and
    /// `in-addr.arpa` to it.
    fn start(randomize_case: Option<bool>) -> Lab {
        Lab::start_with(randomize_case, "")
    }

    /// [`Lab::start`] with `cluster` added to nodens's `[cluster]` (and a
    /// `[kubernetes]` section for the cluster's API).
    fn start_with(randomize_case: Option<bool>, cluster: &str) -> Lab {
        let ns = Netns::create("schema");
        let kube = Kube::start(&ns);
        kube.create(&OBJECTS.replace("COREDNS_IP", COREDNS_IP));
        let core = KubeDns::start(&ns, &kube);
        // The plugin serves once it has listed the objects: wait for them.
        let probe = Q::new("db-0.db.team-a.svc.cluster.local.", Rt::A);
        wait_until(secs(30), "CoreDNS to serve the cluster's objects", || {
            in_netns(&ns.name, || udp_query_timeout(core.addr, &probe, ms(500)))
                .filter(|r| r.a() == [ipv4("10.244.0.5")])
        });
        let mut cluster_zone = Zone::new("cluster.local.", &[core.addr]);
        if let Some(on) = randomize_case {
            cluster_zone = cluster_zone.randomize_case(on);
        }
        let toml = Cfg::new(&Net::fixed(10))
            .zone(cluster_zone)
            .zone(Zone::new("in-addr.arpa.", &[core.addr]))
            .raw(&format!(
                "[cluster]\n{cluster}\n[kubernetes]\nkubeconfig = \"{}\"\n",
                kube.kubeconfig.display()
            ))
            .to_toml();
        let mut nodens = Nodens::launch(&toml, &ns.exec());
        in_netns(&ns.name, || nodens.wait_ready());
        Lab {
            nodens,
            core,
            kube,
            ns,
            toml,
        }
    }

    fn ask(&self, to: std::net::SocketAddr, name: &str, t: Rt) -> Reply {
        in_netns(&self.ns.name, || udp_query(to, &Q::new(name, t)))
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        in_netns(&self.ns.name, || self.nodens.metric(name, labels))
    }

    fn local_nxdomains(&self, rule: Rule) -> f64 {
        self.metric(
            "nodens_search_local_nxdomain_total",
            &[("rule", rule.name())],
        )
    }

    /// Waits until CoreDNS has logged a query asked of it now, and
    /// [`LOG_SETTLE`] more, so that every query it answered before has been
    /// logged too.
    fn sync_log(&self) {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "sync-{}.cluster.local.",
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        self.ask(self.core.addr, &name, Rt::TXT);
        wait_until(secs(5), "CoreDNS to log a query", || {
            (self.core.count_queries(&name, "TXT") == 1).then_some(())
        });
        std::thread::sleep(LOG_SETTLE);
    }
}

#[test]
fn the_schema_rules_hold_against_coredns_on_a_real_api_server() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    // Every setting at its default: 0x20 is off under the cluster domain
    // (see `with_0x20_the_plugin_answers_two_names_by_the_case_asked`).
    let lab = Lab::start(None);
    let core = lab.core.addr;
    // The rules exactly as the nodens under test compiled them.
    let rules = nodens::config::Config::parse(&lab.toml).unwrap().cluster;
    let wire = |name: &str| nodens::wire::name::from_text(name).unwrap();

    // CoreDNS: every allowed form answered as the table says, every denied
    // name NXDOMAIN; the rules: none for the first, the right one for the
    // second.
    let valid: Vec<Reply> = VALID.iter().map(|&(n, t, _)| lab.ask(core, n, t)).collect();
    for (&(name, t, real), reply) in VALID.iter().zip(&valid) {
        assert_eq!(
            Real::of(reply),
            Some(real),
            "CoreDNS for {name} {t}: {:?}",
            gist(reply)
        );
        assert_eq!(rules.cannot_exist(&wire(name)), None, "{name} is allowed");
    }
    let ruled_out: Vec<Reply> = RULED_OUT
        .iter()
        .map(|&(n, t, _)| lab.ask(core, n, t))
        .collect();
    for (&(name, t, rule), reply) in RULED_OUT.iter().zip(&ruled_out) {
        let (rcode, answers, soa) = gist(reply);
        assert_eq!(
            (rcode, answers.len()),
            (rcode::NXDOMAIN, 0),
            "CoreDNS for {name} {t}, which {rule:?} denies: {:?}",
            gist(reply)
        );
        assert!(
            soa.as_ref()
                .is_some_and(|s| s.starts_with("cluster.local. ")),
            "CoreDNS for {name} {t}: SOA {soa:?}"
        );
        assert_eq!(rules.cannot_exist(&wire(name)), Some(rule), "{name}");
    }

    // nodens: CoreDNS's answer for every allowed name, and no rule fired
    // (the negative answers among them teach it the zone's SOA).
    for (&(name, t, _), direct) in VALID.iter().zip(&valid) {
        let got = lab.ask(lab.nodens.dns, name, t);
        assert_eq!(gist(&got), gist(direct), "nodens for {name} {t}");
    }
    let fired: f64 = Rule::ALL.iter().map(|&r| lab.local_nxdomains(r)).sum();
    assert_eq!(fired, 0.0, "a rule answered a name the schema allows");

    // ... and for every denied name, its own NXDOMAIN under its rule,
    // without asking CoreDNS.
    lab.sync_log();
    let asked = |&(name, t, _): &(&str, Rt, Rule)| lab.core.count_queries(name, &t.to_string());
    let asked_before: Vec<usize> = RULED_OUT.iter().map(asked).collect();
    for (&(name, t, rule), direct) in RULED_OUT.iter().zip(&ruled_out) {
        let before = lab.local_nxdomains(rule);
        let got = lab.ask(lab.nodens.dns, name, t);
        assert_eq!(gist(&got), gist(direct), "nodens for {name} {t}");
        assert_eq!(
            lab.local_nxdomains(rule),
            before + 1.0,
            "{name} {t} not answered by {rule:?}"
        );
    }
    lab.sync_log();
    let asked_after: Vec<usize> = RULED_OUT.iter().map(asked).collect();
    assert_eq!(asked_after, asked_before, "denied names reached CoreDNS");
    assert_eq!(lab.metric("nodens_search_rule_without_soa_total", &[]), 0.0);
}

/// Why 0x20 is off by default under the cluster domain: CoreDNS's
/// `kubernetes` plugin compares the question with the zone in the case it
/// was asked (`handler.go`, `isDefaultNS`), so with 0x20 switched on a
/// random-case question gets NODATA for the apex NS and NXDOMAIN for
/// `ns.dns`. Should the plugin change, this fails, and the default can too.
#[test]
fn with_0x20_the_plugin_answers_two_names_by_the_case_asked() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let lab = Lab::start(Some(true));
    // Both differ unless every letter of both came out lower case (2^-29).
    let differ = [("cluster.local.", Rt::NS), ("ns.dns.cluster.local.", Rt::A)]
        .into_iter()
        .filter(|&(name, t)| {
            let direct = lab.ask(lab.core.addr, name, t);
            let got = lab.ask(lab.nodens.dns, name, t);
            gist(&got) != gist(&direct)
        })
        .count();
    assert!(
        differ > 0,
        "the plugin now answers random-case questions alike"
    );
}

/// The plugin answers an SOA question NOERROR for any name in its zone
/// (`handler.go`), even one it denies for every other type: nodens forwards
/// SOA questions rather than deny them by a rule or below a denied
/// namespace (RFC 8020).
#[test]
fn soa_questions_for_denied_names_answer_the_same() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let lab = Lab::start(None);
    // A denied namespace, which also teaches nodens the zone's SOA.
    lab.ask(lab.nodens.dns, "nope.svc.cluster.local.", Rt::A);
    let denied = RULED_OUT.iter().map(|&(name, _, _)| name);
    for name in ["web.nope.svc.cluster.local."].into_iter().chain(denied) {
        let direct = lab.ask(lab.core.addr, name, Rt::SOA);
        let got = lab.ask(lab.nodens.dns, name, Rt::SOA);
        assert_eq!(gist(&got), gist(&direct), "nodens for {name} SOA");
    }
}

/// `[cluster] namespaces_from_api`: nodens watches the namespaces, answers
/// names below `<ns>.svc` of one that does not exist itself, as CoreDNS
/// would, and serves a namespace once it is created; a namespace deleted is
/// denied again.
#[test]
fn names_of_a_namespace_the_api_does_not_list_are_denied_locally() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let lab = Lab::start_with(None, "namespaces_from_api = true\n");
    wait_until(secs(30), "nodens to list the namespaces", || {
        let synced = lab.metric(
            "nodens_kubernetes_watch_synced",
            &[("resource", "namespaces"), ("watch", "all")],
        );
        (synced == 1.0).then_some(())
    });
    let denied = || {
        lab.metric(
            "nodens_search_local_nxdomain_total",
            &[("rule", "unknown_namespace")],
        )
    };
    // A first negative answer from the zone teaches nodens its SOA.
    lab.ask(lab.nodens.dns, "nothere.team-a.svc.cluster.local.", Rt::A);

    let names = [
        ("web.team-z.svc.cluster.local.", Rt::A),
        ("db-0.db.team-z.svc.cluster.local.", Rt::AAAA),
        ("_http._tcp.web.team-z.svc.cluster.local.", Rt::SRV),
        ("team-z.svc.cluster.local.", Rt::A),
    ];
    let before = denied();
    for (name, t) in names {
        let got = lab.ask(lab.nodens.dns, name, t);
        let direct = lab.ask(lab.core.addr, name, t);
        assert_eq!(got.rcode(), rcode::NXDOMAIN, "{name}");
        assert_eq!(gist(&got), gist(&direct), "nodens for {name} {t}");
        // CoreDNS logs each query from its own goroutine once it has
        // answered, so a later question's line can come first: wait for the
        // direct question's own line, then for a barrier asked after it.
        wait_until(secs(5), "CoreDNS to log the direct question", || {
            (lab.core.count_queries(name, &t.to_string()) >= 1).then_some(())
        });
        lab.sync_log();
        assert_eq!(
            lab.core.count_queries(name, &t.to_string()),
            1,
            "{name}: only the direct question reached CoreDNS"
        );
    }
    assert_eq!(denied() - before, names.len() as f64);
    // A namespace that exists is the cluster DNS's to answer.
    let before = denied();
    let web = "web.team-a.svc.cluster.local.";
    assert_eq!(
        gist(&lab.ask(lab.nodens.dns, web, Rt::A)),
        gist(&lab.ask(lab.core.addr, web, Rt::A))
    );
    assert_eq!(denied(), before);

    // Created: served as soon as the watch sees it, the denial not cached.
    lab.kube.create(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-z}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: team-z}\n\
         spec:\n  clusterIP: 10.96.1.30\n  ports:\n  - {name: http, port: 80, protocol: TCP}\n",
    );
    let web_z = "web.team-z.svc.cluster.local.";
    let served = wait_until(secs(10), "nodens to serve the new namespace", || {
        let got = lab.ask(lab.nodens.dns, web_z, Rt::A);
        (got.rcode() == rcode::NOERROR).then_some(got)
    });
    assert_eq!(served.a(), [ipv4("10.96.1.30")]);

    // Deleted (the namespace controller's part, finalize, done by hand):
    // denied again.
    lab.kube
        .create("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-y}\n");
    let team_y = "web.team-y.svc.cluster.local.";
    wait_until(secs(10), "nodens to list team-y", || {
        let before = denied();
        lab.ask(lab.nodens.dns, team_y, Rt::A);
        (denied() == before).then_some(())
    });
    lab.kube
        .try_kubectl(&["delete", "namespace", "team-y", "--wait=false"], None)
        .unwrap();
    let finalize = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-y"},"spec":{"finalizers":[]}}"#;
    lab.kube
        .try_kubectl(
            &[
                "replace",
                "--raw",
                "/api/v1/namespaces/team-y/finalize",
                "-f",
                "-",
            ],
            Some(finalize),
        )
        .unwrap();
    wait_until(secs(10), "nodens to deny team-y's names again", || {
        let before = denied();
        let got = lab.ask(lab.nodens.dns, team_y, Rt::A);
        (got.rcode() == rcode::NXDOMAIN && denied() == before + 1.0).then_some(())
    });
}
