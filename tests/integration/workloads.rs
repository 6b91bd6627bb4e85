//! Per-workload counters (`[server] workload_counters`) and `nodens top`,
//! behind a real kube-apiserver and a real CoreDNS, in a network namespace.
//! The "pods" are Pod objects bound to node `node-1` with their addresses
//! on the namespace's loopback (as in budgets.rs), so nodens's pod watch
//! names the pod behind each query's source address.
//!
//! - `nodens top --once` prints the pods of two namespaces and a client
//!   that is no pod, busiest first, with their rates;
//! - `nodens top` driven in tmux: the live screen names them, `s` sorts by
//!   the next column (NXDOMAIN/S brings the pod walking a search list to
//!   the top), `q` quits and gives the terminal back;
//! - the top-K metric family names the busiest pods, and holds at most 10
//!   series a metric while 10,000 distinct clients ask;
//! - `nodens doctor` against this nodens names the pod walking a search
//!   list in its `workload-search-tax` finding.

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::*;

const NODE: &str = "node-1";
const UPSTREAM: &str = "10.53.0.2";
/// team-a's pods: web-1 asks most, web-2 less.
const WEB1: &str = "127.0.0.51";
const WEB2: &str = "127.0.0.52";
/// team-b's pod, walking a search list: every answer NXDOMAIN.
const BATCH: &str = "127.0.0.53";
/// No pod holds it.
const STRANGER: &str = "127.0.0.54";

const OBJECTS: &str = "\
apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\n\
apiVersion: v1\nkind: Namespace\nmetadata: {name: team-b}\n";

struct Lab {
    nodens: Nodens,
    ns: Netns,
    _kube: Kube,
    _upstream: CoreDns,
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Lab {
    fn start() -> Lab {
        let ns = Netns::create("workloads");
        let kube = Kube::start(&ns);
        kube.create(OBJECTS);
        ns.add_to_lo(&[UPSTREAM, WEB1, WEB2, BATCH, STRANGER]);
        let upstream = CoreDns::launch(
            &ns.exec(),
            SocketAddr::new(UPSTREAM.parse().unwrap(), 53),
            &[
                (
                    "example.com.",
                    zone_file("example.com.", "* 60 IN A 192.0.2.99\n"),
                ),
                ("cluster.local.", zone_file("cluster.local.", "")),
            ],
        );
        in_netns(&ns.name, || upstream.wait_ready());
        kube.create_pod("team-a", "web-1", &[WEB1], NODE, "");
        kube.create_pod("team-a", "web-2", &[WEB2], NODE, "");
        kube.create_pod("team-b", "batch", &[BATCH], NODE, "");
        let dir = private_dir();
        let socket = dir.path().join("control.sock");
        let net = Net::fixed(21);
        let toml = Cfg::new(&net)
            .server_option("control_socket", &format!("\"{}\"", socket.display()))
            .server_option("workload_counters", "true")
            .server_option("workload_metrics", "true")
            .zone(Zone::new(
                ".",
                &[SocketAddr::new(UPSTREAM.parse().unwrap(), 53)],
            ))
            .raw(&kube.pod_watch(NODE))
            .to_toml();
        let mut nodens = Nodens::launch(&toml, &ns.exec());
        in_netns(&ns.name, || nodens.wait_ready());
        let lab = Lab {
            nodens,
            ns,
            _kube: kube,
            _upstream: upstream,
            socket,
            _dir: dir,
        };
        wait_until(secs(30), "the pod watch to hold 3 pods", || {
            let objects = lab.metric(
                "nodens_kubernetes_watch_objects",
                &[("resource", "pods"), ("watch", NODE)],
            );
            (objects == 3.0).then_some(())
        });
        lab
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        in_netns(&self.ns.name, || self.nodens.metric(name, labels))
    }

    /// Runs the workloads' queries until `stop` (bounded: 60 s), then `f`.
    fn while_asking<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let server = self.nodens.dns;
        let stop = AtomicBool::new(false);
        in_netns(&self.ns.name, || {
            std::thread::scope(|s| {
                // (source, queries a second, the n-th name)
                let load: [Load; 4] = [
                    (WEB1, 200, |_| "api.example.com.".into()),
                    (WEB2, 40, |i| format!("w{}.example.com.", i % 20)),
                    (BATCH, 60, |i| format!("job{i}.team-b.svc.cluster.local.")),
                    (STRANGER, 10, |_| "api.example.com.".into()),
                ];
                for (source, rate, name) in load {
                    let stop = &stop;
                    s.spawn(move || ask(source.parse().unwrap(), server, rate, name, stop));
                }
                let result = f();
                stop.store(true, Ordering::Relaxed);
                result
            })
        })
    }
}

