//! Unit tests of `cache::follow`.

use super::*;
use crate::cache::{KeyRef, Lookup};
use crate::wire::name::from_text;

fn wire(s: &str) -> Box<[u8]> {
    from_text(s).unwrap().into_boxed_slice()
}

#[test]
fn service_nodes_and_coverage() {
    let zone = wire("svc.cluster.local.");
    let name = wire("_http._tcp.web.team-a.svc.cluster.local.");
    let at = service_node(&name, &zone).unwrap();
    assert_eq!(&name[at..], &*wire("web.team-a.svc.cluster.local."));
    assert_eq!(
        service_node(&wire("team-a.svc.cluster.local."), &zone),
        None
    );
    assert_eq!(service_node(&wire("svc.cluster.local."), &zone), None);
    assert_eq!(
        service_node(&wire("web.team-a.xsvc.cluster.local."), &zone),
        None
    );
    let emptied = Instant::now();
    let coverage = Coverage {
        svc_zone: zone,
        uncovered: [wire("ext.team-a.svc.cluster.local.")].into(),
        addresses: ["10.96.0.20".parse().unwrap()].into(),
        partial: [wire("db.team-a.svc.cluster.local.")].into(),
        services: [
            wire("web.team-a.svc.cluster.local."),
            wire("db.team-a.svc.cluster.local."),
            wire("ext.team-a.svc.cluster.local."),
        ]
        .into(),
        // db's slices list no endpoint since `emptied`.
        emptied: [(wire("db.team-a.svc.cluster.local."), emptied)].into(),
    };
    assert!(coverage.holds(&name));
    // A Service whose slices are not read: its own node and its SRV names,
    // not the names of its endpoints below it.
    assert!(coverage.holds(&wire("db.team-a.svc.cluster.local.")));
    assert!(coverage.holds(&wire("_pg._tcp.db.team-a.svc.cluster.local.")));
    assert!(!coverage.holds(&wire("pod-1.db.team-a.svc.cluster.local.")));
    assert!(!coverage.holds(&wire("_pg.pod-1.db.team-a.svc.cluster.local.")));
    assert!(!coverage.holds(&wire("_pg._tcp.pod-1.db.team-a.svc.cluster.local.")));
    assert!(!coverage.holds(&wire("_x._pg._tcp.db.team-a.svc.cluster.local.")));
    assert!(coverage.holds(&wire("pod-1.web.team-a.svc.cluster.local.")));
    assert!(coverage.holds(&wire("nope.team-b.svc.cluster.local.")));
    assert!(!coverage.holds(&wire("ext.team-a.svc.cluster.local.")));
    assert!(!coverage.holds(&wire("*.team-a.svc.cluster.local.")));
    assert!(!coverage.holds(&wire("team-a.svc.cluster.local.")));
    assert!(coverage.holds(&wire("20.0.96.10.in-addr.arpa.")));
    assert!(!coverage.holds(&wire("21.0.96.10.in-addr.arpa.")));
    assert!(!coverage.holds(&wire("example.com.")));
    // What the watch vouches exists: a Service's node and its SRV names,
    // not its endpoints' names, not an ExternalName, not a Service it
    // does not know.
    assert!(coverage.vouches_for(&wire("web.team-a.svc.cluster.local."), emptied));
    assert!(coverage.vouches_for(&name, emptied));
    assert!(coverage.vouches_for(&wire("db.team-a.svc.cluster.local."), emptied));
    assert!(!coverage.vouches_for(&wire("pod-1.web.team-a.svc.cluster.local."), emptied));
    assert!(!coverage.vouches_for(&wire("ext.team-a.svc.cluster.local."), emptied));
    assert!(!coverage.vouches_for(&wire("nope.team-b.svc.cluster.local."), emptied));
    assert!(!coverage.vouches_for(&wire("team-a.svc.cluster.local."), emptied));
    assert!(!coverage.vouches_for(&wire("example.com."), emptied));
    // A headless Service without endpoints: a rollout's moment, then not.
    let db = wire("db.team-a.svc.cluster.local.");
    assert!(coverage.vouches_for(&db, emptied + EMPTY_GRACE / 2));
    assert!(!coverage.vouches_for(&db, emptied + EMPTY_GRACE));
    assert!(coverage.vouches_for(
        &wire("web.team-a.svc.cluster.local."),
        emptied + EMPTY_GRACE * 10
    ));
}

