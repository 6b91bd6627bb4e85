//! Last-known-good answers (`cache::last_good`), against a real
//! kube-apiserver and CoreDNS's `kubernetes` plugin (tests/support/src/kube.rs)
//! in a network namespace, its TTL 1 s so that every lookup below past the
//! first second reaches it. There is no controller-manager: the test writes
//! the EndpointSlices.
//!
//! Three nodens ask the same CoreDNS: "follow" (`follow_api`, so
//! `keep_last_good` on), "off" (`follow_api` with `keep_last_good = false`:
//! what nodens did before, and what a node cache without the API does) and
//! "stale" (no watch, `[cache] stale_over_denial`). A headless Service's slice
//! is emptied, as a rollout with no ready pod for a moment does: CoreDNS
//! denies the name; "follow" and "stale" keep answering the last address,
//! "off" gives the denial. A new pod ready: "follow" answers it within the
//! `follow_api` promise. The Service deleted: "follow" answers NXDOMAIN
//! within it too and never the old address after; "stale", which has no
//! watch to say so, keeps the old address (its documented price). A
//! headless Service scaled to zero is bridged for a rollout's moment (30 s)
//! and denied after.

use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType as Rt;
use support::*;

const NS: &str = "team-a";
const DB: &str = "db.team-a.svc.cluster.local.";

/// The headless Service `db`'s slice: one endpoint, ready or not.
fn slice(ip: &str, ready: bool) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: db-1\n  \
         namespace: {NS}\n  labels: {{kubernetes.io/service-name: db, service.kubernetes.io/headless: \"\"}}\n\
         addressType: IPv4\nports: [{{name: pg, port: 5432, protocol: TCP}}]\nendpoints:\n  \
         - {{addresses: [\"{ip}\"], hostname: db-0, conditions: {{ready: {ready}}}}}\n"
    )
}

/// The slice of `db` scaled to zero: no endpoint at all.
fn no_endpoints() -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: db-1\n  \
         namespace: {NS}\n  labels: {{kubernetes.io/service-name: db, service.kubernetes.io/headless: \"\"}}\n\
         addressType: IPv4\nports: [{{name: pg, port: 5432, protocol: TCP}}]\nendpoints: []\n"
    )
}

struct Lab {
    kube: Kube,
    core: KubeDns,
    follow: Nodens,
    off: Nodens,
    stale: Nodens,
    ns: Netns,
}

impl Lab {
    fn ask(&self, server: &Nodens, t: Rt) -> Option<String> {
        let q = Q::new(DB, t);
        let reply = in_netns(&self.ns.name, || {
            udp_query_timeout(server.dns, &q, Duration::from_millis(500))
        })?;
        Some(format!(
            "{:?} {:?}",
            reply.msg.response_code(),
            reply.answer_set()
        ))
    }

    fn core(&self) -> Option<String> {
        let q = Q::new(DB, Rt::A);
        let reply = in_netns(&self.ns.name, || {
            udp_query_timeout(self.core.addr, &q, Duration::from_millis(500))
        })?;
        Some(format!(
            "{:?} {:?}",
            reply.msg.response_code(),
            reply.answer_set()
        ))
    }

    fn metric(&self, server: &Nodens, rule: &str) -> f64 {
        in_netns(&self.ns.name, || {
            server.metric("nodens_cache_last_good_answers_total", &[("rule", rule)])
        })
    }

