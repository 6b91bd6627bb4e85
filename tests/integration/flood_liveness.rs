//! What decides that the fail-open supervisor kills the server: progress,
//! which no client can stop, not answers, which a flood can.
//!
//! The lab of tests/integration/fail_open.rs: a "node" namespace where nodens (node
//! setup and fail-open on) holds the cluster DNS Service IP 10.96.0.10,
//! with a kube-proxy-like DNAT of that IP to CoreDNS in a "cluster DNS"
//! namespace. A kill withdraws the node setup, loses the cache and sends
//! the node's queries to the cluster DNS.
//!
//! - The flood: nodens (supervisor and server, as in a container) in a
//!   cgroup of 0.25 CPU; dnsperf, a second process, sends three times what
//!   nodens answers at that limit, from 64 source ports, for 60 s, while a
//!   client asks a cached name every 50 ms. The server must be degraded,
//!   not killed: same process at the end, node setup in place throughout,
//!   cache kept, hits answered throughout (no 5 s without one, a tenth
//!   at least).
//! - The stuck worker: one of two UDP workers stopped for good (a ptrace
//!   stop of that thread only; the process and its other threads run on).
//!   The queries the kernel hashes to its socket go unanswered, so the
//!   supervisor must kill the server within about a second and say which
//!   worker stopped.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

const SERVICE_IP: &str = "10.96.0.10";
const CLUSTER_DNS: &str = "10.77.0.2:53";
const CACHED: &str = "www.test.";

struct Lab {
    node: Netns,
    dns: Netns,
    core: CoreDns,
    nodens: Nodens,
    /// Last: the cgroup is removed once nodens is gone.
    _cpu: Option<CpuCgroup>,
}

impl Lab {
    /// The lab with `workers` UDP workers, and nodens in a cgroup of
    /// `cpu_quota` (µs per 100 ms) if given.
    fn start(workers: usize, cpu_quota: Option<u64>) -> Lab {
        let node = Netns::create("fl-node");
        let dns = Netns::create("fl-dns");
        let (a, b) = (
            format!("fl{:x}a", random_u64() as u16),
            format!("fl{:x}b", random_u64() as u16),
        );
        run_ok(std::process::Command::new("ip").args([
            "link", "add", &a, "netns", &node.name, "type", "veth", "peer", "name", &b, "netns",
            &dns.name,
        ]));
        node.run(&["ip", "addr", "add", "10.77.0.1/24", "dev", &a]);
        node.run(&["ip", "link", "set", &a, "up"]);
        node.run(&["ip", "route", "add", "default", "via", "10.77.0.2"]);
        dns.run(&["ip", "addr", "add", "10.77.0.2/24", "dev", &b]);
        dns.run(&["ip", "link", "set", &b, "up"]);
        // kube-proxy: the Service IP DNATed to the cluster DNS.
        for proto in ["udp", "tcp"] {
            node.run(&[
                "iptables",
                "-w",
                "5",
                "-t",
                "nat",
                "-A",
                "OUTPUT",
                "-d",
                SERVICE_IP,
                "-p",
                proto,
                "--dport",
                "53",
                "-j",
                "DNAT",
                "--to-destination",
                CLUSTER_DNS,
            ]);
        }
        let core = CoreDns::launch(
            &dns.exec(),
            CLUSTER_DNS.parse().unwrap(),
            &[("test.", test_zone(""))],
        );
        in_netns(&dns.name, || core.wait_ready());
        let toml = format!(
            "[server]\nlisten = [\"{SERVICE_IP}:53\"]\nworkers = {workers}\n\
             [metrics]\nlisten = \"127.0.0.1:9253\"\n\
             [node]\nsetup = true\nstate_dir = \"{TEST_STATE_DIR}\"\n\
             [[zone]]\nname = \".\"\nupstreams = [\"{CLUSTER_DNS}\"]\n"
        );
        // The whole `nodens serve`, supervisor and server, in the cgroup,
        // as in a container with a CPU limit.
        let cpu = cpu_quota.map(|quota| CpuCgroup::create("flood", quota, 100_000));
        let mut wrapper: Vec<String> = cpu.as_ref().map(|c| c.wrapper()).unwrap_or_default();
        wrapper.extend(node.exec().iter().map(|s| s.to_string()));
        let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        let mut nodens = Nodens::launch(&toml, &wrapper);
        in_netns(&node.name, || nodens.wait_ready());
        Lab {
            node,
            dns,
            core,
            nodens,
            _cpu: cpu,
        }
    }

    /// The server process under the supervisor.
    fn server_pid(&self) -> i32 {
        let out = run_ok(
            std::process::Command::new("pgrep").args(["-P", &self.nodens.proc.pid().to_string()]),
        );
        out.trim().parse().expect("one server process")
    }