/// A workload's queries: its address, queries a second, the n-th name.
type Load = (&'static str, u64, fn(u64) -> String);

/// Asks `name(i)` from `source` at `rate` a second until `stop` or 60 s.
fn ask(source: IpAddr, server: SocketAddr, rate: u64, name: fn(u64) -> String, stop: &AtomicBool) {
    let start = Instant::now();
    let gap = Duration::from_secs(1) / rate as u32;
    for i in 0..rate * 60 {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let q = Q::new(&name(i), Rt::A);
        let _ = udp_exchange_from(source, server, &q.to_bytes(), Duration::from_secs(2));
        if let Some(wait) = (start + gap * (i as u32 + 1)).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

/// The data rows of a `top` frame: (namespace, pod, q/s, nxdomain/s).
fn rows(frame: &str) -> Vec<(String, String, f64, f64)> {
    frame
        .lines()
        .skip_while(|l| !l.starts_with("NAMESPACE"))
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 7 {
                return None;
            }
            Some((
                f[0].into(),
                f[1].into(),
                f[2].parse().ok()?,
                f[4].parse().ok()?,
            ))
        })
        .collect()
}

fn pod_order(rows: &[(String, String, f64, f64)]) -> Vec<&str> {
    rows.iter().map(|r| r.1.as_str()).collect()
}

/// A tmux server of the test's own, so no user's session is touched.
struct Tmux(String);

impl Tmux {
    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.0)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    fn alive(&self) -> bool {
        self.run(&["has-session", "-t", "top"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

#[test]
fn top_names_the_pods_of_two_namespaces_live_and_in_metrics() {
    needs!(
        Need::Root,
        Need::CoreDns,
        Need::Kubernetes,
        Need::Tool("tmux")
    );
    let lab = Lab::start();
    let socket = lab.socket.clone();
    lab.while_asking(|| {
        // Once, as a script would.
        let out = Command::new(nodens_bin())
            .args(["top", "--once", "--interval", "2s", "--socket"])
            .arg(&socket)
            .output()
            .unwrap();
        let frame = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("{frame}");
        assert!(out.status.success(), "{out:?}");
        let table = rows(&frame);
        assert_eq!(
            pod_order(&table),
            ["web-1", "batch", "web-2", STRANGER],
            "{frame}"
        );
        let web1 = &table[0];
        assert_eq!(web1.0, "team-a");
        assert!((120.0..=260.0).contains(&web1.2), "web-1 at {} q/s", web1.2);
        let batch = &table[1];
        assert_eq!(batch.0, "team-b");
        assert!(batch.3 > 30.0, "batch's NXDOMAIN/s {}", batch.3);
        assert_eq!(table[3].0, "-", "a client that is no pod: {frame}");
        assert!(frame.contains("api.example.com."), "web-1's name: {frame}");

        // Live, in a terminal.
        let tmux = Tmux(format!("nodens-test-{}", std::process::id()));
        let command = format!(
            "{} top --interval 500ms --socket {}",
            nodens_bin().display(),
            socket.display()
        );
        let started = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "200",
            "-y",
            "30",
            &command,
        ]);
        assert!(started.status.success(), "{started:?}");
        let screen = wait_until(secs(10), "top's screen to show the pods' rates", || {
            let screen = tmux.screen();
            let r = rows(&screen);
            (r.len() == 4 && r.iter().all(|r| r.2 > 0.0)).then_some(screen)
        });
        eprintln!("--- nodens top ---\n{screen}");
        assert!(screen.starts_with("nodens top - 4 workloads"), "{screen}");
        assert!(screen.contains("sorted by Q/S"), "{screen}");
        assert_eq!(pod_order(&rows(&screen))[0], "web-1", "{screen}");
        tmux.run(&["send-keys", "-t", "top", "s"]);
        let sorted = wait_until(secs(5), "the sort to change", || {
            let screen = tmux.screen();
            screen.contains("sorted by NXDOMAIN/S").then_some(screen)
        });
        eprintln!("--- after s ---\n{sorted}");
        assert_eq!(pod_order(&rows(&sorted))[0], "batch", "{sorted}");
        tmux.run(&["send-keys", "-t", "top", "q"]);
        wait_until(secs(5), "q to end top", || (!tmux.alive()).then_some(()));

        // The top-K metrics, as a dashboard reads them.
        let web1 = wait_until(secs(20), "web-1 in the top-K family", || {
            let qps = lab.metric(
                "nodens_workload_queries_per_second",
                &[("namespace", "team-a"), ("pod", "web-1")],
            );
            (qps > 0.0).then_some(qps)
        });
        assert!((120.0..=260.0).contains(&web1), "web-1 at {web1} q/s");
        let expansions = lab.metric(
            "nodens_workload_search_expansions_per_lookup",
            &[("namespace", "team-b"), ("pod", "batch")],
        );
        assert!(
            expansions > 1.0,
            "batch's expansions per lookup: {expansions}"
        );
        let hits = lab.metric(
            "nodens_workload_cache_hit_ratio",
            &[("namespace", "team-a"), ("pod", "web-1")],
        );
        assert!(hits > 0.9, "web-1 asks one name: hit ratio {hits}");

        // doctor, run against this nodens, names the pod behind a finding.
        let (report, _) = doctor_against(&socket, "nameserver 127.0.0.1\noptions ndots:5\n");
        let tax = finding(&report, "workload-search-tax");
        assert!(tax.contains("team-b/batch:"), "{tax}");
        assert!(!tax.contains("web-1"), "web-1 walks no search list: {tax}");
        assert!(
            report.contains("team-a/web-1: "),
            "the busiest, listed: {report}"
        );
    });
}

#[test]
fn the_top_k_family_holds_its_bound_under_10000_clients() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let cfg = Cfg::new(&net)
        .server_option("workload_counters", "true")
        .server_option("workload_metrics", "true")
        .zone(Zone::new(".", &[core.addr]));
    let mut nodens = Nodens::start(&cfg);
    nodens.wait_ready();
    let www = Q::new("www.test.", Rt::A).to_bytes();
    // Three busy clients keep asking while 10,000 others ask once each.
    let busy: [IpAddr; 3] =
        ["127.0.0.201", "127.0.0.202", "127.0.0.203"].map(|a| a.parse().unwrap());
    let series = |nodens: &Nodens| {
        let text = nodens.metrics_text();
        text.lines()
            .filter(|l| l.starts_with("nodens_workload_queries_per_second{"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let _ = series(&nodens); // the first ranking: its window starts here
    let started = Instant::now();
    for i in 0..10_000u32 {
        let stranger = IpAddr::from([127, 1, (i / 250) as u8, (i % 250 + 1) as u8]);
        udp_exchange_from(stranger, nodens.dns, &www, Duration::from_secs(2)).expect("an answer");
        if i % 20 == 0 {
            for (k, source) in busy.iter().enumerate() {
                for _ in 0..=k {
                    udp_exchange_from(*source, nodens.dns, &www, Duration::from_secs(2))
                        .expect("an answer");
                }
            }
        }
    }
    // A ranking takes at least 5 s of rates.
    if let Some(rest) = Duration::from_secs(6).checked_sub(started.elapsed()) {
        std::thread::sleep(rest);
    }
    let top = series(&nodens);
    eprintln!(
        "{} clients in {:?}; the family:\n{}",
        10_003,
        started.elapsed(),
        top.join("\n")
    );
    assert_eq!(top.len(), 10, "at most 10 series, and 10 workloads asked");
    for (rank, source) in busy.iter().rev().enumerate() {
        assert!(
            top[..3]
                .iter()
                .any(|l| l.contains(&format!("pod=\"{source}\""))),
            "busy client {source} (rank {rank}) not among the first: {top:#?}"
        );
    }
    let all_workload_series = nodens
        .metrics_text()
        .lines()
        .filter(|l| l.starts_with("nodens_workload_"))
        .count();
    assert!(all_workload_series <= 50, "{all_workload_series} series");
}
