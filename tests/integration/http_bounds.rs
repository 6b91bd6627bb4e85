//! The HTTP servers' bounds, attacked by a real second process: a python3
//! flooder opens 10,000 idle TCP connections to the metrics port (loopback
//! only) and holds them, sending nothing. Meanwhile the kubelet's probe
//! server (`metrics.probe_listen`) keeps answering /health and /ready,
//! /metrics answers once the idle connections in its slots time out,
//! nodens's memory and descriptors stay within the documented bound
//! (docs/security.md), and nodens closes every flood connection: those over
//! `metrics.max_connections` at once, the others after
//! `metrics.header_timeout`.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use support::*;

/// Connections the flooder opens and holds.
const FLOOD: usize = 10_000;
/// `metrics.max_connections` in the test.
const MAX_CONNECTIONS: usize = 32;
/// `metrics.header_timeout` in the test.
const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
/// What the HTTP servers may add to nodens's RSS with every slot held
/// (docs/security.md: max_connections x 64 KiB, 2 MiB at the default 32),
/// with room for the allocator's own slack.
const RSS_BOUND_KIB: u64 = 8 * 1024;
/// The kubelet's readiness probe timeout in the chart: a probe slower than
/// this fails.
const PROBE_BOUND: Duration = Duration::from_secs(2);

/// The flooder: `python3 -c FLOOD_PY HOST PORT N HOLD_SECS`. Raises its own
/// descriptor limit, connects N times (one at a time, sending nothing),
/// prints `opened N held H failed F [errors]` (a connection reset before
/// `connect` returned is opened but not held), then polls the held sockets
/// and prints `closed K` each time more of them were closed (or reset) by
/// the server, until all were or HOLD_SECS passed; it exits after that.
const FLOOD_PY: &str = r#"
import errno, resource, select, socket, sys, time
host, port, n, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
want = n + 256
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))
socks, reset, failed = [], 0, []
# Up to 100 connects in flight at a time (non-blocking): fewer than the
# listen backlog (128), so the kernel never drops a handshake's last ACK and
# leaves a connection open here that the server never saw.
pending, started, poller = {}, 0, select.poll()
give_up = time.monotonic() + 30
while (started < n or pending) and time.monotonic() < give_up:
    while started < n and len(pending) < 100:
        started += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex((host, port))
        if err in (0, errno.EINPROGRESS):
            pending[s.fileno()] = s
            poller.register(s.fileno(), select.POLLOUT)
        else:
            failed.append(errno.errorcode.get(err, str(err)))
            s.close()
    for fd, _ in poller.poll(1000):
        poller.unregister(fd)
        s = pending.pop(fd)
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err == 0:
            socks.append(s)
        elif err in (errno.ECONNRESET, errno.ECONNREFUSED):
            # Reset by the server before the connect completed here: closed at once.
            reset += 1
            s.close()
        else:
            failed.append(errno.errorcode.get(err, str(err)))
            s.close()
failed += ["ETIMEDOUT"] * (len(pending) + n - started)
print(f"opened {len(socks) + reset} held {len(socks)} failed {len(failed)} {failed[:3]}", flush=True)
poller = select.poll()
for s in socks:
    poller.register(s.fileno(), select.POLLIN | select.POLLRDHUP)
closed, deadline = 0, time.monotonic() + hold
while closed < len(socks) and time.monotonic() < deadline:
    done = poller.poll(200)
    for fd, _ in done:
        poller.unregister(fd)
    if done:
        closed += len(done)
        print(f"closed {closed}", flush=True)
print(f"end closed {closed}", flush=True)
time.sleep(max(0.0, deadline - time.monotonic()))
"#;

/// nodens's resident memory, KiB (`VmRSS` of /proc/PID/status).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// nodens's open descriptors.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// GETs `path` from `addr` every 50 ms on a thread until stopped; returns
/// the slowest answer and every failure.
struct Prober {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<(Duration, usize, Vec<String>)>,
}

