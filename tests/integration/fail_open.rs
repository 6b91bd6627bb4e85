//! Fail-open: when the server dies or hangs, queries to the cluster DNS
//! Service IP are answered by the cluster DNS within 2 seconds.
//!
//! Two namespaces the test makes: a "node" where nodens holds the Service
//! IP 10.96.0.10 on its interface, with a kube-proxy-like DNAT of that IP to
//! the cluster DNS, and a "cluster DNS" namespace, reached over a veth,
//! where CoreDNS answers `test.` on 10.77.0.2:53. A client in the node asks
//! 10.96.0.10 every 50 ms while the server is killed (SIGKILL) or frozen
//! (SIGSTOP): the time to the first answer after that is the gap. The third
//! test kills the supervisor and the server together, as an OOM kill of the
//! whole container does, with `nodens node guard` watching from outside.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::*;

const SERVICE_IP: &str = "10.96.0.10";

thread_local! {
    /// For a test whose nodens runs as a uid of its own: the binary its labs
    /// run (one that uid can run) and the state directory (one of its own:
    /// nodens makes it that uid's, and the shared one stays root's).
    static OWN_UID: std::cell::RefCell<Option<(std::path::PathBuf, std::path::PathBuf)>> =
        const { std::cell::RefCell::new(None) };
}
const CLUSTER_DNS: &str = "10.77.0.2:53";

struct Lab {
    node: Netns,
    _dns: Netns,
    core: CoreDns,
    nodens: Nodens,
    toml: String,
}

impl Lab {
    fn start() -> Lab {
        Lab::start_with("auto", "")
    }

    /// The lab with nodens's rules in `backend`, and `server` added to the
    /// `[server]` section.
    fn start_with(backend: &str, server: &str) -> Lab {
        Lab::start_after(backend, server, |_| {})
    }

    /// Like `start_with`, running `before` in the node once its network is
    /// up, before nodens starts.
    fn start_after(backend: &str, server: &str, before: impl FnOnce(&Netns)) -> Lab {
        let own_uid = OWN_UID.with(|o| o.borrow().clone());
        let chart_caps = own_uid.is_some();
        let (bin, state_dir) = own_uid.unwrap_or_else(|| (nodens_bin(), TEST_STATE_DIR.into()));
        let node = Netns::create("fo-node");
        let dns = Netns::create("fo-dns");
        let (a, b) = (
            format!("fo{:x}a", random_u64() as u16),
            format!("fo{:x}b", random_u64() as u16),
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
            "[server]\nlisten = [\"{SERVICE_IP}:53\"]\nworkers = 1\n{server}\n\
             [metrics]\nlisten = \"127.0.0.1:9253\"\n\
             [node]\nsetup = true\nbackend = \"{backend}\"\nstate_dir = \"{state}\"\n\
             [[zone]]\nname = \".\"\nupstreams = [\"{CLUSTER_DNS}\"]\n",
            state = state_dir.display()
        );
        before(&node);
        // A nodens of its own uid runs under the chart's capabilities.
        let wrapper = match chart_caps {
            true => [&node.exec()[..], &AS_THE_CHART_RUNS_IT[..]].concat(),
            false => node.exec().to_vec(),
        };
        let mut nodens = Nodens::launch_bin(&toml, &wrapper, &bin);
        in_netns(&node.name, || nodens.wait_ready());
        Lab {
            node,
            _dns: dns,
            core,
            nodens,
            toml,
        }
    }

    /// Starts nodens again with the same configuration, and waits until it
    /// serves. Returns the previous one, so its supervisor can finish.
    fn restart(&mut self) -> Nodens {
        let old = std::mem::replace(
            &mut self.nodens,
            Nodens::launch(&self.toml, &self.node.exec()),
        );
        let nodens = &mut self.nodens;
        in_netns(&self.node.name, || nodens.wait_ready());
        old
    }

