//! `upstream_service`: a zone's upstream named as a Kubernetes Service,
//! its address taken from the environment Kubernetes gives a pod
//! (`<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`), as node-cache's
//! `-upstreamsvc`.

use std::process::Command;

use support::*;

fn config(net: &Net) -> String {
    format!(
        "[server]\nlisten = [\"{dns}\"]\nworkers = 1\n[metrics]\nlisten = \"{http}\"\n\
         [[zone]]\nname = \".\"\nupstream_service = \"kube-dns-upstream\"\n",
        dns = net.nodens(),
        http = net.metrics(),
    )
}

#[test]
fn forwards_to_the_service_in_the_environment() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let host = format!("KUBE_DNS_UPSTREAM_SERVICE_HOST={}", net.upstream(0).ip());
    let port = format!("KUBE_DNS_UPSTREAM_SERVICE_PORT={}", net.upstream(0).port());
    let mut nodens = Nodens::launch(&config(&net), &["env", &host, &port]);
    nodens.wait_ready();

    let r = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    assert_eq!(core.wait_queries("www.test.", "A", 1, secs(5)), 1);
}

#[test]
fn a_missing_service_variable_names_the_line() {
    let net = Net::alloc();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodens.toml");
    std::fs::write(&path, config(&net)).unwrap();
    let out = Command::new(nodens_bin())
        .env_remove("KUBE_DNS_UPSTREAM_SERVICE_HOST")
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:8:", path.display())),
        "no line 8 (upstream_service) in: {stderr}"
    );
    assert!(
        stderr.contains("KUBE_DNS_UPSTREAM_SERVICE_HOST"),
        "{stderr}"
    );
}