    /// A UDP socket in the node namespace, bound to 0.0.0.0 (once nodens
    /// is withdrawn its queries leave the node for the cluster DNS).
    fn client_socket(&self) -> UdpSocket {
        in_netns(&self.node.name, || UdpSocket::bind("0.0.0.0:0").unwrap())
    }

    /// Whether 10.96.0.10 answers www.test. A within 2 s, asked again
    /// every 200 ms: a first miss on a machine busy with a build can take
    /// longer than one wait (a client retries too).
    fn answered(&self) -> bool {
        let socket = self.client_socket();
        let service: SocketAddr = format!("{SERVICE_IP}:53").parse().unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 1500];
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if socket
                .send_to(&Q::new(CACHED, Rt::A).to_bytes(), service)
                .is_err()
            {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            // Any answer of this or an earlier try.
            let until = Instant::now() + Duration::from_millis(200);
            while Instant::now() < until {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    break;
                };
                if from == service
                    && Reply::parse(buf[..n].to_vec(), Duration::ZERO).a()
                        == vec![ipv4("192.0.2.1")]
                {
                    return true;
                }
            }
        }
        false
    }

    /// How many queries for the cached name reached the cluster DNS, all
    /// logged (a barrier query asked of CoreDNS directly first).
    fn upstream_count(&self) -> usize {
        let addr: SocketAddr = CLUSTER_DNS.parse().unwrap();
        self.core.sync_log_via(|name| {
            in_netns(&self.dns.name, || {
                let _ = udp_query_timeout(addr, &Q::new(name, Rt::TXT), Duration::from_secs(2));
            })
        });
        self.core.count_queries(CACHED, "A")
    }

    /// The node namespace's UDP datagrams dropped on a full receive
    /// buffer (`RcvbufErrors` of /proc/net/snmp, counted per namespace).
    fn receive_buffer_drops(&self) -> u64 {
        let snmp = self.node.run(&["cat", "/proc/net/snmp"]);
        let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
        let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(name, _)| *name == "RcvbufErrors")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or_else(|| panic!("no RcvbufErrors in:\n{snmp}"))
    }

    fn interface_present(&self) -> bool {
        self.node
            .run(&["ip", "-o", "link"])
            .contains("nodelocaldns")
    }

    /// dnsperf in the node namespace against 10.96.0.10, asking the cached
    /// name from 64 source ports, for `seconds`; `rate` queries a second, or
    /// as fast as answers come back.
    fn dnsperf(&self, dir: &std::path::Path, seconds: u32, rate: Option<u64>) -> Proc {
        let data = dir.join("queries");
        std::fs::write(&data, format!("{CACHED} A\n")).unwrap();
        let mut cmd = wrapped_command(&self.node.exec(), &tool("dnsperf"));
        cmd.args(["-s", SERVICE_IP, "-c", "64", "-t", "1"])
            // A line per lost query otherwise.
            .args(["-O", "suppress=timeouts,congestion,sendfailed,unexpected"])
            .arg("-l")
            .arg(seconds.to_string())
            .arg("-d")
            .arg(&data);
        match rate {
            // Enough room for a second of losses at that rate.
            Some(qps) => cmd.args(["-Q", &qps.to_string(), "-q", "65000"]),
            None => cmd.args(["-q", "1000"]),
        };
        Proc::spawn("dnsperf", cmd)
    }
}