    /// `nodens node guard` on the same configuration, in the node namespace.
    fn guard(&self) -> Proc {
        let mut cmd = wrapped_command(&self.node.exec(), &nodens_bin());
        cmd.args(["node", "guard", "--config"])
            .arg(&self.nodens.config_path);
        Proc::spawn("guard", cmd)
    }

    /// The server process under the supervisor (`nodens serve --supervised`).
    fn server_pid(&self) -> i32 {
        server_of(&self.nodens)
    }

    /// Whether 10.96.0.10 answers www.test. A within 200 ms. The client
    /// socket is bound to 0.0.0.0 (the harness's binds to loopback): once
    /// nodens is withdrawn the query leaves the node, from 10.77.0.1.
    fn answered(&self) -> bool {
        let service: SocketAddr = format!("{SERVICE_IP}:53").parse().unwrap();
        let query = Q::new("www.test.", Rt::A).to_bytes();
        in_netns(&self.node.name, || {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            socket
                .set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut buf = [0u8; 1500];
            socket.send_to(&query, service).is_ok()
                && socket.recv_from(&mut buf).is_ok_and(|(n, from)| {
                    from == service
                        && Reply::parse(buf[..n].to_vec(), Duration::ZERO).a()
                            == vec![ipv4("192.0.2.1")]
                })
        })
    }

    /// Sends `signal` to the server and returns how long until 10.96.0.10
    /// answers again (asking every 50 ms, for at most 6 s).
    fn gap_after(&self, signal: libc::c_int) -> Option<Duration> {
        self.gap_after_signals(&[(self.server_pid(), signal)])
    }

    /// Like `gap_after`, with each signal sent to its pid in turn.
    fn gap_after_signals(&self, signals: &[(i32, libc::c_int)]) -> Option<Duration> {
        assert!(self.answered(), "not answered before the fault");
        let start = Instant::now();
        for &(pid, signal) in signals {
            // SAFETY: kill(2) on a pid of this test's processes.
            assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        }
        while start.elapsed() < Duration::from_secs(6) {
            if self.answered() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// What the node looks like, for a failure message.
    fn debug(&self) -> Vec<String> {
        vec![
            self.node.run(&["ip", "-o", "addr"]),
            self.node.run(&["ip", "route"]),
            self.node.run(&["iptables-save"]),
            self.node.run(&["nft", "list", "ruleset"]),
            self.node
                .run(&["dig", "+time=1", "+tries=1", "@10.96.0.10", "www.test"]),
        ]
    }
}

/// The server process under a supervisor.
fn server_of(nodens: &Nodens) -> i32 {
    let out =
        run_ok(std::process::Command::new("pgrep").args(["-P", &nodens.proc.pid().to_string()]));
    out.trim().parse().expect("one server process")
}

fn check_gap(signal: libc::c_int, what: &str) {
    let mut lab = Lab::start();
    let gap = lab
        .gap_after(signal)
        .unwrap_or_else(|| panic!("no answer within 6 s after {what}: {:#?}", lab.debug()));
    eprintln!("answered again {gap:?} after {what}");
    assert!(
        gap <= Duration::from_secs(2),
        "{gap:?} without answers after {what}"
    );
    // The answer came from the cluster DNS, over the DNAT.
    assert!(
        lab.core
            .wait_queries("www.test.", "A", 1, Duration::from_secs(5))
            >= 1
    );
    // The supervisor withdrew the interface, and exits with the server's status.
    let status = lab
        .nodens
        .proc
        .wait_exit(Duration::from_secs(10))
        .expect("supervisor exit");
    assert!(!status.success(), "{status:?}");
    let links = lab.node.run(&["ip", "-o", "link"]);
    assert!(
        !links.contains("nodelocaldns"),
        "interface left behind: {links}"
    );
}

#[test]
fn a_killed_server_fails_open_within_two_seconds() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    check_gap(libc::SIGKILL, "SIGKILL");
}

#[test]
fn a_hung_server_fails_open_within_two_seconds() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    check_gap(libc::SIGSTOP, "SIGSTOP");
}

