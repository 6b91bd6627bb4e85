//! The cluster the specification differential runs on, how it changes,
//! the questions asked after each change, and the differences known.

use hickory_proto::rr::RecordType as Rt;

/// The namespace the Services live in; `spec-b` exists and is empty.
pub(super) const NS: &str = "spec-a";

/// Every kind of object the Kubernetes DNS specification names: a
/// ClusterIP Service with named TCP and UDP ports, one with an unnamed
/// port, a dual-stack one (an IPv4 and an IPv6 cluster IP, a slice of
/// each family), a headless Service whose endpoints have hostnames (one not
/// ready, one IPv6), a headless one that publishes not-ready addresses, a
/// headless one without a selector whose slice is written by hand (no
/// headless label, as a user writes it), and an ExternalName. The
/// EndpointSlices are written here as the EndpointSlice controller would
/// (there is none).
const OBJECTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: spec-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: spec-b}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: spec-a}
spec:
  clusterIP: 10.96.2.10
  selector: {app: web}
  ports:
  - {name: http, port: 80, protocol: TCP}
  - {name: dns, port: 53, protocol: UDP}
---
WEB_SLICE
---
apiVersion: v1
kind: Service
metadata: {name: solo, namespace: spec-a}
spec:
  clusterIP: 10.96.2.11
  selector: {app: solo}
  ports:
  - {port: 8080, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: dual, namespace: spec-a}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: 10.96.2.12
  clusterIPs: [10.96.2.12, "fd00:96::212"]
  selector: {app: dual}
  ports:
  - {name: http, port: 80, protocol: TCP}
---
DUAL_SLICE_V4
---
DUAL_SLICE_V6
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: spec-a}
spec:
  clusterIP: None
  selector: {app: db}
  ports:
  - {name: pg, port: 5432, protocol: TCP}
---
DB_SLICE
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-v6
  namespace: spec-a
  labels: {kubernetes.io/service-name: db, service.kubernetes.io/headless: ""}
addressType: IPv6
ports:
- {name: pg, port: 5432, protocol: TCP}
endpoints:
- addresses: ["fd00:244::20"]
  hostname: db-0
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: pnr, namespace: spec-a}
spec:
  clusterIP: None
  selector: {app: pnr}
  publishNotReadyAddresses: true
  ports:
  - {name: http, port: 80, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: pnr-1
  namespace: spec-a
  labels: {kubernetes.io/service-name: pnr, service.kubernetes.io/headless: ""}
addressType: IPv4
ports:
- {name: http, port: 80, protocol: TCP}
endpoints:
- addresses: [10.244.2.30]
  hostname: pnr-0
  conditions: {ready: false}
---
apiVersion: v1
kind: Service
metadata: {name: manual, namespace: spec-a}
spec:
  clusterIP: None
  ports:
  - {name: http, port: 80, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: manual-1
  namespace: spec-a
  labels: {kubernetes.io/service-name: manual}
addressType: IPv4
ports:
- {name: http, port: 80, protocol: TCP}
endpoints:
- addresses: [10.244.2.40]
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: spec-a}
spec:
  type: ExternalName
  externalName: www.example.org
"#;

/// `web`'s slice with the endpoints given (ready).
pub(super) fn web_slice(addresses: &[&str]) -> String {
    let endpoints: String = addresses
        .iter()
        .map(|a| format!("- addresses: [{a}]\n  conditions: {{ready: true}}\n"))
        .collect();
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  \
         namespace: spec-a\n  labels: {{kubernetes.io/service-name: web}}\naddressType: IPv4\n\
         ports:\n- {{name: http, port: 8080, protocol: TCP}}\n- {{name: dns, port: 5353, protocol: UDP}}\n\
         endpoints:\n{endpoints}"
    )
}

/// `db`'s IPv4 slice: `(hostname, address, ready)` each.
pub(super) fn db_slice(endpoints: &[(&str, &str, bool)]) -> String {
    let endpoints: String = endpoints
        .iter()
        .map(|(host, a, ready)| {
            format!("- addresses: [{a}]\n  hostname: {host}\n  conditions: {{ready: {ready}}}\n")
        })
        .collect();
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: db-1\n  \
         namespace: spec-a\n  labels: {{kubernetes.io/service-name: db, service.kubernetes.io/headless: \"\"}}\n\
         addressType: IPv4\nports:\n- {{name: pg, port: 5432, protocol: TCP}}\nendpoints:\n{endpoints}"
    )
}

/// A slice of `dual` of one address family, with one ready endpoint.
fn dual_slice(family: &str, address: &str) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: dual-{}\n  \
         namespace: spec-a\n  labels: {{kubernetes.io/service-name: dual}}\n\
         addressType: {family}\nports:\n- {{name: http, port: 8080, protocol: TCP}}\n\
         endpoints:\n- addresses: [\"{address}\"]\n  conditions: {{ready: true}}\n",
        family.to_ascii_lowercase()
    )
}

