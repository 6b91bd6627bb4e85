//! Budgets per namespace (`[budget]`) behind a real kube-apiserver and a
//! real CoreDNS upstream, in a network namespace. The "pods" are Pod
//! objects bound to node `node-1` with their addresses on the namespace's
//! loopback, so each query comes from the pod's own address and nodens's
//! pod watch maps it to the pod's namespace.
//!
//! - a pod flooding random names at 20,000 q/s beside a pod of another
//!   namespace asking at 100 q/s: every quiet answer is right and none is
//!   refused or lost; the flooder is REFUSED, and the metric names its
//!   namespace (and not the quiet one). The quiet pod's latency with and
//!   without the flood is printed, not asserted (docs/performance.md);
//! - a namespace over its miss budget gets REFUSED for further misses
//!   while its cache hits are still answered, and another namespace's
//!   misses still go upstream;
//! - clients that are no pod are budgeted by address, each its own, under
//!   one metric label; SIGHUP switches the action to drop.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::*;

const NODE: &str = "node-1";
/// CoreDNS, the upstream.
const UPSTREAM: &str = "10.53.0.2";
/// The pod of `team-noisy`.
const FLOODER: &str = "127.0.0.41";
/// The pod of `team-quiet`.
const QUIET: &str = "127.0.0.42";
/// Addresses no pod holds.
const STRANGER: &str = "127.0.0.43";
const OTHER_STRANGER: &str = "127.0.0.44";

/// What the quiet pod's names resolve to (`*.quiet.example.com`).
const QUIET_A: &str = "192.0.2.42";

const OBJECTS: &str = "\
apiVersion: v1\nkind: Namespace\nmetadata: {name: team-noisy}\n---\n\
apiVersion: v1\nkind: Namespace\nmetadata: {name: team-quiet}\n";

/// The budgets of the tests: 2,000 q/s a namespace (or address), 50
/// misses in flight, but 2 for `team-noisy`'s misses.
fn budget(action: &str) -> String {
    format!(
        "[budget]\nqueries_per_second = 2000\nmisses_in_flight = 50\naction = \"{action}\"\n\n\
         [[budget.namespace]]\nname = \"team-noisy\"\nmisses_in_flight = 2\n"
    )
}

struct Lab {
    nodens: Nodens,
    ns: Netns,
    _kube: Kube,
    _upstream: CoreDns,
    net: Net,
}

impl Lab {
    /// The lab, with `budget` (or none: no pod watch to wait for).
    fn start(budget: Option<&str>) -> Lab {
        let ns = Netns::create("budget");
        let kube = Kube::start(&ns);
        kube.create(OBJECTS);
        ns.add_to_lo(&[UPSTREAM, FLOODER, QUIET, STRANGER, OTHER_STRANGER]);
        let records = "*.quiet 60 IN A 192.0.2.42\n* 60 IN A 192.0.2.99\n";
        let upstream = CoreDns::launch_with_blocks(
            &ns.exec(),
            SocketAddr::new(UPSTREAM.parse().unwrap(), 53),
            &[("example.com.", zone_file("example.com.", records))],
            // Every answer under slow.example.net after 1 s (TTL 0), within the upstream timeout (2 s).
            &[("slow.example.net.", "erratic {\n    delay 1 1s\n  }")],
        );
        in_netns(&ns.name, || upstream.wait_ready());
        kube.create_pod("team-noisy", "flooder", &[FLOODER], NODE, "");
        kube.create_pod("team-quiet", "quiet", &[QUIET], NODE, "");

        let net = Net::fixed(20);
        let toml = Cfg::new(&net)
            .auto_workers()
            .zone(Zone::new(
                ".",
                &[SocketAddr::new(UPSTREAM.parse().unwrap(), 53)],
            ))
            .raw(&format!(
                "{}\n{}",
                kube.pod_watch(NODE),
                budget.unwrap_or_default()
            ))
            .to_toml();
        let mut nodens = Nodens::launch(&toml, &ns.exec());
        in_netns(&ns.name, || nodens.wait_ready());
        let lab = Lab {
            nodens,
            ns,
            _kube: kube,
            _upstream: upstream,
            net,
        };
        if budget.is_none() {
            return lab;
        }
        wait_until(
            Duration::from_secs(30),
            "the pod watch to hold 2 pods",
            || {
                let synced = lab.metric(
                    "nodens_kubernetes_watch_synced",
                    &[("resource", "pods"), ("watch", NODE)],
                );
                let objects = lab.metric(
                    "nodens_kubernetes_watch_objects",
                    &[("resource", "pods"), ("watch", NODE)],
                );
                (synced == 1.0 && objects == 2.0).then_some(())
            },
        );
        lab
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        in_netns(&self.ns.name, || self.nodens.metric(name, labels))
    }

