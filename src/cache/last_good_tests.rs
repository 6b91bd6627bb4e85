//! Unit tests of `cache::last_good`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::cache::Lookup;
use crate::cache::config::{CacheConfig, ZoneCacheConfig};
use crate::cache::follow::{Coverage, Purge};
use crate::cache::testing;
use crate::wire::name::from_text;

fn wire(s: &str) -> Box<[u8]> {
    from_text(s).unwrap().into_boxed_slice()
}

fn key(name: &str) -> Key {
    testing::key(&wire(name)).to_owned()
}

fn policy(stale_over_denial: bool, stale_max_age: Duration) -> CachePolicy {
    let global = CacheConfig {
        stale_over_denial,
        stale_max_age,
        ..CacheConfig::default()
    };
    ZoneCacheConfig::default().compile(&global).unwrap()
}

fn watching(services: &[&str]) -> Arc<Coverage> {
    Arc::new(Coverage {
        svc_zone: wire("svc.cluster.local."),
        services: services.iter().map(|s| wire(s)).collect(),
        ..Coverage::default()
    })
}

#[test]
fn stale_over_denial_keeps_a_positive_answer_within_the_stale_window() {
    let cache = Cache::new(1 << 20);
    let t0 = Instant::now();
    let k = key("www.example.com.");
    cache.insert(k.clone(), testing::answer(k.name(), 60, t0));
    let later = |s| t0 + Duration::from_secs(s);
    let on = policy(true, Duration::from_secs(100));
    // Fresh (a prefetch that brought a denial), then stale, then too old.
    assert!(matches!(
        cache.last_good(&k, &on, later(10)),
        Some((_, Vouched::Stale))
    ));
    assert!(matches!(
        cache.last_good(&k, &on, later(150)),
        Some((_, Vouched::Stale))
    ));
    assert!(cache.last_good(&k, &on, later(170)).is_none());
    // Off (the default), or without serve-stale: the denial is the answer.
    assert!(
        cache
            .last_good(&k, &policy(false, Duration::from_secs(100)), later(90))
            .is_none()
    );
    assert!(
        cache
            .last_good(&k, &policy(true, Duration::ZERO), later(90))
            .is_none()
    );
    // A name with no positive answer has nothing to keep.
    assert!(
        cache
            .last_good(&key("other.example.com."), &on, later(10))
            .is_none()
    );
}

#[test]
fn the_watch_vouches_for_a_service_that_exists_while_it_is_current() {
    let cache = Cache::new(1 << 20);
    let t0 = Instant::now();
    let off = policy(false, Duration::ZERO);
    let web = key("web.team-a.svc.cluster.local.");
    let pod = key("pod-1.web.team-a.svc.cluster.local.");
    cache.insert(web.clone(), testing::answer(web.name(), 60, t0));
    cache.insert(pod.clone(), testing::answer(pod.name(), 60, t0));
    cache.set_coverage(Some(watching(&["web.team-a.svc.cluster.local."])), t0);
    // An hour past its TTL, beyond any stale window: the Service exists.
    let late = t0 + Duration::from_secs(3600);
    assert!(
        cache.last_good(&web, &off, late).is_none(),
        "not current yet"
    );
    cache.set_vouching(true);
    assert!(matches!(
        cache.last_good(&web, &off, late),
        Some((_, Vouched::Cluster))
    ));
    assert!(
        cache.last_good(&pod, &off, late).is_none(),
        "an endpoint's name"
    );
    cache.set_vouching(false);
    assert!(
        cache.last_good(&web, &off, late).is_none(),
        "the watch is not current"
    );
}

#[test]
fn a_change_keeps_the_answer_aside_and_a_deletion_forgets_it() {
    let cache = Cache::new(1 << 20);
    let t0 = Instant::now();
    let off = policy(false, Duration::ZERO);
    let web = key("web.team-a.svc.cluster.local.");
    cache.insert(web.clone(), testing::answer(web.name(), 60, t0));
    cache.set_coverage(Some(watching(&["web.team-a.svc.cluster.local."])), t0);
    cache.set_vouching(true);
    let purge = Purge {
        nodes: [wire("web.team-a.svc.cluster.local.")].into(),
        ..Purge::default()
    };
    // Its slice changed (emptied in a rollout): the answer leaves the
    // cache but is kept for a denial that follows.
    assert_eq!(cache.purge(&purge, t0), 1);
    assert!(matches!(
        cache.lookup(&web.as_ref(), t0, Duration::ZERO),
        Lookup::Miss
    ));
    assert_eq!(cache.stats().kept_answers, 1);
    assert!(matches!(
        cache.last_good(&web, &off, t0),
        Some((_, Vouched::Cluster))
    ));
    // The Service is deleted: the coverage no longer has it, its purge
    // forgets what was kept, and nothing vouches for it.
    cache.set_coverage(Some(watching(&[])), t0);
    cache.purge(&purge, t0);
    assert_eq!(cache.stats().kept_answers, 0);
    assert!(cache.last_good(&web, &off, t0).is_none());
    // A watch that stops forgets all it kept.
    cache.insert(web.clone(), testing::answer(web.name(), 60, t0));
    cache.set_coverage(Some(watching(&["web.team-a.svc.cluster.local."])), t0);
    cache.purge(&purge, t0);
    assert_eq!(cache.stats().kept_answers, 1);
    cache.set_coverage(None, t0);
    assert_eq!(cache.stats().kept_answers, 0);
}