/// The objects at the start.
pub(super) fn objects() -> String {
    OBJECTS
        .replace("WEB_SLICE", &web_slice(&["10.244.2.10"]))
        .replace("DUAL_SLICE_V4", &dual_slice("IPv4", "10.244.2.60"))
        .replace("DUAL_SLICE_V6", &dual_slice("IPv6", "fd00:244::60"))
        .replace(
            "DB_SLICE",
            &db_slice(&[
                ("db-0", "10.244.2.20", true),
                ("db-1", "10.244.2.21", false),
            ]),
        )
}

/// A Service created after the start, and its slice.
pub(super) const LATE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: late, namespace: spec-a}
spec:
  clusterIP: 10.96.2.50
  selector: {app: late}
  ports:
  - {name: http, port: 80, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: late-1
  namespace: spec-a
  labels: {kubernetes.io/service-name: late}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
endpoints:
- addresses: [10.244.2.50]
  conditions: {ready: true}
"#;

/// Every question the specification answers about the objects (and
/// those created and deleted later), with the wrong types and the names
/// that do not exist at each level of the schema, and the expansions a
/// pod of `spec-a` makes of short names through its search list.
pub(super) fn questions() -> Vec<(String, Rt)> {
    let svc = |n: &str| format!("{n}.{NS}.svc.cluster.local.");
    let mut names: Vec<(String, Vec<Rt>)> = Vec::new();
    let all = vec![Rt::A, Rt::AAAA, Rt::SRV, Rt::TXT, Rt::MX];
    for s in [
        "web", "solo", "dual", "db", "pnr", "manual", "late", "missing",
    ] {
        names.push((svc(s), all.clone()));
    }
    names.push((svc("ext"), vec![Rt::A, Rt::AAAA, Rt::CNAME, Rt::SRV]));
    for e in [
        "db-0.db",
        "db-1.db",
        "db-2.db",
        "db-9.db",
        "pnr-0.pnr",
        "10-244-2-40.manual",
        "10-244-2-10.web",
        "10-244-2-12.web",
        "10-244-2-50.late",
        "x.solo",
        "10-244-2-60.dual",
        "fd00-244--60.dual",
    ] {
        names.push((svc(e), vec![Rt::A, Rt::AAAA]));
    }
    for s in [
        "_http._tcp.web",
        "_dns._udp.web",
        "_http._udp.web",
        "_x._tcp.web",
        "_pg._tcp.db",
        "_http._tcp.pnr",
        "_http._tcp.manual",
        "_http._tcp.late",
        "_http._tcp.dual",
        "_tcp.web",
    ] {
        names.push((svc(s), vec![Rt::SRV]));
    }
    for n in [
        "cluster.local.",
        "svc.cluster.local.",
        "pod.cluster.local.",
        "spec-a.svc.cluster.local.",
        "spec-b.svc.cluster.local.",
        "nope.svc.cluster.local.",
        "web.spec-b.svc.cluster.local.",
        "web.nope.svc.cluster.local.",
        "10-244-2-20.spec-a.pod.cluster.local.",
        "10-244-2-20.nope.pod.cluster.local.",
        "fd00--244--20.spec-a.pod.cluster.local.",
        "not-an-ip.spec-a.pod.cluster.local.",
    ] {
        names.push((n.into(), vec![Rt::A, Rt::AAAA, Rt::SOA]));
    }
    // A pod of spec-a: `search spec-a.svc.cluster.local svc.cluster.local
    // cluster.local`, ndots:5.
    for short in [
        "web",
        "db-0.db",
        "web.spec-a",
        "late.spec-a.svc",
        "www.example.org",
    ] {
        for search in [
            "spec-a.svc.cluster.local.",
            "svc.cluster.local.",
            "cluster.local.",
        ] {
            names.push((format!("{short}.{search}"), vec![Rt::A, Rt::AAAA]));
        }
    }
    for ptr in [
        "10.2.96.10.in-addr.arpa.",
        "11.2.96.10.in-addr.arpa.",
        "50.2.96.10.in-addr.arpa.",
        "10.2.244.10.in-addr.arpa.",
        "12.2.244.10.in-addr.arpa.",
        "20.2.244.10.in-addr.arpa.",
        "30.2.244.10.in-addr.arpa.",
        "40.2.244.10.in-addr.arpa.",
        "9.9.244.10.in-addr.arpa.",
        "0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.4.4.2.0.0.0.d.f.ip6.arpa.",
        "12.2.96.10.in-addr.arpa.",
        "60.2.244.10.in-addr.arpa.",
        "2.1.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.0.d.f.ip6.arpa.",
        "0.6.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.4.4.2.0.0.0.d.f.ip6.arpa.",
    ] {
        names.push((ptr.into(), vec![Rt::PTR]));
    }
    names
        .into_iter()
        .flat_map(|(n, types)| types.into_iter().map(move |t| (n.clone(), t)))
        .collect()
}

/// A difference allowed between CoreDNS and nodens, with its reason:
/// which configuration, in which phases, for which name and type.
pub(super) struct Known {
    pub(super) config: &'static str,
    pub(super) phases: &'static [&'static str],
    pub(super) name: &'static str,
    pub(super) qtype: Rt,
    pub(super) why: &'static str,
}