    fn exceeded(&self, namespace: &str, budget: &str, action: &str) -> f64 {
        self.metric(
            "nodens_budget_exceeded_total",
            &[
                ("namespace", namespace),
                ("budget", budget),
                ("action", action),
            ],
        )
    }

    fn server(&self) -> SocketAddr {
        self.net.nodens()
    }
}

/// A query for `name` (A, recursion desired), written by hand so that a
/// flood of them costs the sender little.
fn packet(id: u16, name: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(64);
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.extend_from_slice(&[0, 0, 1, 0, 1]);
    p
}

/// What a flood came to.
#[derive(Debug, Default)]
struct Flood {
    sent: u64,
    answered: u64,
    refused: u64,
    other: u64,
}

/// Sends `rate` queries a second for fresh random names under
/// `flood.example.com` from `source` (an address of the current network
/// namespace) to `server` for `duration`, at most `rate * duration`
/// queries, and counts the replies. Bounded in count and time.
fn flood(source: IpAddr, server: SocketAddr, rate: u64, duration: Duration) -> Flood {
    let sock = UdpSocket::bind(SocketAddr::new(source, 0)).unwrap();
    sock.connect(server).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let total = rate * duration.as_millis() as u64 / 1000;
    let salt: u32 = rand::random();
    let sending = AtomicBool::new(true);
    let (answered, refused, other) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let mut sent = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            let deadline = Instant::now() + duration + Duration::from_secs(10);
            let mut buf = [0u8; 1500];
            while Instant::now() < deadline {
                match sock.recv(&mut buf) {
                    Ok(n) if n >= 4 => match buf[3] & 0xf {
                        0 => answered.fetch_add(1, Ordering::Relaxed),
                        5 => refused.fetch_add(1, Ordering::Relaxed),
                        _ => other.fetch_add(1, Ordering::Relaxed),
                    },
                    Ok(_) => other.fetch_add(1, Ordering::Relaxed),
                    Err(_) if sending.load(Ordering::Relaxed) => continue,
                    // Nothing for 300 ms after the last query: done.
                    Err(_) => break,
                };
            }
        });
        let start = Instant::now();
        let per_ms = rate.div_ceil(1000);
        let mut tick = 0u64;
        while sent < total && start.elapsed() < duration {
            for _ in 0..per_ms {
                let name = format!("r{salt:08x}{sent:x}.flood.example.com");
                let _ = sock.send(&packet(sent as u16, &name));
                sent += 1;
            }
            tick += 1;
            sleep_until(start, Duration::from_millis(tick));
        }
        sending.store(false, Ordering::Relaxed);
    });
    Flood {
        sent,
        answered: answered.into_inner(),
        refused: refused.into_inner(),
        other: other.into_inner(),
    }
}

/// The quiet pod: `count` queries at `rate` a second, one at a time, for
/// 30 names it asks again and again. Each is its latency, or what was
/// wrong with it (lost, refused, a wrong answer).
fn ask_quietly(server: SocketAddr, rate: u64, count: u64) -> Vec<Result<Duration, String>> {
    let source: IpAddr = QUIET.parse().unwrap();
    let start = Instant::now();
    (0..count)
        .map(|i| {
            sleep_until(start, Duration::from_millis(i * 1000 / rate));
            let name = format!("q{}.quiet.example.com.", i % 30);
            let q = Q::new(&name, Rt::A).id(i as u16);
            let asked = Instant::now();
            let raw = udp_exchange_from(source, server, &q.to_bytes(), Duration::from_secs(3))
                .ok_or_else(|| format!("query {i} ({name}) lost"))?;
            let reply = Reply::parse(raw, asked.elapsed());
            if reply.rcode() != 0 || reply.a() != [ipv4(QUIET_A)] {
                return Err(format!("query {i} ({name}): {:?}", reply.msg));
            }
            Ok(reply.elapsed)
        })
        .collect()
}

/// [`ask_quietly`], every answer right: the latencies.
fn quiet(server: SocketAddr, rate: u64, count: u64) -> Vec<Duration> {
    ask_quietly(server, rate, count)
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("the quiet pod: {e}")))
        .collect()
}

