//! What `[cluster] follow_api`'s Service and EndpointSlice watch costs in
//! memory, next to the two other watchers of the same objects, measured in
//! the same run against the same real kube-apiserver: kube-proxy (on every
//! node) and CoreDNS's `kubernetes` plugin (the cluster DNS). A
//! measurement, not a pass/fail test: run it by hand (docs/performance.md,
//! "The Service and EndpointSlice watch"):
//!
//!   cargo test --release --test integration follow_api_memory:: -- --ignored --nocapture
//!
//! Services are created in steps, each with a ClusterIP, two ports and an
//! EndpointSlice of three ready endpoints (one with a hostname). After
//! each step every process is sampled once it holds every object
//! (nodens's object gauges; CoreDNS answering the last Service's name;
//! kube-proxy: its rules synced after the step, from its metrics). Also
//! printed: the objects' JSON sizes as the API serves them.

use std::time::Duration;

use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PostParams;
use support::*;

const STEPS: [usize; 5] = [0, 1000, 2000, 3000, 5000];
const NS: &str = "team-a";

/// VmRSS of `pid` in KiB: the median of 5 samples 200 ms apart.
fn rss_kib(pid: u32) -> u64 {
    let mut samples: Vec<u64> = (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        })
        .collect();
    samples.sort_unstable();
    samples[2]
}

/// One step's sample: Services, the RSS (KiB) of nodens, CoreDNS and
/// kube-proxy, and the JSON bytes of the Services and of the slices.
type Row = (usize, u64, u64, u64, usize, usize);

fn pod_ip(i: usize, k: usize) -> String {
    let n = i * 3 + k;
    format!("10.{}.{}.{}", 100 + n / 65536, (n / 256) % 256, n % 256)
}

/// Creates Services `from..to`, each with its EndpointSlice.
async fn create_services(client: kube::Client, from: usize, to: usize) {
    let services: kube::Api<Service> = kube::Api::namespaced(client.clone(), NS);
    let slices: kube::Api<EndpointSlice> = kube::Api::namespaced(client, NS);
    stream::iter(from..to)
        .for_each_concurrent(16, |i| {
            let (services, slices) = (services.clone(), slices.clone());
            async move {
                let name = format!("svc-{i}");
                let service: Service = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": NS,
                                 "labels": {"app": format!("app-{i}")}},
                    "spec": {"selector": {"app": format!("app-{i}")}, "ports": [
                        {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                        {"name": "metrics", "port": 9090, "protocol": "TCP"}]}
                }))
                .unwrap();
                services
                    .create(&PostParams::default(), &service)
                    .await
                    .unwrap();
                let endpoint = |k: usize| {
                    let mut e = serde_json::json!({
                        "addresses": [pod_ip(i, k)],
                        "conditions": {"ready": true, "serving": true, "terminating": false},
                        "nodeName": format!("node-{}", (i + k) % 5000),
                        "targetRef": {"kind": "Pod", "namespace": NS,
                                      "name": format!("{name}-pod-{k}"),
                                      "uid": format!("00000000-0000-0000-0000-{:012}", i * 3 + k)}
                    });
                    if k == 0 {
                        e["hostname"] = serde_json::json!(format!("{name}-0"));
                    }
                    e
                };
                let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("{name}-abcde"), "namespace": NS,
                                 "labels": {"kubernetes.io/service-name": name,
                                            "endpointslice.kubernetes.io/managed-by": "test"}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                              {"name": "metrics", "port": 9090, "protocol": "TCP"}],
                    "endpoints": [endpoint(0), endpoint(1), endpoint(2)]
                }))
                .unwrap();
                slices.create(&PostParams::default(), &slice).await.unwrap();
            }
        })
        .await;
}

/// kube-proxy in the test's namespace (iptables mode, its rules in that
/// namespace only), watching the same API.
fn kube_proxy(ns: &Netns, kube: &Kube) -> Option<Proc> {
    let bin = std::env::var_os("KUBE_PROXY")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let dir = std::path::Path::new(&std::env::var("HOME").ok()?).join(".cache/nodens");
            std::fs::read_dir(dir)
                .ok()?
                .flatten()
                .map(|e| e.path().join("kube-proxy"))
                .find(|p| p.exists())
        })?;
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["netns", "exec", &ns.name])
        .arg(bin)
        .arg(format!("--kubeconfig={}", kube.kubeconfig.display()))
        .args([
            "--proxy-mode=iptables",
            "--hostname-override=node-1",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
            "--conntrack-max-per-core=0",
            "--v=1",
        ]);
    Some(Proc::spawn("kube-proxy", cmd))
}