#[test]
fn the_guard_fails_open_when_the_whole_container_is_killed() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    let mut lab = Lab::start();
    let mut guard = lab.guard();
    guard.wait_for_line(0, Duration::from_secs(10), "watching", |l| {
        l.contains("guard: watching the node setup")
    });
    let withdrew = |g: &Proc| {
        g.lines()
            .iter()
            .filter(|l| l.contains("guard: withdrew the node setup"))
            .count()
    };
    for round in 1..=3 {
        // An OOM kill of the container: the supervisor and the server at once.
        let (supervisor, server) = (lab.nodens.proc.pid() as i32, lab.server_pid());
        let from = guard.line_count();
        let gap = lab
            .gap_after_signals(&[(supervisor, libc::SIGKILL), (server, libc::SIGKILL)])
            .unwrap_or_else(|| panic!("no answer within 6 s after the kill: {:#?}", lab.debug()));
        eprintln!(
            "round {round}: answered again {gap:?} after killing the supervisor and the server"
        );
        assert!(gap <= Duration::from_secs(2), "{gap:?} without answers");
        guard.wait_for_line(from, Duration::from_secs(5), "the withdraw", |l| {
            l.contains("guard: withdrew the node setup")
        });
        assert_eq!(withdrew(&guard), round, "{:#?}", guard.lines());
        let links = lab.node.run(&["ip", "-o", "link"]);
        assert!(!links.contains("nodelocaldns"), "interface left: {links}");
        // The kubelet starts the container again at once: the new server
        // sets the node up and takes the traffic back, however its start
        // falls against the guard's withdraw.
        drop(lab.restart());
        assert!(lab.answered());
        assert!(lab.node.run(&["ip", "-o", "addr"]).contains("10.96.0.10"));
    }
    assert!(
        lab.core
            .wait_queries("www.test.", "A", 1, Duration::from_secs(5))
            >= 1,
        "no answer came from the cluster DNS"
    );

    // A clean stop removes the setup itself; the guard withdraws nothing.
    assert!(lab.nodens.terminate().success());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(withdrew(&guard), 3, "{:#?}", guard.lines());
    assert!(guard.is_alive(), "the guard exited: {:#?}", guard.lines());
    guard.signal(libc::SIGTERM);
    assert!(
        guard
            .wait_exit(Duration::from_secs(5))
            .is_some_and(|s| s.success())
    );
}

