//! Tests of the Service and EndpointSlice watch's views and changes.

use super::*;

fn service(json: serde_json::Value) -> Service {
    serde_json::from_value(json).unwrap()
}

#[test]
fn a_service_view_changes_with_what_dns_answers_from() {
    use serde_json::json;
    let meta = json!({"name": "web", "namespace": "a"});
    let labelled = json!({"name": "web", "namespace": "a", "labels": {"x": "y"}});
    let spec =
        |port: u16| json!({"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": port}]});
    let a = service_view(&service(json!({"metadata": meta, "spec": spec(80)})));
    let b = service_view(&service(json!({"metadata": labelled, "spec": spec(80)})));
    let c = service_view(&service(json!({"metadata": meta, "spec": spec(8080)})));
    assert_eq!(a, b, "a label changes no answer");
    assert_ne!(a, c, "a port changes the SRV answer");
    assert_eq!(&*a.addresses, &["10.96.0.20".parse::<IpAddr>().unwrap()]);
    let headless = service_view(&service(
        json!({"metadata": meta, "spec": {"clusterIP": "None"}}),
    ));
    assert!(headless.addresses.is_empty() && !headless.external);
    let external = service_view(&service(json!({"metadata": meta,
        "spec": {"type": "ExternalName", "externalName": "example.com"}})));
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
