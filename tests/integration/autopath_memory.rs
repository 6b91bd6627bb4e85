//! What autopath's pod watch costs in memory, next to the watch CoreDNS's
//! autopath needs (`pods verified`: every pod of the cluster), measured in
//! the same run against the same real kube-apiserver. A measurement, not a
//! pass/fail test: run it by hand (docs/performance.md, "Autopath's pod
//! watch"):
//!
//!   cargo test --release --test integration autopath_memory:: -- --ignored --nocapture
//!
//! Pods are created bound to the node nodens watches, with a status (an
//! address), in steps; after each step both servers are sampled once the
//! watch holds every pod (nodens's object gauge; CoreDNS answering the
//! last pod's `<ip>.<ns>.pod` name, which `pods verified` answers only for
//! a pod it knows). RSS growth per pod is given two ways: from no pod to
//! each step (fixed costs that come with the first large list, such as
//! the HTTP client's read buffers, weigh on the small steps), and the
//! least-squares slope over all steps.

use std::time::Duration;

use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use support::*;

const NODE: &str = "node-1";
const STEPS: [usize; 7] = [0, 1000, 2000, 3000, 4000, 5000, 20000];

fn pod_ip(i: usize) -> String {
    format!("10.{}.{}.{}", 100 + i / 65536, (i / 256) % 256, i % 256)
}

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

/// Creates pods `from..to` in `team-a` on [`NODE`], each with an address.
async fn create_pods(client: kube::Client, from: usize, to: usize) {
    let api: kube::Api<Pod> = kube::Api::namespaced(client, "team-a");
    stream::iter(from..to)
        .for_each_concurrent(16, |i| {
            let api = api.clone();
            async move {
                let name = format!("p{i}");
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": "team-a",
                                 "labels": {"app": format!("app-{}", i % 50)}},
                    "spec": {"nodeName": NODE, "containers": [{
                        "name": "app", "image": "registry.k8s.io/pause:3.10",
                        "ports": [{"containerPort": 8080}],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
                }))
                .unwrap();
                api.create(&PostParams::default(), &pod).await.unwrap();
                let ip = pod_ip(i);
                let status = serde_json::json!({"status": {
                    "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                    "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}]}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .unwrap();
            }
        })
        .await;
}