    /// Asks every 100 ms for `secs` and returns each nodens's answers.
    fn watch(&self, secs: u64) -> [Vec<String>; 3] {
        let mut seen: [Vec<String>; 3] = Default::default();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            for (i, s) in [&self.follow, &self.off, &self.stale]
                .into_iter()
                .enumerate()
            {
                seen[i].push(self.ask(s, Rt::A).unwrap_or_else(|| "no answer".into()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        seen
    }
}

fn start() -> Lab {
    let ns = Netns::create("lastgood");
    let kube = Kube::start(&ns);
    kube.create(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"
    ));
    let core = KubeDns::start_bound_ttl(&ns, &kube, 1);
    let launch = |n: u8, cluster: &str, stale_over_denial: bool| {
        let toml = Cfg::new(&Net::fixed(n))
            .stale_over_denial(stale_over_denial)
            .zone(Zone::new("cluster.local.", &[core.addr]))
            .raw(&if cluster.is_empty() {
                String::new()
            } else {
                format!(
                    "[cluster]\n{cluster}\n[kubernetes]\nkubeconfig = \"{}\"\n",
                    kube.kubeconfig.display()
                )
            })
            .to_toml();
        let mut nodens = Nodens::launch(&toml, &ns.exec());
        in_netns(&ns.name, || nodens.wait_ready());
        nodens
    };
    let follow = launch(31, "follow_api = true", false);
    let off = launch(32, "follow_api = true\nkeep_last_good = false", false);
    let stale = launch(33, "", true);
    Lab {
        kube,
        core,
        follow,
        off,
        stale,
        ns,
    }
}

fn positive(a: &str, ip: &str) -> bool {
    a.starts_with("NoError") && a.contains(ip)
}

#[test]
fn a_service_the_watch_says_exists_keeps_its_last_answer_until_it_is_deleted() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let lab = start();
    for s in [&lab.follow, &lab.off] {
        wait_until(Duration::from_secs(30), "the follow_api watches", || {
            let synced = |r| {
                in_netns(&lab.ns.name, || {
                    s.metric(
                        "nodens_kubernetes_watch_synced",
                        &[("resource", r), ("watch", "follow_api")],
                    )
                }) == 1.0
            };
            (synced("services") && synced("endpointslices")).then_some(())
        });
    }
    lab.kube.create(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: db, namespace: {NS}}}\n\
         spec: {{clusterIP: None, ports: [{{name: pg, port: 5432, protocol: TCP}}]}}\n"
    ));
    lab.kube.apply(&slice("10.244.1.5", true));
    wait_until(Duration::from_secs(30), "CoreDNS to answer db", || {
        lab.core().filter(|a| positive(a, "10.244.1.5"))
    });
    // Each nodens has the answer (past the second after the change in
    // which "follow" does not store what it fetched).
    std::thread::sleep(Duration::from_millis(1500));
    for s in [&lab.follow, &lab.off, &lab.stale] {
        wait_until(Duration::from_secs(10), "each nodens to answer db", || {
            lab.ask(s, Rt::A).filter(|a| positive(a, "10.244.1.5"))
        });
    }

    // The rollout: no ready endpoint for a moment.
    lab.kube.apply(&slice("10.244.1.5", false));
    let denied = wait_until(Duration::from_secs(30), "CoreDNS to deny db", || {
        lab.core().filter(|a| !a.contains("10.244.1.5"))
    });
    eprintln!("CoreDNS with the slice empty: {denied}");
    let [follow, off, stale] = lab.watch(3);
    let bad = |seen: &[String]| seen.iter().filter(|a| !positive(a, "10.244.1.5")).count();
    eprintln!(
        "with the slice empty, answers without the address: follow {}/{}, off {}/{}, stale {}/{}",
        bad(&follow),
        follow.len(),
        bad(&off),
        off.len(),
        bad(&stale),
        stale.len()
    );
    assert_eq!(
        bad(&follow),
        0,
        "the watch bridges the empty slice: {follow:?}"
    );
    assert_eq!(bad(&stale), 0, "stale_over_denial bridges it: {stale:?}");
    assert!(
        bad(&off) > 0,
        "without keep_last_good the denial goes out (the test sees the difference): {off:?}"
    );
    assert!(lab.metric(&lab.follow, "cluster") > 0.0);
    assert!(lab.metric(&lab.stale, "stale_over_denial") > 0.0);
    assert_eq!(lab.metric(&lab.off, "cluster"), 0.0);

    // A new pod ready: the watch's change shows within a second.
    let changed = Instant::now();
    lab.kube.apply(&slice("10.244.1.6", true));
    let first = wait_until(
        Duration::from_secs(10),
        "follow to answer the new pod",
        || {
            lab.ask(&lab.follow, Rt::A)
                .filter(|a| positive(a, "10.244.1.6"))
                .map(|_| changed.elapsed())
        },
    );
    assert!(
        first < Duration::from_secs(3),
        "the new pod after {first:?}"
    );
    let [follow, _, _] = lab.watch(1);
    assert!(
        follow
            .iter()
            .all(|a| positive(a, "10.244.1.6") && !a.contains("10.244.1.5")),
        "{follow:?}"
    );

    // Scaled to zero: no endpoint at all. For a rollout's moment (30 s,
    // a Recreate rollout's gap between the old pod gone and the new one
    // listed) the last answer still goes out; then the denial, the truth.
    let scaled = Instant::now();
    lab.kube.apply(&no_endpoints());
    let [follow, _, _] = lab.watch(2);
    assert!(
        follow.iter().all(|a| positive(a, "10.244.1.6")),
        "{follow:?}"
    );
    let zero = wait_until(
        Duration::from_secs(45),
        "follow to deny db scaled to zero",
        || {
            lab.ask(&lab.follow, Rt::A)
                .filter(|a| !a.contains("10.244.1.6"))
                .map(|_| scaled.elapsed())
        },
    );
    eprintln!("scaled to zero: follow denied db after {zero:?}");
    assert!(
        zero > Duration::from_secs(28) && zero < Duration::from_secs(34),
        "denied after {zero:?}"
    );
    lab.kube.apply(&slice("10.244.1.6", true));
    wait_until(Duration::from_secs(10), "follow to answer db again", || {
        lab.ask(&lab.follow, Rt::A)
            .filter(|a| positive(a, "10.244.1.6"))
    });

    // The Service deleted: NXDOMAIN within the promise, never the old
    // address after. "stale" has no watch to tell it.
    let deleted = Instant::now();
    lab.kube
        .try_kubectl(&["delete", "service", "-n", NS, "db"], None)
        .unwrap();
    lab.kube
        .try_kubectl(&["delete", "endpointslice", "-n", NS, "db-1"], None)
        .unwrap();
    let gone = wait_until(
        Duration::from_secs(10),
        "follow to deny the deleted db",
        || {
            lab.ask(&lab.follow, Rt::A)
                .filter(|a| a.starts_with("NXDomain"))
                .map(|_| deleted.elapsed())
        },
    );
    let [follow, _, stale] = lab.watch(2);
    eprintln!(
        "deleted: follow NXDOMAIN after {gone:?}; stale then answered {:?}",
        stale.last()
    );
    assert!(gone < Duration::from_secs(3), "NXDOMAIN after {gone:?}");
    assert!(
        follow.iter().all(|a| a.starts_with("NXDomain")),
        "{follow:?}"
    );
    assert!(stale.iter().all(|a| positive(a, "10.244.1.6")), "{stale:?}");
    let Lab {
        mut follow,
        mut off,
        mut stale,
        ns,
        ..
    } = lab;
    for s in [&mut follow, &mut off, &mut stale] {
        in_netns(&ns.name, || s.assert_alive());
    }
}