fn failure(cache: &Cache, name: &str, view: u8) -> Key {
    let name = wire(name);
    let key = KeyRef {
        name: &name,
        qtype: 1,
        qclass: 1,
        flags: 0,
    }
    .in_view(view)
    .to_owned();
    let mut q = name.to_vec();
    q.extend([0, 1, 0, 1]);
    let entry = crate::cache::Entry::failure(&q, 60, Instant::now());
    cache.insert(key.clone(), Arc::new(entry));
    key
}

#[test]
fn a_purge_drops_the_names_below_a_node_and_the_ptrs_in_every_view() {
    let cache = Cache::new(1 << 20);
    let t0 = Instant::now();
    let gone = [
        failure(&cache, "web.team-a.svc.cluster.local.", 0),
        failure(&cache, "web.team-a.svc.cluster.local.", 3),
        failure(&cache, "_http._tcp.web.team-a.svc.cluster.local.", 0),
        failure(&cache, "20.0.96.10.in-addr.arpa.", 0),
    ];
    let kept = [
        failure(&cache, "db.team-a.svc.cluster.local.", 0),
        failure(&cache, "21.0.96.10.in-addr.arpa.", 0),
        failure(&cache, "team-a.svc.cluster.local.", 0),
    ];
    let purge = Purge {
        nodes: [wire("web.team-a.svc.cluster.local.")].into(),
        exact: HashSet::new(),
        addresses: ["10.96.0.20".parse().unwrap()].into(),
    };
    assert_eq!(cache.purge(&purge, t0), gone.len());
    let found = |k: &Key| !matches!(cache.lookup(&k.as_ref(), t0, Duration::ZERO), Lookup::Miss);
    assert!(gone.iter().all(|k| !found(k)));
    assert!(kept.iter().all(found));
    // Without a watch nothing holds storing back.
    let fresh = || 30; // kubeadm's TTL: an answer made on the spot
    assert_eq!(cache.settled(&gone[0], t0, fresh), Settled::Yes);
    cache.set_coverage(Some(covering()), t0 - Duration::from_secs(3600));
    let after = |ms| t0 + Duration::from_millis(ms);
    assert_eq!(cache.settled(&gone[0], after(500), fresh), Settled::No);
    assert_eq!(cache.settled(&gone[3], t0, fresh), Settled::No);
    assert_eq!(cache.settled(&kept[0], t0, fresh), Settled::Yes);
    // Past the lag, an answer with its full TTL was made after the
    // purge; one aged 20 s in the cluster DNS's cache may predate it.
    assert_eq!(
        cache.settled(&gone[0], t0 + CLUSTER_DNS_LAG, fresh),
        Settled::Yes
    );
    assert_eq!(
        cache.settled(&gone[0], after(1000), || 10),
        Settled::Settling
    );
    assert_eq!(
        cache.settled(&gone[3], after(20_999), || 10),
        Settled::Settling
    );
    assert_eq!(cache.settled(&gone[0], after(21_000), || 10), Settled::Yes);
    // A longer TTL seen from the cluster DNS widens the window.
    assert_eq!(cache.settled(&kept[0], t0, || 60), Settled::Yes);
    assert_eq!(
        cache.settled(&gone[0], after(30_000), fresh),
        Settled::Settling
    );
    assert_eq!(cache.settled(&gone[0], after(31_000), fresh), Settled::Yes);
    // Only covered names teach it: an external name's day-long TTL not.
    let external = failure(&cache, "example.com.", 0);
    assert_eq!(cache.settled(&external, t0, || 86_400), Settled::Yes);
    assert_eq!(cache.settled(&gone[0], after(31_000), fresh), Settled::Yes);
}

