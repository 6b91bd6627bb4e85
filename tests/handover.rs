//! Zero-loss handover: under a steady load, a new nodens takes over the
//! listening sockets of the running one ten times in a row (each old one
//! then gets SIGTERM, as a DaemonSet rolling update does), and no query is
//! lost. Each new process starts with the old one's cache: the one popular
//! name reaches the upstream once in the whole run.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

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
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = tempfile::tempdir().unwrap();
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
