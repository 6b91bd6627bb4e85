//! Capabilities after startup (run as root, as a DaemonSet pod's process
//! is): the threads that read client packets and talk to upstreams hold
//! none; the main thread holds CAP_NET_BIND_SERVICE only, and still binds
//! port 53 on reload; no_new_privs is set everywhere.
//!
//! The loopback block is allocated ([`Net::alloc`]); port 53 is bound on
//! its own `.1` address, so no other test can hold it.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;

const NET_BIND_SERVICE: u64 = 1 << 10;

/// (thread name, CapEff, CapPrm, NoNewPrivs) of every thread of `pid`.
fn thread_caps(pid: u32) -> Vec<(u32, String, u64, u64, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap();
        let tid: u32 = task.file_name().to_string_lossy().parse().unwrap();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap();
        let field = |name: &str| -> u64 {
            let line = status
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name} in {status}"));
            let value = line.split_whitespace().nth(1).unwrap();
            u64::from_str_radix(value, if name == "NoNewPrivs:" { 10 } else { 16 }).unwrap()
        };
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap();
        out.push((
            tid,
            comm.trim().to_string(),
            field("CapEff:"),
            field("CapPrm:"),
            field("NoNewPrivs:"),
        ));
    }
    out
}

#[test]
fn serving_threads_hold_no_capabilities() {
    if !require_root("capability test") {
        return;
    }
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let cfg = Cfg::new(&net).zone(Zone::new("test.", &[core.addr]));
    let nodens = Nodens::start(&cfg);
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    let pid = nodens.proc.pid();
    let threads = thread_caps(pid);
    assert!(threads.len() >= 3, "{threads:?}");
    for (tid, name, effective, permitted, no_new_privs) in &threads {
        assert_eq!(*no_new_privs, 1, "{name} ({tid}): no_new_privs");
        if *tid == pid {
            assert_eq!(
                (*effective, *permitted),
                (NET_BIND_SERVICE, NET_BIND_SERVICE),
                "main thread keeps CAP_NET_BIND_SERVICE only"
            );
        } else {
            assert_eq!(
                (*effective, *permitted),
                (0, 0),
                "{name} ({tid}) holds capabilities"
            );
        }
    }

    // The main thread binds a privileged port on reload.
    let port53 = SocketAddr::new(net.ip(1), 53);
    nodens.reload(&cfg.listen(&[nodens.dns, port53]).to_toml());
    let reply = wait_until(Duration::from_secs(5), "port 53 to be served", || {
        udp_query_timeout(
            port53,
            &Q::new("www.test.", Rt::A),
            Duration::from_millis(300),
        )
    });
    assert_eq!(reply.a(), vec![ipv4("192.0.2.1")]);
    for (tid, name, effective, _, _) in thread_caps(pid) {
        if tid != pid {
            assert_eq!(effective, 0, "{name} ({tid}), started by the reload");
        }
    }
}