#[test]
fn a_kill_and_an_immediate_restart_never_race() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // The server is killed and a new one started at once, ten times, with
    // the guard running: the supervisor's and the guard's withdraws must
    // never interleave with the new server's setup (each start serves, and
    // `nodens node status` finds everything in place). With iptables, the
    // backend where a chain removed under a new server's feet fails its setup.
    let mut lab = Lab::start_with("iptables", "");
    let mut guard = lab.guard();
    guard.wait_for_line(0, Duration::from_secs(10), "watching", |l| {
        l.contains("guard: watching the node setup")
    });
    let mut previous = Vec::new();
    for round in 0..10 {
        let pids = if round % 2 == 0 {
            vec![lab.server_pid()]
        } else {
            vec![lab.nodens.proc.pid() as i32, lab.server_pid()]
        };
        for pid in pids {
            // SAFETY: kill(2) on a pid of this test's processes.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        previous.push(lab.restart());
        let node_status = || {
            std::process::Command::new("ip")
                .args(["netns", "exec", &lab.node.name])
                .arg(nodens_bin())
                .args(["node", "status", "--config"])
                .arg(&lab.nodens.config_path)
                .output()
                .unwrap()
        };
        let status = node_status();
        // A withdraw may still be finishing the moment the server is ready;
        // the server waits for it before its setup, so give status a moment.
        let mut complete = status.status.success();
        for _ in 0..20 {
            if complete {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            complete = node_status().status.success();
        }
        assert!(
            complete,
            "round {round}: node setup not in place: {}\n{:#?}",
            String::from_utf8_lossy(&status.stdout),
            lab.debug()
        );
        assert!(lab.answered(), "round {round}: not answered");
    }
    assert!(guard.is_alive(), "the guard exited: {:#?}", guard.lines());
    // The killed servers' supervisors saw the new server's claim and left
    // its setup alone.
    let left_alone = previous
        .iter()
        .flat_map(|n| n.proc.lines())
        .filter(|l| l.contains("another nodens holds the node setup"))
        .count();
    eprintln!("supervisors that found a new server's claim: {left_alone} of 5");
}

#[test]
fn a_successor_keeps_the_node_when_its_predecessor_dies() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // The old server is killed after handing over and before its SIGTERM
    // (an OOM kill in a rollout): its supervisor must not withdraw the node
    // setup that the new process now serves.
    let dir = private_dir();
    let socket = dir.path().join("handover.sock");
    let mut lab = Lab::start_with("auto", &format!("handover_socket = {:?}", socket));
    let mut old = lab.restart();
    lab.nodens
        .proc
        .wait_for_line(0, Duration::from_secs(10), "took over", |l| {
            l.contains("handover: took over")
        });
    let from = old.proc.line_count();
    // SAFETY: kill(2) on the old server's pid.
    assert_eq!(unsafe { libc::kill(server_of(&old), libc::SIGKILL) }, 0);
    assert!(old.proc.wait_exit(Duration::from_secs(10)).is_some());
    let said = old.proc.lines()[from..].join("\n");
    assert!(
        said.contains("leaving the node setup in place") || said.contains("leaving it in place"),
        "the old supervisor did not leave the node setup alone: {said}"
    );
    assert!(!said.contains("withdrew"), "{said}");
    assert!(
        lab.answered(),
        "the new process does not answer: {:#?}",
        lab.debug()
    );
    let links = lab.node.run(&["ip", "-o", "addr"]);
    assert!(links.contains("10.96.0.10"), "address withdrawn: {links}");
}

// ---- the claim on the node setup, against other processes ------------------------

/// The uid of a process on the node that is not nodens.
const NOBODY: u32 = 65534;

/// The file of nodens's claim on the node setup of `node` (a claim is per
/// network namespace: named after its inode).
/// The pids holding a `flock` on the file at `path` (`/proc/locks`).
fn lock_holders(path: &str) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Vec::new();
    };
    let ino = meta.ino().to_string();
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter_map(|l| {
            // "1: FLOCK  ADVISORY  WRITE 1234 00:2a:123456 0 EOF"
            let f: Vec<&str> = l.split_whitespace().collect();
            let (pid, dev_ino) = (f.get(4)?, f.get(5)?);
            (f.get(1) == Some(&"FLOCK") && dev_ino.rsplit(':').next() == Some(&ino))
                .then(|| pid.parse().ok())?
        })
        .collect()
}

fn claim_file(node: &Netns) -> String {
    use std::os::unix::fs::MetadataExt;
    let netns = std::fs::metadata(format!("/var/run/netns/{}", node.name))
        .unwrap()
        .ino();
    format!("{TEST_STATE_DIR}/claim-nodelocaldns-{netns}")
}

/// The claim's directory, as nodens makes it (0700, root's) before any test
/// nodens ran: so a squatter meets the directory, not its absence.
fn state_dir_exists() {
    use std::os::unix::fs::DirBuilderExt;
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(TEST_STATE_DIR);
}

/// After a kill of the server: its supervisor withdrew the node setup and
/// exited, and the cluster DNS answers the Service IP.
fn withdrawn_after_the_kill(lab: &mut Lab) {
    lab.nodens
        .proc
        .wait_exit(Duration::from_secs(10))
        .expect("supervisor exit");
    let said = lab.nodens.proc.lines().join("\n");
    assert!(said.contains("withdrew the node setup"), "{said}");
    let links = lab.node.run(&["ip", "-o", "link"]);
    assert!(
        !links.contains("nodelocaldns"),
        "interface left behind: {links}"
    );
    assert!(lab.answered(), "{:#?}", lab.debug());
    assert!(
        lab.core
            .wait_queries("www.test.", "A", 1, Duration::from_secs(5))
            >= 1
    );
}