const CHANGES: &[&str] = &["created", "replaced", "deleted"];
/// Every phase in which both configurations are compared.
const ALL: &[&str] = &["start", "start, cached", "created", "replaced", "deleted"];

/// Why the next entries differ for the second after `web`'s endpoints
/// were replaced.
const CLUSTER_IP_ENDPOINTS: &str = "the names CoreDNS makes of a ClusterIP Service's     endpoints (and their PTRs) come from slices the default `follow_api_endpoints =     \"headless\"` does not read (kube-proxy does): they follow their TTL (5 s) and are never     held (docs/scale.md)";

/// The differences known: one answer a feature changes on purpose, and
/// answers cached within their TTL in the second after a change, where
/// nodens with every feature is compared before the TTL of what it cached
/// ran out, for names `follow_api` does not follow by design.
pub(super) const KNOWN: &[Known] = &[
    Known {
        config: "features",
        phases: ALL,
        name: "walk db-0.db",
        qtype: Rt::AAAA,
        why: "by design: `no_aaaa_for_ipv4_pods` answers an IPv4-only pod's AAAA with NODATA \
              (the pod could not use the address); CoreDNS gives db-0's IPv6 endpoint",
    },
    Known {
        config: "features, at once",
        phases: CHANGES,
        name: "walk db-0.db",
        qtype: Rt::AAAA,
        why: "as above",
    },
    Known {
        config: "features, at once",
        phases: CHANGES,
        name: "cluster.local.",
        qtype: Rt::SOA,
        why: "the zone's SOA serial is the time of the plugin's last change; the apex is not a \
              Service's name, so `follow_api` leaves its cached SOA to its TTL (5 s)",
    },
    Known {
        config: "features, at once",
        phases: &["replaced"],
        name: "10-244-2-10.web.spec-a.svc.cluster.local.",
        qtype: Rt::A,
        why: CLUSTER_IP_ENDPOINTS,
    },
    Known {
        config: "features, at once",
        phases: &["replaced"],
        name: "10-244-2-10.web.spec-a.svc.cluster.local.",
        qtype: Rt::AAAA,
        why: CLUSTER_IP_ENDPOINTS,
    },
    Known {
        config: "features, at once",
        phases: &["replaced"],
        name: "10-244-2-12.web.spec-a.svc.cluster.local.",
        qtype: Rt::A,
        why: CLUSTER_IP_ENDPOINTS,
    },
    Known {
        config: "features, at once",
        phases: &["replaced"],
        name: "10-244-2-12.web.spec-a.svc.cluster.local.",
        qtype: Rt::AAAA,
        why: CLUSTER_IP_ENDPOINTS,
    },
    Known {
        config: "features, at once",
        phases: &["replaced"],
        name: "10.2.244.10.in-addr.arpa.",
        qtype: Rt::PTR,
        why: CLUSTER_IP_ENDPOINTS,
    },
    Known {
        config: "features, at once",
        phases: &["replaced"],
        name: "12.2.244.10.in-addr.arpa.",
        qtype: Rt::PTR,
        why: CLUSTER_IP_ENDPOINTS,
    },
];