impl Prober {
    fn start(addr: SocketAddr, path: &'static str) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let (mut slowest, mut count, mut failures) = (Duration::ZERO, 0, Vec::new());
            let until = Instant::now() + Duration::from_secs(60);
            while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                let start = Instant::now();
                match http_get(addr, path) {
                    Ok((200, _)) => {}
                    Ok((code, body)) => failures.push(format!("{code} {body}")),
                    Err(e) => failures.push(e.to_string()),
                }
                slowest = slowest.max(start.elapsed());
                count += 1;
                thread::sleep(ms(50));
            }
            (slowest, count, failures)
        });
        Prober { stop, thread }
    }

    fn finish(self) -> (Duration, usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn metric(addr: SocketAddr, name: &str, listener: &str) -> f64 {
    let (code, body) = http_get(addr, "/metrics").expect("/metrics");
    assert_eq!(code, 200, "{body}");
    sum_metric(&parse_metrics(&body), name, &[("listener", listener)])
}

#[test]
fn an_idle_connection_flood_leaves_probes_and_metrics_answering() {
    needs!(Need::Tool("python3"), Need::Alone);
    let net = Net::alloc();
    let probes = net.other(1, 9254);
    let mut nodens = Nodens::start(
        &Cfg::new(&net)
            .log_level("info")
            .metrics_option("probe_listen", &format!("\"{probes}\""))
            .metrics_option("max_connections", &MAX_CONNECTIONS.to_string())
            .metrics_option(
                "header_timeout",
                &format!("\"{}s\"", HEADER_TIMEOUT.as_secs()),
            ),
    );
    let metrics = net.metrics();
    let pid = nodens.proc.pid();
    assert_eq!(http_get(probes, "/health").unwrap().0, 200);
    assert_eq!(http_get(probes, "/ready").unwrap().0, 200);
    assert_eq!(
        http_get(probes, "/metrics").unwrap().0,
        404,
        "the probe server has no /metrics"
    );
    let (rss_before, fds_before) = (rss_kib(pid), fds(pid));

    let health = Prober::start(probes, "/health");
    let ready = Prober::start(probes, "/ready");
    let mut cmd = Command::new("python3");
    cmd.args(["-c", FLOOD_PY])
        .arg(metrics.ip().to_string())
        .arg(metrics.port().to_string())
        .arg(FLOOD.to_string())
        .arg("40");
    let mut flood = Proc::spawn("flood", cmd);
    let opened = flood.wait_for_line(0, secs(30), "opened", |l| l.starts_with("opened "));
    let opened_at = Instant::now();
    let words: Vec<&str> = opened.split_whitespace().collect();
    assert_eq!(
        (words[1], words[5]),
        (FLOOD.to_string().as_str(), "0"),
        "every connection opened: {opened}"
    );
    let held: usize = words[3].parse().unwrap();
    let (rss_flood, fds_flood) = (rss_kib(pid), fds(pid));
    eprintln!("flood: RSS {rss_before} -> {rss_flood} KiB, fds {fds_before} -> {fds_flood}");
    assert!(
        rss_flood < rss_before + RSS_BOUND_KIB,
        "nodens RSS grew from {rss_before} to {rss_flood} KiB under the flood (bound +{RSS_BOUND_KIB} KiB)"
    );
    assert!(
        fds_flood <= fds_before + MAX_CONNECTIONS + 4,
        "nodens held {fds_flood} descriptors under the flood ({fds_before} before, max_connections {MAX_CONNECTIONS})"
    );

    // /metrics: once the idle connections holding its slots time out.
    let scraped = wait_until(
        HEADER_TIMEOUT + secs(3),
        "/metrics during the flood",
        || {
            http_get(metrics, "/metrics")
                .ok()
                .filter(|(code, _)| *code == 200)
        },
    );
    let scraped_after = opened_at.elapsed();
    assert!(scraped.1.contains("nodens_http_connections"));

    // Every flood connection closed by nodens: over the cap at once, the
    // rest after the header timeout.
    let all_closed = format!("closed {held}");
    let closed = flood.wait_for_line(
        0,
        HEADER_TIMEOUT + secs(10),
        "every flood connection closed",
        |l| l.starts_with("end closed") || *l == all_closed,
    );
    let closed_after = opened_at.elapsed();
    assert_eq!(
        closed,
        all_closed,
        "nodens closed only some of the idle connections within {:?}",
        HEADER_TIMEOUT + secs(10)
    );
    let (health, ready) = (health.finish(), ready.finish());
    eprintln!(
        "flood: {held} held, /metrics after {scraped_after:?}, all closed after {closed_after:?}; \
         slowest /health {:?} ({} probes), /ready {:?} ({} probes)",
        health.0, health.1, ready.0, ready.1
    );
    for (path, (slowest, count, failures)) in [("/health", health), ("/ready", ready)] {
        assert!(
            failures.is_empty(),
            "{path} failed during the flood: {failures:?}"
        );
        assert!(count > 5, "{path} probed only {count} times");
        assert!(
            slowest < PROBE_BOUND,
            "{path} took {slowest:?} during the flood (bound {PROBE_BOUND:?})"
        );
    }
    // Each flood connection was refused at the cap or timed out in a slot
    // (slots free up while the flood goes on, so more than 32 get one).
    let refused = metric(metrics, "nodens_http_connections_refused_total", "metrics");
    let timeouts = metric(metrics, "nodens_http_header_timeouts_total", "metrics");
    assert!(timeouts >= 1.0, "no header timeout counted");
    assert!(
        refused + timeouts >= FLOOD as f64,
        "{refused} refused and {timeouts} timed out of {FLOOD}"
    );
    assert_eq!(
        metric(metrics, "nodens_http_connections_refused_total", "probes"),
        0.0,
        "the probe server refused a connection"
    );
    nodens.assert_alive();
}

/// `NODENS_METRICS_LISTEN` (what the chart sets from the pod's
/// `status.hostIP`) moves /metrics to that IP with the file's port: the
/// file's address is not served, and the probe server stays where it is.
#[test]
fn the_environment_gives_the_metrics_address() {
    let net = Net::alloc();
    let probes = net.other(1, 9254);
    let node_ip = net.ip(3);
    let cfg = Cfg::new(&net)
        .log_level("info")
        .metrics_option("probe_listen", &format!("\"{probes}\""));
    let env = format!("NODENS_METRICS_LISTEN={node_ip}");
    let mut nodens = Nodens::launch(&cfg.to_toml(), &["env", &env]);
    let moved = SocketAddr::new(node_ip, net.metrics().port());
    nodens.http = Some(moved);
    nodens.wait_ready();
    let (code, body) = http_get(moved, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("nodens_http_connections"));
    assert!(
        http_get(net.metrics(), "/metrics").is_err(),
        "the file's address is still served"
    );
    assert_eq!(http_get(probes, "/health").unwrap().0, 200);
}

/// SIGHUP starts the probe server and gives the metrics server new bounds
/// (on its own socket): with `max_connections = 1`, one idle connection
/// holding the slot gets a scrape refused; closing it frees the slot.
#[test]
fn a_reload_starts_the_probe_server_and_changes_the_bounds() {
    let net = Net::alloc();
    let probes = net.other(1, 9254);
    let mut nodens = Nodens::start(&Cfg::new(&net).log_level("info"));
    assert!(http_get(probes, "/health").is_err(), "no probe server yet");
    let reloaded = Cfg::new(&net)
        .log_level("info")
        .metrics_option("probe_listen", &format!("\"{probes}\""))
        .metrics_option("max_connections", "1");
    nodens.reload(&reloaded.to_toml());
    wait_until(secs(5), "the probe server after SIGHUP", || {
        (http_get(probes, "/health").ok()?.0 == 200).then_some(())
    });
    let mut idle = Vec::new();
    wait_until(secs(5), "a scrape refused while the slot is held", || {
        idle.push(std::net::TcpStream::connect(net.metrics()).unwrap());
        thread::sleep(ms(50));
        http_get(net.metrics(), "/metrics").is_err().then_some(())
    });
    drop(idle);
    wait_until(secs(5), "/metrics once the slot is free", || {
        (http_get(net.metrics(), "/metrics").ok()?.0 == 200).then_some(())
    });
    let refused = metric(
        net.metrics(),
        "nodens_http_connections_refused_total",
        "metrics",
    );
    assert!(refused >= 1.0, "no refusal counted");
    nodens.assert_alive();
}

/// Holds `HOST PORT` for HOLD seconds, as any local user can in the seconds
/// between a crash and the kubelet's restart: `python3 -c SQUAT_PY HOST
/// PORT HOLD`; prints `bound` once it listens.
const SQUAT_PY: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
print("bound", flush=True)
time.sleep(float(sys.argv[3]))
"#;

/// A squatter on the metrics and probe ports before nodens starts: before,
/// nodens set up, failed to bind, exited, and the pod crash-looped with the
/// node left without DNS. Now DNS is served at once, the failure is logged
/// and counted, and both HTTP servers start once the ports are free.
#[test]
fn squatted_http_ports_do_not_stop_dns() {
    needs!(Need::Tool("python3"), Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let probes = net.other(1, 9254);
    let mut squatters: Vec<Proc> = [net.metrics(), probes]
        .iter()
        .map(|addr| {
            let mut cmd = Command::new("python3");
            cmd.args([
                "-c",
                SQUAT_PY,
                &addr.ip().to_string(),
                &addr.port().to_string(),
                "30",
            ]);
            let mut p = Proc::spawn(&format!("squatter {addr}"), cmd);
            p.wait_for_line(0, secs(10), "the squatter bound", |l| l == "bound");
            p
        })
        .collect();
    let cfg = Cfg::new(&net)
        .log_level("info")
        .metrics_option("probe_listen", &format!("\"{probes}\""))
        .zone(Zone::new("test.", &[core.addr]));
    let mut nodens = Nodens::launch(&cfg.to_toml(), &[]);
    let www = Q::new("www.test.", Rt::A);
    let answered = wait_until(secs(20), "DNS answered beside the squatters", || {
        udp_query_timeout(nodens.dns, &www, ms(500))
    });
    assert_eq!(answered.a(), vec![ipv4("192.0.2.1")]);
    nodens
        .proc
        .wait_for_line(0, secs(5), "the bind failure logged", |l| {
            l.contains("cannot serve") && l.contains(&net.metrics().to_string())
        });
    for squatter in &mut squatters {
        squatter.kill();
    }
    wait_until(secs(10), "/health once the ports are free", || {
        (http_get(probes, "/health").ok()?.0 == 200).then_some(())
    });
    nodens.wait_ready();
    assert!(nodens.metric("nodens_http_bind_failures_total", &[("listener", "probes")]) >= 1.0);
    assert!(
        nodens.metric(
            "nodens_http_bind_failures_total",
            &[("listener", "metrics")]
        ) >= 1.0
    );
    nodens.assert_alive();
}