#[test]
fn a_squatter_before_a_cold_start_cannot_stop_the_node_failing_open() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // A process of another uid on the host network squats the name nodens
    // used to claim the node setup with (an abstract Unix name), and tries
    // the claim file, before nodens starts. nodens must start at once, and
    // fail open when its server is killed.
    state_dir_exists();
    let mut squatter = None;
    let lab = Lab::start_after("auto", "", |node| {
        let mut p = intruder(
            &node.exec(),
            Some(NOBODY),
            "squat",
            &["nodelocaldns", &claim_file(node)],
        );
        p.wait_for_line(0, secs(10), "the squat", |l| l.contains("claim refused"));
        squatter = Some(p);
    });
    let squatter = squatter.unwrap();
    let mut lab = lab;
    assert!(
        squatter
            .lines()
            .iter()
            .any(|l| l.contains("squatting the abstract name")),
        "{:#?}",
        squatter.lines()
    );
    let gap = lab
        .gap_after(libc::SIGKILL)
        .unwrap_or_else(|| panic!("no answer within 6 s after SIGKILL: {:#?}", lab.debug()));
    eprintln!("with a squatter: answered again {gap:?} after SIGKILL");
    assert!(gap <= Duration::from_secs(2), "{gap:?} without answers");
    withdrawn_after_the_kill(&mut lab);
}

#[test]
fn a_squatter_during_a_rolling_update_cannot_stop_the_node_failing_open() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // The squatter waits for the moment of a rolling update when the old
    // server has exited and the new one has not yet claimed the node setup,
    // and takes the claim's name then.
    let dir = private_dir();
    let socket = dir.path().join("handover.sock");
    let mut lab = Lab::start_with("auto", &format!("handover_socket = {:?}", socket));
    let squatter = intruder(
        &lab.node.exec(),
        Some(NOBODY),
        "squat",
        &["nodelocaldns", &claim_file(&lab.node), "--wait"],
    );
    let mut old = lab.restart();
    lab.nodens
        .proc
        .wait_for_line(0, secs(10), "took over", |l| {
            l.contains("handover: took over")
        });
    assert!(old.terminate().success());
    // The new server claims once the old one is gone: watched until it
    // holds the lock (never the squatter, at any look), not one look
    // after a fixed sleep.
    let server = lab.server_pid();
    let claim = claim_file(&lab.node);
    wait_until(secs(10), "the new server holding the claim", || {
        assert!(
            !squatter
                .lines()
                .iter()
                .any(|l| l.contains("holding the claim")),
            "the squatter holds the claim: {:#?}",
            squatter.lines()
        );
        (lock_holders(&claim) == [server]).then_some(())
    });
    let gap = lab
        .gap_after(libc::SIGKILL)
        .unwrap_or_else(|| panic!("no answer within 6 s after SIGKILL: {:#?}", lab.debug()));
    eprintln!("squatter in a rolling update: answered again {gap:?} after SIGKILL");
    assert!(gap <= Duration::from_secs(2), "{gap:?} without answers");
    withdrawn_after_the_kill(&mut lab);
}