/// A number from dnsperf's summary: the line that starts with `label`.
fn dnsperf_figure(lines: &[String], label: &str) -> f64 {
    lines
        .iter()
        .find_map(|l| l.trim().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in dnsperf's output:\n{}", lines.join("\n")))
}

fn wait_dnsperf(mut perf: Proc, within: Duration) -> Vec<String> {
    let status = perf
        .wait_exit(within)
        .unwrap_or_else(|| panic!("dnsperf still running after {within:?}"));
    // Its reader threads may still be taking the last lines.
    std::thread::sleep(Duration::from_millis(200));
    let lines = perf.lines();
    assert!(status.success(), "dnsperf: {status}\n{}", lines.join("\n"));
    lines
}

#[test]
fn a_flood_degrades_the_server_and_never_gets_it_killed() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns, Need::Alone);
    // 0.25 CPU for the whole of `nodens serve`.
    let lab = Lab::start(1, Some(25_000));
    let server = lab.server_pid();
    assert!(lab.answered(), "the cached name is not answered");
    // Asked upstream (once, or again if a first try was lost): what
    // matters is that the flood adds none.
    let before = lab.upstream_count();
    assert!(before >= 1, "the cached name was never asked upstream");
    let dir = tempfile::tempdir().unwrap();

    // What nodens answers a second at this limit: 5 s as fast as it answers.
    let measure = lab.dnsperf(dir.path(), 5, None);
    let lines = wait_dnsperf(measure, Duration::from_secs(15));
    let capacity = dnsperf_figure(&lines, "Queries per second:");
    assert!(capacity > 100.0, "nodens answered {capacity} queries/s");
    let rate = (3.0 * capacity) as u64;
    eprintln!("nodens answers {capacity:.0} queries/s at 0.25 CPU; flooding at {rate}/s");

    // The flood, and a client asking the cached name every 50 ms.
    const FLOOD: Duration = Duration::from_secs(60);
    // It ends by its own limit (dnsperf 2.x could crash on a SIGINT while
    // its threads were still sending: SIGSEGV seen under load).
    let drops_before = lab.receive_buffer_drops();
    let flood = lab.dnsperf(dir.path(), FLOOD.as_secs() as u32, Some(rate));
    let start = Instant::now();
    let client = lab.client_socket();
    client
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let sent: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; 1 << 16]));
    // (seconds since the start when the answer came, its latency)
    let answers: Arc<Mutex<Vec<(Duration, Duration)>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (client, sent, answers) = (client.try_clone().unwrap(), sent.clone(), answers.clone());
        let done = done.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            // Bounded: the flood's length and a second for the last answers.
            while start.elapsed() < FLOOD + Duration::from_secs(1) && !done.load(Ordering::Relaxed)
            {
                let Ok(n) = client.recv(&mut buf) else {
                    continue;
                };
                let reply = Reply::parse(buf[..n].to_vec(), Duration::ZERO);
                let at = Instant::now();
                if reply.a() == vec![ipv4("192.0.2.1")]
                    && let Some(asked) = sent.lock().unwrap()[reply.id() as usize].take()
                {
                    answers.lock().unwrap().push((at - start, at - asked));
                }
            }
        })
    };
    let service: SocketAddr = format!("{SERVICE_IP}:53").parse().unwrap();
    client.connect(service).unwrap();
    let mut withdrawn = None;
    let mut next_look = Duration::ZERO;
    let mut asked = 0u32;
    for i in 0u16.. {
        let due = Duration::from_millis(50) * u32::from(i);
        if due >= FLOOD {
            break;
        }
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        sent.lock().unwrap()[i as usize] = Some(Instant::now());
        let _ = client.send(&Q::new(CACHED, Rt::A).id(i).to_bytes());
        asked += 1;
        if start.elapsed() >= next_look {
            // The node setup, once a second; gone, the test has failed.
            if !lab.interface_present() {
                withdrawn = Some(start.elapsed());
                break;
            }
            next_look += Duration::from_secs(1);
        }
    }
    let said: Vec<String> = lab
        .nodens
        .proc
        .lines()
        .into_iter()
        .filter(|l| l.contains("supervisor"))
        .collect();
    let said = said.join("\n");
    if let Some(at) = withdrawn {
        done.store(true, Ordering::Relaxed);
        drop(flood);
        panic!("the node setup was withdrawn {at:?} into the flood:\n{said}");
    }
    receiver.join().unwrap();
    let flood_lines = wait_dnsperf(flood, Duration::from_secs(20));
    let flood_sent = dnsperf_figure(&flood_lines, "Queries sent:");
    let flood_done = dnsperf_figure(&flood_lines, "Queries completed:");
    let dropped = lab.receive_buffer_drops() - drops_before;
    eprintln!(
        "flood: {flood_sent} sent ({:.0}/s), {flood_done} answered ({:.0}%), \
         {dropped} dropped on the server's full socket",
        flood_sent / FLOOD.as_secs_f64(),
        100.0 * flood_done / flood_sent.max(1.0)
    );

    let answers = answers.lock().unwrap().clone();
    let mut latencies: Vec<Duration> = answers.iter().map(|&(_, l)| l).collect();
    latencies.sort();
    let p99 = latencies
        .get(latencies.len() * 99 / 100)
        .copied()
        .unwrap_or_default();
    let p50 = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or_default();
    eprintln!(
        "client: {} of {asked} hits answered; latency p50 {p50:?}, p99 {p99:?}",
        answers.len()
    );
    // The longest stretch of the flood without an answered hit. At three
    // times capacity about one hit in three is answered (the kernel drops
    // the rest with the flood), so a second without one happens on a slow
    // machine (seen: 2 of 60, 370 of 1,200 answered); five in a row, at 20
    // hits a second, do not, unless the server stops answering.
    let mut times: Vec<Duration> = answers.iter().map(|&(at, _)| at).collect();
    times.sort();
    let longest_silence = std::iter::once(Duration::ZERO)
        .chain(times.iter().copied())
        .chain(std::iter::once(FLOOD))
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or(FLOOD);

    assert!(
        !said.contains("killing it"),
        "the supervisor killed the server under the flood:\n{said}"
    );
    assert!(
        !said.contains("withdrew"),
        "the node setup was withdrawn:\n{said}"
    );
    assert_eq!(lab.server_pid(), server, "the server was replaced");
    assert!(lab.interface_present(), "the interface is gone");
    // The cache was kept: the cached name (TTL 300) was not asked again.
    let after = lab.upstream_count();
    assert_eq!(after, before, "the cached name was asked upstream again");
    // The server was flooded: its socket overflowed, from the start to the
    // end. (How fast dnsperf sends depends on the CPU it gets beside a
    // build, so not its ratio of lost queries: seen 47 % lost beside two
    // busy loops, 60 % without; the kernel's count of what it dropped on
    // the full socket is what matters.)
    assert!(
        dropped as f64 >= flood_sent / 10.0,
        "{dropped} of {flood_sent} flood queries dropped on a full socket: not a flood"
    );
    assert!(
        longest_silence < Duration::from_secs(5),
        "no hit was answered for {longest_silence:?} of the flood"
    );
    assert!(
        answers.len() as u32 * 10 >= asked,
        "{} of {asked} hits answered: under a tenth",
        answers.len()
    );
    assert!(lab.answered(), "not answered after the flood");
}