#[test]
#[ignore = "a measurement: run by hand with --ignored --nocapture"]
fn rss_per_watched_service_against_kube_proxy_and_coredns() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Kubernetes,
        Need::CoreDns
    );
    let ns = Netns::create("famem");
    let kube = Kube::start(&ns);
    kube.create(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"
    ));
    let core = KubeDns::start_bound(&ns, &kube);
    let probe = Q::new("kubernetes.default.svc.cluster.local.", Rt::A);
    wait_until(Duration::from_secs(30), "CoreDNS to serve", || {
        in_netns(&ns.name, || {
            udp_query_timeout(core.addr, &probe, Duration::from_millis(500))
        })
    });
    let toml = Cfg::new(&Net::fixed(19))
        .zone(Zone::new("cluster.local.", &[core.addr]))
        .log_level("info")
        .raw(&format!(
            "[cluster]\nfollow_api = true\n\n[kubernetes]\nkubeconfig = \"{}\"\n",
            kube.kubeconfig.display()
        ))
        .to_toml();
    let mut nodens = Nodens::launch(&toml, &ns.exec());
    in_netns(&ns.name, || nodens.wait_ready());
    let proxy = kube_proxy(&ns, &kube);
    if proxy.is_none() {
        eprintln!("no kube-proxy binary (set KUBE_PROXY): measured without it");
    }
    let plan = nodens::config::KubernetesPlan {
        kubeconfig: Some(kube.kubeconfig.clone()),
        node_name: None,
        streaming_lists: false,
        startup_taint: None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let objects = |resource: &str| {
        in_netns(&ns.name, || {
            nodens.metric(
                "nodens_kubernetes_watch_objects",
                &[("resource", resource), ("watch", "follow_api")],
            )
        })
    };

    let mut rows: Vec<Row> = Vec::new();
    let mut created = 0;
    for n in STEPS {
        in_netns(&ns.name, || {
            runtime.block_on(async {
                let client = nodens::kubernetes_client(&plan).await.unwrap();
                create_services(client, created, n).await;
            })
        });
        created = n;
        wait_until(
            Duration::from_secs(300),
            &format!("nodens to watch {n} Services"),
            || {
                // The `kubernetes` Service of `default` too.
                let whole =
                    objects("services") == (n + 1) as f64 && objects("endpointslices") == n as f64;
                whole.then_some(())
            },
        );
        if n > 0 {
            let q = Q::new(&format!("svc-{}.{NS}.svc.cluster.local.", n - 1), Rt::A);
            wait_until(
                Duration::from_secs(120),
                &format!("CoreDNS to know {n} Services"),
                || {
                    in_netns(&ns.name, || {
                        udp_query_timeout(core.addr, &q, Duration::from_millis(500))
                    })
                    .filter(|r| r.rcode() == rcode::NOERROR && !r.a().is_empty())
                },
            );
        }
        // Settle: kube-proxy's informers and rule sync (1 s minimum
        // interval) behind the API's last event.
        std::thread::sleep(Duration::from_secs(5));
        let json = |kind: &str| {
            kube.try_kubectl(&["get", kind, "-n", NS, "-o", "json"], None)
                .unwrap()
                .len()
        };
        let row = (
            n,
            rss_kib(nodens.proc.id()),
            rss_kib(core.proc.id()),
            proxy.as_ref().map_or(0, |p| rss_kib(p.id())),
            json("services"),
            json("endpointslices"),
        );
        eprintln!(
            "Services {:>5}: nodens {:>7} KiB, CoreDNS {:>7} KiB, kube-proxy {:>7} KiB",
            row.0, row.1, row.2, row.3
        );
        rows.push(row);
    }

    let (_, nodens0, core0, proxy0, _, _) = rows[0];
    println!(
        "\n| Services (+ slices of 3) | nodens RSS | per Service+slice | CoreDNS RSS | per | kube-proxy RSS | per | Service JSON | slice JSON |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &(n, a, b, c, sj, ej) in &rows {
        let per = |kib: u64, base: u64| {
            n.checked_div(1).filter(|n| *n > 0).map_or("-".into(), |n| {
                format!("{:.0} B", (kib as f64 - base as f64) * 1024.0 / n as f64)
            })
        };
        let each = |bytes: usize| {
            bytes
                .checked_div(n)
                .map_or("-".into(), |b| format!("{b} B"))
        };
        println!(
            "| {n} | {:.1} MiB | {} | {:.1} MiB | {} | {:.1} MiB | {} | {} | {} |",
            a as f64 / 1024.0,
            per(a, nodens0),
            b as f64 / 1024.0,
            per(b, core0),
            c as f64 / 1024.0,
            per(c, proxy0),
            each(sj),
            each(ej),
        );
    }
    let slope = |column: fn(&Row) -> u64| {
        let n = rows.len() as f64;
        let (sx, sy) = rows.iter().fold((0.0, 0.0), |(sx, sy), r| {
            (sx + r.0 as f64, sy + column(r) as f64)
        });
        let (mx, my) = (sx / n, sy / n);
        let (sxy, sxx) = rows.iter().fold((0.0, 0.0), |(sxy, sxx), r| {
            let dx = r.0 as f64 - mx;
            (sxy + dx * (column(r) as f64 - my), sxx + dx * dx)
        });
        sxy / sxx * 1024.0
    };
    println!(
        "\nLeast-squares slope per Service with its slice: nodens {:.0} B, CoreDNS {:.0} B, kube-proxy {:.0} B",
        slope(|r| r.1),
        slope(|r| r.2),
        slope(|r| r.3),
    );
    in_netns(&ns.name, || nodens.assert_alive());
}