#[test]
#[ignore = "a measurement: run by hand with --ignored --nocapture"]
fn rss_per_watched_pod_against_coredns_pods_verified() {
    needs!(Need::Root, Need::Tool("ip"), Need::Kubernetes);
    let ns = Netns::create("apmem");
    let kube = Kube::start(&ns);
    kube.create("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n");
    let core = KubeDns::start_verified(&ns, &kube);
    let probe = Q::new("kubernetes.default.svc.cluster.local.", Rt::A);
    wait_until(Duration::from_secs(30), "CoreDNS to serve", || {
        in_netns(&ns.name, || {
            udp_query_timeout(core.addr, &probe, Duration::from_millis(500))
        })
    });
    let toml = Cfg::new(&Net::fixed(17))
        .zone(Zone::new("cluster.local.", &[core.addr]))
        .log_level("info")
        .raw(&format!(
            "[cluster]\nautopath = true\n\n{}",
            kube.pod_watch(NODE)
        ))
        .to_toml();
    let mut nodens = Nodens::launch(&toml, &ns.exec());
    in_netns(&ns.name, || nodens.wait_ready());
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

    let mut rows = Vec::new();
    let mut created = 0;
    for n in STEPS {
        in_netns(&ns.name, || {
            runtime.block_on(async {
                let client = nodens::kubernetes_client(&plan).await.unwrap();
                create_pods(client, created, n).await;
            })
        });
        created = n;
        wait_until(
            Duration::from_secs(120),
            &format!("nodens to watch {n} pods"),
            || {
                let held = in_netns(&ns.name, || {
                    nodens.metric(
                        "nodens_kubernetes_watch_objects",
                        &[("resource", "pods"), ("watch", NODE)],
                    )
                });
                (held == n as f64).then_some(())
            },
        );
        if n > 0 {
            let last = pod_ip(n - 1).replace('.', "-");
            let q = Q::new(&format!("{last}.team-a.pod.cluster.local."), Rt::A);
            wait_until(
                Duration::from_secs(120),
                &format!("CoreDNS to know {n} pods"),
                || {
                    in_netns(&ns.name, || {
                        udp_query_timeout(core.addr, &q, Duration::from_millis(500))
                    })
                    .filter(|r| r.rcode() == rcode::NOERROR && !r.a().is_empty())
                },
            );
        }
        std::thread::sleep(Duration::from_secs(3));
        let list = kube
            .try_kubectl(&["get", "pods", "-A", "-o", "json"], None)
            .unwrap();
        let rollup = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", nodens.proc.id()))
            .unwrap_or_default();
        let huge = rollup
            .lines()
            .find(|l| l.starts_with("AnonHugePages:"))
            .unwrap_or("AnonHugePages: ?")
            .to_string();
        eprintln!("nodens at {n} pods: {huge}");
        let row = (
            n,
            rss_kib(nodens.proc.id()),
            rss_kib(core.proc.id()),
            list.len(),
        );
        eprintln!(
            "pods {:>5}: nodens {:>7} KiB, CoreDNS {:>7} KiB",
            row.0, row.1, row.2
        );
        rows.push(row);
    }

    // A process started now lists them all at once, with no churn behind
    // it: what a node restarted among its pods holds.
    let last = *STEPS.last().unwrap();
    let fresh_toml = toml.replace("127.0.17.", "127.0.18.");
    let mut fresh = Nodens::launch(&fresh_toml, &ns.exec());
    in_netns(&ns.name, || fresh.wait_ready());
    wait_until(
        Duration::from_secs(60),
        "a fresh nodens to list the pods",
        || {
            let held = in_netns(&ns.name, || {
                fresh.metric(
                    "nodens_kubernetes_watch_objects",
                    &[("resource", "pods"), ("watch", NODE)],
                )
            });
            (held == last as f64).then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    let fresh_kib = rss_kib(fresh.proc.id());
    if std::env::var_os("MIMALLOC_SHOW_STATS").is_some() {
        fresh.terminate();
    }

    let (_, nodens0, core0, _) = rows[0];
    println!(
        "\n| pods on the node | nodens RSS | per pod | CoreDNS (pods verified) RSS | per pod | ratio | pod JSON |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &(n, nodens_kib, core_kib, json) in &rows {
        let per = |kib: u64, base: u64| (kib as f64 - base as f64) * 1024.0 / n.max(1) as f64;
        let (a, b) = (per(nodens_kib, nodens0), per(core_kib, core0));
        let (per_nodens, per_core, ratio, per_json) = match json.checked_div(n) {
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
            Some(per_pod) => (
                format!("{a:.0} B"),
                format!("{b:.0} B"),
                format!("{:.3}", a / b),
                format!("{per_pod} B"),
            ),
        };
        println!(
            "| {n} | {:.1} MiB | {per_nodens} | {:.1} MiB | {per_core} | {ratio} | {per_json} |",
            nodens_kib as f64 / 1024.0,
            core_kib as f64 / 1024.0,
        );
    }
    let slope = |column: fn(&(usize, u64, u64, usize)) -> u64| {
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
    let (fit_nodens, fit_core) = (slope(|r| r.1), slope(|r| r.2));
    println!(
        "\nLeast-squares slope over the steps: nodens {fit_nodens:.0} B per pod, CoreDNS {fit_core:.0} B per pod, ratio {:.3}",
        fit_nodens / fit_core
    );
    let per_fresh = (fresh_kib as f64 - nodens0 as f64) * 1024.0 / last as f64;
    println!(
        "\nA nodens started with the {last} pods there: {:.1} MiB, {per_fresh:.0} B per pod over a fresh process with none",
        fresh_kib as f64 / 1024.0
    );
    in_netns(&ns.name, || nodens.assert_alive());
}