/// A rolling update may stop the old process the moment the new one has its
/// sockets, before the old one has heard the new one's `ready`: the old
/// process waits for the handover's outcome before it decides whose the node
/// setup is, and leaves it to the new one. (Before, it removed the interface
/// and rules under the new process.)
#[test]
fn a_sigterm_while_a_handover_ends_leaves_the_node_setup_to_the_new_process() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    let dir = private_dir();
    let socket = dir.path().join("handover.sock");
    let mut lab = Lab::start_with("auto", &format!("handover_socket = {:?}", socket));
    let new = Nodens::launch(&lab.toml, &lab.node.exec());
    let mut old = std::mem::replace(&mut lab.nodens, new);
    // The old process has sent its sockets and its cache; the new one sets
    // up the node and its listeners before it says it serves them.
    old.proc.wait_for_line(0, secs(10), "the cache sent", |l| {
        l.contains("handover: cache sent")
    });
    assert!(old.terminate().success());
    let nodens = &mut lab.nodens;
    in_netns(&lab.node.name, || nodens.wait_ready());
    let said = old.proc.lines().join("\n");
    assert!(
        !said.contains("interface and rules removed"),
        "the old process removed the node setup under the new one:\n{said}"
    );
    let links = lab.node.run(&["ip", "-o", "link"]);
    assert!(links.contains("nodelocaldns"), "interface gone: {links}");
    assert!(
        lab.answered(),
        "the new process does not answer: {:#?}",
        lab.debug()
    );
}

#[test]
fn a_claim_held_by_something_that_does_not_serve_is_overruled() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // A process that can reach the claim (root, with the state directory)
    // holds it and serves nothing. The starting server takes the claim over
    // after HOLDER_SILENCE (10 s), says so and counts it; and when the
    // holder of the claim is a frozen container, the guard withdraws all
    // the same.
    state_dir_exists();
    let mut holders = Vec::new();
    let lab = Lab::start_after("auto", "", |node| {
        let claim = claim_file(node);
        std::fs::write(&claim, b"").unwrap();
        let mut p = intruder(
            &node.exec(),
            None,
            "squat",
            &["nodelocaldns", &claim, "--wait"],
        );
        p.wait_for_line(0, secs(10), "the hold", |l| l.contains("holding the claim"));
        holders.push(p);
    });
    let said = lab.nodens.proc.lines().join("\n");
    assert!(
        said.contains("not a serving nodens; taking the claim over"),
        "{said}"
    );
    let overruled = in_netns(&lab.node.name, || {
        lab.nodens.metric("nodens_node_claims_overruled_total", &[])
    });
    assert_eq!(overruled, 1.0);
    assert!(lab.answered());

    let mut guard = lab.guard();
    guard.wait_for_line(0, secs(10), "watching", |l| {
        l.contains("guard: watching the node setup")
    });
    // The whole container freezes (supervisor and server stopped): the
    // claim stays held, by a process that serves nothing. The guard
    // overrules it after HOLDER_SILENCE.
    let start = Instant::now();
    let frozen = [lab.nodens.proc.pid() as i32, lab.server_pid()];
    for pid in frozen {
        // SAFETY: kill(2) on a pid of this test's processes.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
    }
    // A stop reaches every thread in its own time: until then the server
    // may still answer. Wait until all are stopped, then see it silent.
    for pid in frozen {
        wait_until(Duration::from_secs(5), "the freeze", || {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .all(|t| {
                    let stat =
                        std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
                    stat.rsplit(')')
                        .next()
                        .is_some_and(|rest| rest.trim_start().starts_with('T'))
                })
                .then_some(())
        });
    }
    assert!(!lab.answered(), "a frozen server answered");
    while start.elapsed() < Duration::from_secs(20) && !lab.answered() {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "container frozen with its claim: answered again {:?} after it",
        start.elapsed()
    );
    assert!(lab.answered(), "not withdrawn: {:#?}", lab.debug());
    // The line follows the withdraw's last step: wait for it.
    guard.wait_for_line(0, secs(5), "the withdraw", |l| {
        l.contains("guard: withdrew the node setup")
    });
    let said = guard.lines().join("\n");
    assert!(said.contains("withdrawing anyway"), "{said}");
    for pid in [lab.nodens.proc.pid() as i32, lab.server_pid()] {
        // SAFETY: kill(2) on a pid of this test's processes.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// A capability set line (`CapEff:\t0000...`) of /proc/PID/status (or of a
/// thread's, under task/TID).
fn cap_set(status: &str, name: &str) -> u64 {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {status}"));
    u64::from_str_radix(line.trim(), 16).unwrap()
}

#[test]
fn the_supervisor_keeps_only_what_withdraw_needs() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    const NET_BIND_SERVICE: u64 = 1 << 10;
    const NET_ADMIN: u64 = 1 << 12;
    const NET_RAW: u64 = 1 << 13;
    let mut lab = Lab::start();
    let supervisor = lab.nodens.proc.pid();
    for task in std::fs::read_dir(format!("/proc/{supervisor}/task")).unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        for set in ["CapEff", "CapPrm", "CapBnd"] {
            assert_eq!(
                cap_set(&status, set),
                NET_ADMIN | NET_RAW,
                "supervisor {set}:\n{status}"
            );
        }
        // What its withdraw's nft and iptables get (through the ambient set
        // when it runs as a uid of its own).
        for set in ["CapInh", "CapAmb"] {
            assert_eq!(
                cap_set(&status, set),
                NET_ADMIN | NET_RAW,
                "{set}: {status}"
            );
        }
        assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    }
    // The server it started still has what it binds port 53 and sets the
    // node up with (its main thread).
    let server = lab.server_pid();
    let status = std::fs::read_to_string(format!("/proc/{server}/status")).unwrap();
    assert_eq!(
        cap_set(&status, "CapEff"),
        NET_BIND_SERVICE | NET_ADMIN | NET_RAW,
        "server:\n{status}"
    );
    // And what it kept is enough to withdraw (netlink, nft).
    let from = lab.nodens.proc.line_count();
    // SAFETY: kill(2) on the server of this test.
    assert_eq!(unsafe { libc::kill(server, libc::SIGKILL) }, 0);
    lab.nodens
        .proc
        .wait_for_line(from, Duration::from_secs(5), "the withdraw", |l| {
            l.contains("supervisor: withdrew the node setup")
        });
    let links = lab.node.run(&["ip", "-o", "link"]);
    assert!(!links.contains("nodelocaldns"), "interface left: {links}");
    for list in [&["nft", "list", "ruleset"][..], &["iptables-save"]] {
        let rules = lab.node.run(list);
        assert!(!rules.contains("nodens"), "rules left: {rules}");
    }
}