/// A ptrace stop of one thread: it stays stopped while the tracer (the
/// thread that made this) lives, and the rest of its process runs on.
struct ThreadStop {
    tid: libc::pid_t,
}

impl ThreadStop {
    fn new(tid: libc::pid_t) -> ThreadStop {
        // SAFETY: ptrace(2) requests on a thread id, with no memory arguments.
        unsafe {
            assert_eq!(
                libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0),
                0,
                "PTRACE_SEIZE {tid}: {}",
                std::io::Error::last_os_error()
            );
            assert_eq!(libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0), 0);
            let mut status = 0;
            assert_eq!(libc::waitpid(tid, &mut status, libc::__WALL), tid);
            assert!(libc::WIFSTOPPED(status), "thread {tid}: status {status:#x}");
        }
        ThreadStop { tid }
    }
}

impl Drop for ThreadStop {
    fn drop(&mut self) {
        // SAFETY: ptrace(2) on the thread this tracer seized; it fails if
        // the thread is gone.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid, 0, 0) };
        // A traced thread that died (its process was killed) waits for its
        // tracer to reap it, and its process's exit waits for that.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let mut status = 0;
            // SAFETY: waitpid(2) on the thread this tracer seized.
            let r = unsafe { libc::waitpid(self.tid, &mut status, libc::__WALL | libc::WNOHANG) };
            if r < 0 || (r == self.tid && !libc::WIFSTOPPED(status)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The thread of `pid` named `name`.
fn thread_named(pid: i32, name: &str) -> libc::pid_t {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .unwrap_or_else(|| panic!("no thread {name} in process {pid}"))
}

#[test]
fn a_stuck_worker_gets_the_server_killed_and_named() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    let mut lab = Lab::start(2, None);
    assert!(lab.answered());
    let server = lab.server_pid();
    let from = lab.nodens.proc.line_count();
    // The test's thread is the tracer: the worker stays stopped until the
    // end of this scope.
    let stop = ThreadStop::new(thread_named(server, "udp-0"));
    let stopped = Instant::now();
    let line = lab
        .nodens
        .proc
        .wait_for_line(from, Duration::from_secs(5), "the kill", |l| {
            l.contains("killing it")
        });
    let after = stopped.elapsed();
    eprintln!("killed {after:?} after the worker stopped: {line}");
    drop(stop);
    assert!(
        line.contains(&format!("udp {SERVICE_IP}:53 #0")),
        "the kill does not name the stopped worker: {line}"
    );
    assert!(
        !line.contains("#1"),
        "the kill names a worker that ran: {line}"
    );
    assert!(after <= Duration::from_secs(2), "{after:?} to the kill");
    // Then the usual fail-open: withdrawn, answered by the cluster DNS.
    let status = lab
        .nodens
        .proc
        .wait_exit(Duration::from_secs(10))
        .expect("supervisor exit");
    assert!(!status.success(), "{status:?}");
    assert!(!lab.interface_present(), "interface left behind");
    assert!(lab.answered(), "the cluster DNS does not answer");
}
