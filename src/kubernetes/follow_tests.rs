//! Tests of the Service and EndpointSlice watch's views and changes.

use super::*;

use k8s_pb::api::core::v1::{ServicePort, ServiceSpec};

fn service(labels: &[(&str, &str)], spec: ServiceSpec) -> Service {
    let metadata = ObjectMeta {
        name: Some("web".into()),
        namespace: Some("a".into()),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..ObjectMeta::default()
    };
    Service {
        metadata: Some(metadata),
        spec: Some(spec),
        ..Service::default()
    }
}

#[test]
fn a_service_view_changes_with_what_dns_answers_from() {
    let spec = |port: i32| ServiceSpec {
        cluster_ip: Some("10.96.0.20".into()),
        ports: vec![ServicePort {
            name: Some("http".into()),
            port: Some(port),
            ..ServicePort::default()
        }],
        ..ServiceSpec::default()
    };
    let a = service_view(&service(&[], spec(80)));
    let b = service_view(&service(&[("x", "y")], spec(80)));
    let c = service_view(&service(&[], spec(8080)));
    assert_eq!(a, b, "a label changes no answer");
    assert_ne!(a, c, "a port changes the SRV answer");
    assert_eq!(&*a.addresses, &["10.96.0.20".parse::<IpAddr>().unwrap()]);
    let headless = service_view(&service(
        &[],
        ServiceSpec {
            cluster_ip: Some("None".into()),
            ..ServiceSpec::default()
        },
    ));
    assert!(headless.addresses.is_empty() && !headless.external);
    let external = service_view(&service(
        &[],
        ServiceSpec {
            r#type: Some("ExternalName".into()),
            external_name: Some("example.com".into()),
            ..ServiceSpec::default()
        },
    ));
    assert!(external.external);
}

#[test]
fn changes_are_found_both_ways() {
    let id = |n: &str| -> Id { ("a".into(), n.into()) };
    let old: BTreeMap<Id, u8> = [(id("x"), 1), (id("y"), 1), (id("z"), 1)].into();
    let new: BTreeMap<Id, u8> = [(id("x"), 1), (id("y"), 2), (id("w"), 1)].into();
    let mut seen = Vec::new();
    for_changed(&old, &new, |id, o, n| {
        seen.push((id.1.to_string(), o.copied(), n.copied()))
    });
    seen.sort();
    assert_eq!(
        seen,
        [
            ("w".to_string(), None, Some(1)),
            ("y".to_string(), Some(1), Some(2)),
            ("z".to_string(), Some(1), None)
        ]
    );
}

#[test]
fn a_headless_service_whose_slices_are_not_read_is_not_held() {
    let view = |addresses: &[&str], external| ServiceView {
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        external,
        digest: 0,
    };
    let id = |n: &str| -> Id { ("a".into(), n.into()) };
    let inner = Inner {
        svc_zone: crate::wire::name::from_text("svc.cluster.local.")
            .unwrap()
            .into(),
        services: [
            (id("web"), view(&["10.96.0.20"], false)),
            (id("db"), view(&[], false)),
            (id("manual"), view(&[], false)),
            (id("ext"), view(&[], true)),
        ]
        .into(),
        // Only db's slice carries the headless label, so only it is read.
        slices: [(
            ("a".into(), "db-1".into()),
            SliceView {
                service: Some("db".into()),
                addresses: ["10.244.0.5".parse().unwrap()].into(),
                digest: 0,
            },
        )]
        .into(),
        ..Inner::default()
    };
    let holds = |endpoints, name: &str| {
        FollowState::coverage(&inner, endpoints).holds(&crate::wire::name::from_text(name).unwrap())
    };
    use FollowEndpoints::{All, Headless};
    for name in ["db.a.svc.cluster.local.", "db-0.db.a.svc.cluster.local."] {
        assert!(holds(Headless, name), "{name}");
    }
    for name in [
        "manual.a.svc.cluster.local.",
        "x.manual.a.svc.cluster.local.",
    ] {
        assert!(!holds(Headless, name), "{name}: its slices are not read");
        assert!(holds(All, name), "{name}: every slice is read");
    }
    assert!(!holds(All, "ext.a.svc.cluster.local."));
    assert!(holds(Headless, "web.a.svc.cluster.local."));
    assert!(!holds(Headless, "pod-1.web.a.svc.cluster.local."));
    assert!(holds(All, "pod-1.web.a.svc.cluster.local."));
    // What the watch vouches exists (`cache::last_good`): a Service with a
    // ClusterIP always; a headless one whose slices list no endpoint only
    // for a rollout's moment after they emptied.
    let mut inner = inner;
    let t0 = std::time::Instant::now();
    FollowState::note_emptied(&mut inner, t0);
    let coverage = FollowState::coverage(&inner, All);
    let vouches =
        |name: &str, at| coverage.vouches_for(&crate::wire::name::from_text(name).unwrap(), at);
    let late = t0 + crate::cache::follow::EMPTY_GRACE;
    assert!(vouches("web.a.svc.cluster.local.", late));
    assert!(
        vouches("db.a.svc.cluster.local.", late),
        "its slice lists an endpoint"
    );
    assert!(
        vouches("manual.a.svc.cluster.local.", t0),
        "a rollout's moment"
    );
    assert!(
        !vouches("manual.a.svc.cluster.local.", late),
        "scaled to zero"
    );
    // Still empty later: the clock is not restarted; listed anew, it is.
    FollowState::note_emptied(&mut inner, late);
    assert_eq!(inner.emptied[&id("manual")], t0);
    inner.emptied.clear();
    FollowState::note_emptied(&mut inner, late);
    assert_eq!(inner.emptied[&id("manual")], late);
}
