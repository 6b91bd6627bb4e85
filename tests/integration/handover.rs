//! Zero-loss handover: under a steady load, a new nodens takes over the
//! listening sockets of the running one ten times in a row (each old one
//! then gets SIGTERM, as a DaemonSet rolling update does), and no query is
//! lost. Each new process starts with the old one's cache: the one popular
//! name reaches the upstream once in the whole run.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

/// Queries per second of the load, and the pause between handovers.
const RATE: u64 = 1000;
const HANDOVERS: usize = 10;

struct Load {
    sent: u64,
    answered: u64,
    /// The queries never answered: ID and milliseconds since the start.
    lost: Vec<(u16, u128)>,
}

/// Sends `RATE` queries a second to `server` (90 % one name, 10 % names
/// never asked before) until `stop`; counts the answers by ID.
fn load(server: SocketAddr, source: SocketAddr, stop: Arc<AtomicBool>) -> Load {
    let socket = UdpSocket::bind(source).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let pending = Arc::new(Mutex::new(std::collections::HashMap::<u16, u128>::new()));
    let receiver = {
        let (socket, pending, stop) = (socket.try_clone().unwrap(), pending.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut answered = 0u64;
            let mut buf = [0u8; 1500];
            // Keep reading for a second after the senders stop.
            let mut quiet_since: Option<Instant> = None;
            loop {
                match socket.recv_from(&mut buf) {
                    Ok((n, _)) if n >= 2 => {
                        let id = u16::from_be_bytes([buf[0], buf[1]]);
                        if pending.lock().unwrap().remove(&id).is_some() {
                            answered += 1;
                        }
                    }
                    _ => {}
                }
                if stop.load(Ordering::Relaxed) {
                    let since = *quiet_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(1) {
                        return answered;
                    }
                }
            }
        })
    };
    let start = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(120) {
        let id = (sent % 65536) as u16;
        let name = if sent % 10 == 0 {
            format!("n{sent}.test.")
        } else {
            "www.test.".to_string()
        };
        let mut q = Q::new(&name, Rt::A).to_bytes();
        q[..2].copy_from_slice(&id.to_be_bytes());
        pending
            .lock()
            .unwrap()
            .insert(id, start.elapsed().as_millis());
        socket.send_to(&q, server).unwrap();
        sent += 1;
        let next = start + Duration::from_micros(sent * 1_000_000 / RATE);
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let answered = receiver.join().unwrap();
    let mut lost: Vec<_> = pending.lock().unwrap().drain().collect();
    lost.sort_by_key(|&(_, at)| at);
    Load {
        sent,
        answered,
        lost,
    }
}