/// A coverage of `svc.cluster.local.`.
fn covering() -> Arc<Coverage> {
    Arc::new(Coverage {
        svc_zone: wire("svc.cluster.local."),
        ..Coverage::default()
    })
}

#[test]
fn nothing_aged_is_held_within_a_window_of_the_watch_starting() {
    let cache = Cache::new(1 << 20);
    let t0 = Instant::now();
    let secs = |s| t0 + Duration::from_secs(s);
    let key = failure(&cache, "web.team-a.svc.cluster.local.", 0);
    cache.set_coverage(Some(covering()), t0);
    assert_eq!(
        cache.settled(&key, t0, || 30),
        Settled::Settling,
        "stored, not held"
    );
    assert_eq!(cache.settled(&key, secs(1), || 30), Settled::Yes);
    assert_eq!(cache.settled(&key, secs(20), || 10), Settled::Settling);
    assert_eq!(cache.settled(&key, secs(21), || 10), Settled::Yes);
    // A list update while current is not a start.
    cache.set_coverage(Some(covering()), secs(40));
    assert_eq!(cache.settled(&key, secs(41), || 10), Settled::Yes);
    // Stopped, then started again: a start.
    cache.set_coverage(None, secs(50));
    cache.set_coverage(Some(covering()), secs(60));
    assert_eq!(cache.settled(&key, secs(61), || 10), Settled::Settling);
}

#[test]
fn too_many_purges_to_remember_hold_nothing_aged_for_a_window() {
    let cache = Cache::new(1 << 20);
    let t0 = Instant::now() + Duration::from_secs(3600);
    cache.set_coverage(Some(covering()), t0 - Duration::from_secs(3600));
    let key = failure(&cache, "web.team-a.svc.cluster.local.", 0);
    let storm = Purge {
        nodes: (0..=MAX_REMEMBERED)
            .map(|i| wire(&format!("s{i}.team-b.svc.cluster.local.")))
            .collect(),
        ..Purge::default()
    };
    cache.purge(&storm, t0);
    assert!(crate::lock::lock(&cache.following.recent_nodes).is_empty());
    let secs = |s| t0 + Duration::from_secs(s);
    assert_eq!(cache.settled(&key, secs(2), || 10), Settled::Settling);
    assert_eq!(cache.settled(&key, secs(21), || 10), Settled::Yes);
}

#[test]
fn only_marked_answers_are_held_and_only_while_a_hold_is_set() {
    let cache = Cache::new(1 << 20);
    let t0 = Instant::now();
    let (covered, other) = (wire("web.a.svc.cluster.local."), wire("example.com."));
    let key = |name: &[u8]| {
        KeyRef {
            name,
            qtype: 1,
            qclass: 1,
            flags: 0,
        }
        .to_owned()
    };
    let marked = crate::cache::testing::answer(&covered, 5, t0);
    marked.mark_holdable();
    cache.insert(key(&covered), marked);
    cache.insert(key(&other), crate::cache::testing::answer(&other, 5, t0));
    let at =
        |k: &Key, secs| cache.lookup(&k.as_ref(), t0 + Duration::from_secs(secs), Duration::ZERO);
    // Holding off (the watch not current): expired is expired.
    assert!(matches!(at(&key(&covered), 6), Lookup::Miss));
    cache.set_hold(Duration::from_secs(60));
    assert!(matches!(at(&key(&covered), 2), Lookup::Fresh(_)));
    assert!(matches!(at(&key(&covered), 6), Lookup::Held(_)));
    assert!(matches!(at(&key(&covered), 64), Lookup::Held(_)));
    assert!(matches!(at(&key(&covered), 66), Lookup::Miss));
    assert!(matches!(at(&key(&other), 6), Lookup::Miss), "not marked");
    cache.set_hold(Duration::ZERO);
    assert!(matches!(at(&key(&covered), 6), Lookup::Miss));
    // A new watch forgets the marks.
    cache.set_hold(Duration::from_secs(60));
    cache.forget_holdable();
    assert!(matches!(at(&key(&covered), 2), Lookup::Miss));
}