/// The quiet pod's latencies as a line, and its p99.
fn report(what: &str, latencies: &[Duration]) -> Duration {
    let p99 = percentile(latencies, 0.99);
    println!(
        "quiet pod {what}: p50 {:?} p99 {p99:?} max {:?}",
        percentile(latencies, 0.5),
        percentile(latencies, 1.0)
    );
    p99
}

fn percentile(latencies: &[Duration], p: f64) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[test]
fn a_flooding_namespace_is_limited_and_its_neighbour_served() {
    needs!(Need::Root, Need::Kubernetes, Need::CoreDns);
    let lab = Lab::start(Some(&budget("refuse")));
    let server = lab.server();
    let flooder: IpAddr = FLOODER.parse().unwrap();

    let alone = in_netns(&lab.ns.name, || quiet(server, 100, 300));
    let (flooded, beside) = in_netns(&lab.ns.name, || {
        std::thread::scope(|s| {
            let flooding = s.spawn(|| flood(flooder, server, 20_000, Duration::from_secs(3)));
            let latencies = quiet(server, 100, 300);
            (flooding.join().unwrap(), latencies)
        })
    });
    println!("flood from team-noisy: {flooded:?}");
    let (p99_alone, p99_beside) = (report("alone", &alone), report("beside the flood", &beside));
    println!(
        "p99 ratio (flood / alone): {:.2}",
        p99_beside.as_secs_f64() / p99_alone.as_secs_f64()
    );

    assert!(flooded.refused > 0, "the flooder limited: {flooded:?}");
    assert!(
        flooded.answered + flooded.refused + flooded.other <= flooded.sent,
        "{flooded:?}"
    );
    let named = lab.exceeded("team-noisy", "rate", "refuse");
    assert!(named > 0.0, "the metric names team-noisy");
    assert!(
        named <= flooded.sent as f64,
        "counted once a query at most: {named} of {flooded:?}"
    );
    assert_eq!(lab.exceeded("team-quiet", "rate", "refuse"), 0.0);
    assert_eq!(lab.exceeded("team-quiet", "misses", "refuse"), 0.0);
    assert_eq!(lab.exceeded("", "rate", "refuse"), 0.0, "no client unknown");
}

/// Sends each packet from one socket at once and collects the replies by
/// id for up to `wait` (bounded), until `expected` replies came.
fn burst(
    source: IpAddr,
    server: SocketAddr,
    packets: &[Vec<u8>],
    expected: usize,
    wait: Duration,
) -> Vec<(u16, u16)> {
    let sock = UdpSocket::bind(SocketAddr::new(source, 0)).unwrap();
    sock.connect(server).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    for p in packets {
        sock.send(p).unwrap();
    }
    let deadline = Instant::now() + wait;
    let mut replies = Vec::new();
    let mut buf = [0u8; 1500];
    while replies.len() < expected && Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf)
            && n >= 4
        {
            replies.push((
                u16::from_be_bytes([buf[0], buf[1]]),
                u16::from(buf[3] & 0xf),
            ));
        }
    }
    replies.sort();
    replies
}

#[test]
fn over_its_miss_budget_a_namespace_still_gets_its_hits() {
    needs!(Need::Root, Need::Kubernetes, Need::CoreDns);
    let lab = Lab::start(Some(&budget("refuse")));
    let server = lab.server();
    let (flooder, quiet_pod): (IpAddr, IpAddr) = (FLOODER.parse().unwrap(), QUIET.parse().unwrap());
    in_netns(&lab.ns.name, || {
        // A name the flooder's namespace has in the cache.
        let cached = packet(100, "q1.quiet.example.com");
        let first = udp_exchange_from(flooder, server, &cached, Duration::from_secs(3));
        assert_eq!(first.map(|r| r[3] & 0xf), Some(0));
        // Ten misses to an upstream that answers after 1 s: two go up (the
        // budget of team-noisy), eight are REFUSED; the cached name is
        // answered meanwhile.
        let mut packets: Vec<Vec<u8>> = (0..10u16)
            .map(|i| packet(i, &format!("n{i}.slow.example.net")))
            .collect();
        packets.push(cached);
        let (noisy, neighbour) = std::thread::scope(|s| {
            let noisy = s.spawn(|| burst(flooder, server, &packets, 11, Duration::from_secs(8)));
            // team-quiet's misses still go upstream, beside them.
            let own = [
                packet(7, "x1.slow.example.net"),
                packet(8, "x2.slow.example.net"),
            ];
            let neighbour = burst(quiet_pod, server, &own, 2, Duration::from_secs(8));
            (noisy.join().unwrap(), neighbour)
        });
        let refused: Vec<u16> = noisy.iter().filter(|r| r.1 == 5).map(|r| r.0).collect();
        let answered: Vec<u16> = noisy.iter().filter(|r| r.1 == 0).map(|r| r.0).collect();
        assert_eq!(refused.len(), 8, "{noisy:?}");
        assert_eq!(answered.len(), 3, "{noisy:?}");
        assert!(answered.contains(&100), "the hit is served: {noisy:?}");
        assert_eq!(neighbour, [(7, 0), (8, 0)], "the neighbour's misses");
    });
    assert_eq!(lab.exceeded("team-noisy", "misses", "refuse"), 8.0);
    assert_eq!(lab.exceeded("team-quiet", "misses", "refuse"), 0.0);
}