#[test]
fn ten_handovers_under_load_lose_nothing() {
    needs!(Need::CoreDns, Need::Alone);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = private_dir();
    let socket_path = dir.path().join("handover.sock");
    let toml = format!(
        "[server]\nlisten = [\"{dns}\"]\nworkers = 2\nhandover_socket = \"{path}\"\n\
         [metrics]\nlisten = \"{http}\"\nprobe_listen = \"{probes}\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"{up}\"]\n",
        dns = net.nodens(),
        http = net.metrics(),
        probes = net.other(1, 9254),
        path = socket_path.display(),
        up = core.addr,
    );
    let mut current = Nodens::start_toml(&toml);
    let stop = Arc::new(AtomicBool::new(false));
    let loader = {
        let (server, source, stop) = (net.nodens(), net.other(9, 0), stop.clone());
        std::thread::spawn(move || load(server, source, stop))
    };
    for i in 0..HANDOVERS {
        std::thread::sleep(Duration::from_millis(500));
        let mut next = Nodens::launch(&toml, &[]);
        next.proc
            .wait_for_line(0, secs(10), &format!("handover {i}: take over"), |l| {
                l.contains("handover: took over")
            });
        current
            .proc
            .wait_for_line(0, secs(10), &format!("handover {i}: hand over"), |l| {
                l.contains("handover: the new process serves our sockets")
            });
        // The probe server's socket came over too (else the new process
        // could not have bound its address while the old one held it).
        wait_until(secs(5), "/ready on the probe server", || {
            let ready = http_get(net.other(1, 9254), "/ready").ok()?.0 == 200;
            ready.then_some(())
        });
        let mut old = std::mem::replace(&mut current, next);
        let status = old.terminate();
        assert!(
            status.success(),
            "handover {i}: old process exited {status:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let load = loader.join().unwrap();
    eprintln!(
        "{HANDOVERS} handovers: {} queries sent, {} answered",
        load.sent, load.answered
    );
    assert!(load.sent >= RATE * 5, "load too small: {}", load.sent);
    assert_eq!(
        load.answered, load.sent,
        "queries lost across {HANDOVERS} handovers (ID, ms after the start): {:?}",
        load.lost
    );
}

// ---- the handover socket, against processes that are not nodens -----------------

/// A nodens with a handover socket in a private directory of its own,
/// running as `run_as` when given; with `extra` in `[server]`.
fn handover_nodens(
    net: &Net,
    core: &CoreDns,
    dir: &std::path::Path,
    run_as: Option<u32>,
) -> Nodens {
    // With a uid of its own, under the chart's capabilities.
    let wrapper: &[&str] = if run_as.is_some() {
        &AS_THE_CHART_RUNS_IT
    } else {
        &[]
    };
    let run_as = run_as.map_or(String::new(), |uid| format!("run_as_user = {uid}\n"));
    let toml = format!(
        "[server]\nlisten = [\"{dns}\"]\nworkers = 1\nhandover_socket = \"{path}\"\n{run_as}\
         [metrics]\nlisten = \"{http}\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"{up}\"]\n",
        dns = net.nodens(),
        http = net.metrics(),
        path = dir.join("handover.sock").display(),
        up = core.addr,
    );
    Nodens::launch(&toml, wrapper)
}

/// Sends `signal` to nodens and waits for a line saying it was handled;
/// how long that took.
fn handled_within(nodens: &mut Nodens, signal: libc::c_int, line: &str) -> Duration {
    let from = nodens.proc.line_count();
    let start = Instant::now();
    nodens.proc.signal(signal);
    nodens
        .proc
        .wait_for_line(from, secs(10), line, |l| l.contains(line));
    start.elapsed()
}

#[test]
fn a_client_that_is_not_nodens_gets_nothing_and_stalls_nothing() {
    needs!(Need::Root, Need::CoreDns);
    // nodens runs as a uid of its own. A root process on the node connects
    // to its handover socket and asks for the sockets; another connects and
    // says nothing; a process of nodens's own uid connects and says nothing
    // (it passes the credential check: only the deadline bounds it). Nobody
    // gets a descriptor or a byte of cache, and signals are handled at once.
    const UID: u32 = 64998;
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = private_dir();
    let mut nodens = handover_nodens(&net, &core, dir.path(), Some(UID));
    nodens.wait_ready();
    let path = dir.path().join("handover.sock");
    let path = path.to_str().unwrap();
    let mut same_uid = intruder(&[], Some(UID), "client", &[path, "--silent"]);
    same_uid.wait_for_line(0, secs(10), "connected", |l| l == "connected");
    let mut silent = intruder(&[], None, "client", &[path, "--silent"]);
    silent.wait_for_line(0, secs(10), "connected", |l| l == "connected");
    let mut thief = intruder(&[], None, "client", &[path]);
    thief.wait_for_line(0, secs(10), "the end of the exchange", |l| {
        l.starts_with("end:")
    });
    assert!(
        thief
            .lines()
            .iter()
            .any(|l| l == "end: 0 descriptors, 0 bytes"),
        "{:#?}",
        thief.lines()
    );
    let hup = handled_within(&mut nodens, libc::SIGHUP, "configuration reloaded");
    eprintln!("SIGHUP handled in {hup:?} with three clients on the handover socket");
    assert!(hup <= Duration::from_secs(1), "SIGHUP took {hup:?}");
    let refused = nodens.metric("nodens_handovers_refused_total", &[]);
    assert!(refused >= 2.0, "{refused}");
    let start = Instant::now();
    nodens.proc.signal(libc::SIGTERM);
    let status = nodens.proc.wait_exit(secs(10)).expect("exit after SIGTERM");
    eprintln!("SIGTERM: exited in {:?}", start.elapsed());
    assert!(status.success(), "{status:?}");
    assert!(
        start.elapsed() <= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

/// The planted answer of the fake predecessor.
const PLANTED: &str = "planted.test.";
const PLANTED_IP: &str = "203.0.113.66";

/// Starts a fake predecessor on the handover socket of `dir` and a nodens
/// after it; checks the handover was refused and the planted answer is not
/// served (the name is asked of CoreDNS, where it does not exist).
fn refuse_a_fake_predecessor(run_as: Option<u32>, why: &str) {
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = private_dir();
    let path = dir.path().join("handover.sock");
    let mut fake = intruder(
        &[],
        None,
        "predecessor",
        &[
            path.to_str().unwrap(),
            &net.nodens().to_string(),
            PLANTED,
            PLANTED_IP,
        ],
    );
    fake.wait_for_line(0, secs(10), "listening", |l| l == "listening");
    let mut nodens = handover_nodens(&net, &core, dir.path(), run_as);
    nodens.wait_ready();
    let said = nodens.proc.lines().join("\n");
    assert!(said.contains("handover refused"), "{said}");
    assert!(said.contains(why), "not refused for {why:?}: {said}");
    assert_eq!(nodens.metric("nodens_handovers_refused_total", &[]), 1.0);
    let reply = udp_query(nodens.dns, &Q::new(PLANTED, Rt::A));
    assert!(
        reply.a().is_empty(),
        "the planted answer was served: {:?}",
        reply.a()
    );
    assert_eq!(reply.rcode(), 3, "NXDOMAIN from CoreDNS");
    assert_eq!(core.wait_queries(PLANTED, "A", 1, secs(5)), 1);
    // And it serves on sockets of its own.
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );
    drop(fake);
}

#[test]
fn a_fake_predecessor_of_another_uid_is_refused() {
    needs!(Need::Root, Need::CoreDns);
    // nodens runs as a uid of its own; a root process listens on its
    // handover path first, with a socket that is not the one it names and
    // a cache that answers a name with its own address.
    refuse_a_fake_predecessor(Some(64997), "not to nodens's uid");
}

#[test]
fn a_fake_predecessor_of_the_same_uid_is_refused_for_its_descriptor() {
    needs!(Need::Root, Need::CoreDns);
    // Both run as root: the credentials pass, the descriptor does not (a
    // UDP socket bound elsewhere, named as nodens's listen address): the
    // whole handover is refused, the planted cache with it.
    refuse_a_fake_predecessor(None, "is bound elsewhere");
}