#[test]
fn a_nodens_that_runs_as_its_own_uid_fails_open() {
    needs!(Need::Root, Need::Tool("ip"), Need::CoreDns);
    // As the chart runs it: started as root, the supervisor and the server
    // switch to a uid of their own, keeping what they need; the server still
    // sets the node up (nft as that uid, through the ambient set), and the
    // supervisor still withdraws it when the server is killed.
    const UID: u32 = 64995;
    let (_copy, bin) = world_runnable_nodens();
    let state = private_dir();
    OWN_UID.with(|o| *o.borrow_mut() = Some((bin, state.path().to_owned())));
    let dir = private_dir();
    let socket = dir.path().join("handover.sock");
    let lab = Lab::start_with(
        "auto",
        &format!("run_as_user = {UID}\nhandover_socket = {socket:?}"),
    );
    for pid in [lab.nodens.proc.pid(), lab.server_pid() as u32] {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(
            uids.ends_with(&format!("{UID}\t{UID}\t{UID}\t{UID}")),
            "{uids}"
        );
    }
    assert!(lab.node.run(&["ip", "-o", "addr"]).contains(SERVICE_IP));
    let gap = lab
        .gap_after(libc::SIGKILL)
        .unwrap_or_else(|| panic!("no answer within 6 s after SIGKILL: {:#?}", lab.debug()));
    eprintln!("run as uid {UID}: answered again {gap:?} after SIGKILL");
    assert!(gap <= Duration::from_secs(2), "{gap:?} without answers");
    let rules = lab.node.run(&["nft", "list", "ruleset"]);
    assert!(!rules.contains("nodens"), "rules left: {rules}");
}