#[test]
fn unknown_clients_are_budgeted_by_address_and_reload_changes_the_action() {
    needs!(Need::Root, Need::Kubernetes, Need::CoreDns);
    let lab = Lab::start(Some(&budget("refuse")));
    let server = lab.server();
    let (stranger, other): (IpAddr, IpAddr) =
        (STRANGER.parse().unwrap(), OTHER_STRANGER.parse().unwrap());
    in_netns(&lab.ns.name, || {
        let flooded = flood(stranger, server, 20_000, Duration::from_secs(1));
        assert!(flooded.refused > 0, "the stranger limited: {flooded:?}");
        // Another address has a budget of its own.
        let q = packet(1, "q2.quiet.example.com");
        let reply = udp_exchange_from(other, server, &q, Duration::from_secs(3));
        assert_eq!(reply.map(|r| r[3] & 0xf), Some(0), "another address served");
    });
    assert!(
        lab.exceeded("", "rate", "refuse") > 0.0,
        "counted under namespace=\"\""
    );
    let text = in_netns(&lab.ns.name, || lab.nodens.metrics_text());
    assert!(!text.contains(STRANGER), "no series names an address");

    // SIGHUP: the action becomes drop.
    let reloads = || lab.metric("nodens_config_reloads_total", &[("result", "success")]);
    let before = reloads();
    let toml = std::fs::read_to_string(&lab.nodens.config_path).unwrap();
    lab.nodens
        .reload(&toml.replace("action = \"refuse\"", "action = \"drop\""));
    wait_until(Duration::from_secs(10), "the reload", || {
        (reloads() > before).then_some(())
    });
    in_netns(&lab.ns.name, || {
        let flooded = flood(stranger, server, 20_000, Duration::from_secs(1));
        assert_eq!(flooded.refused, 0, "dropped, not refused: {flooded:?}");
        assert!(flooded.answered < flooded.sent, "{flooded:?}");
    });
    assert!(lab.exceeded("", "rate", "drop") > 0.0);
}

/// Not a check: the quiet pod's latency beside the same flood with no
/// budget, for docs/performance.md (`--ignored --nocapture`).
#[test]
#[ignore = "a measurement, not a check: run with --ignored --nocapture"]
fn measure_the_flood_without_budgets() {
    needs!(Need::Root, Need::Kubernetes, Need::CoreDns);
    let lab = Lab::start(None);
    let server = lab.server();
    let flooder: IpAddr = FLOODER.parse().unwrap();
    let alone = in_netns(&lab.ns.name, || quiet(server, 100, 300));
    let (flooded, beside) = in_netns(&lab.ns.name, || {
        std::thread::scope(|s| {
            let flooding = s.spawn(|| flood(flooder, server, 20_000, Duration::from_secs(3)));
            let asked = ask_quietly(server, 100, 300);
            (flooding.join().unwrap(), asked)
        })
    });
    println!("flood from team-noisy, no budget: {flooded:?}");
    let wrong: Vec<&String> = beside.iter().filter_map(|r| r.as_ref().err()).collect();
    println!(
        "quiet pod beside the flood: {} of 300 lost or wrong {wrong:?}",
        wrong.len()
    );
    let answered: Vec<Duration> = beside
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    let (p99_alone, p99_beside) = (
        report("alone", &alone),
        report("beside the flood", &answered),
    );
    println!(
        "p99 ratio (flood / alone), no budget: {:.2}",
        p99_beside.as_secs_f64() / p99_alone.as_secs_f64()
    );
}
