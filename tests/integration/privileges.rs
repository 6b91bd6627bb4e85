//! Capabilities after startup (run as root, as a DaemonSet pod's process
//! is): the threads that read client packets and talk to upstreams hold
//! none; the main thread holds CAP_NET_BIND_SERVICE only, and still binds
//! port 53 on reload; no_new_privs is set everywhere.
//!
//! The loopback block is allocated ([`Net::alloc`]); port 53 is bound on
//! its own `.1` address, so no other test can hold it.

use std::net::SocketAddr;
use std::time::Duration;

use support::*;

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
    needs!(Need::Root, Need::CoreDns);
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

/// A STATUS query (answered NOTIMP by nodens itself, no upstream asked)
/// with this ID.
fn status_query(id: u16) -> [u8; 12] {
    let [hi, lo] = id.to_be_bytes();
    [hi, lo, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0]
}

#[test]
fn no_other_process_receives_the_queries_of_a_nodens_that_runs_as_its_own_uid() {
    needs!(Need::Root, Need::Tool("ip"));
    // nodens on 169.254.20.10:53 (its node address), started as root and
    // running as a uid of its own, as the chart runs it. Two other root
    // processes on the host network bind the same address and port with
    // SO_REUSEPORT. The kernel admits a socket to the group only for the
    // uid that made it: the first, as root, is refused; the second makes
    // its sockets with nodens's uid as its filesystem uid (setfsuid), and
    // is admitted. Neither may get a query (nodens's reuseport selector
    // picks only its own sockets), nodens must answer every one, and it
    // must name the stranger (log, metric, /health).
    const UID: u32 = 64999;
    let ns = Netns::create("reuse");
    ns.run(&["ip", "addr", "add", "169.254.20.10/32", "dev", "lo"]);
    let addr: SocketAddr = "169.254.20.10:53".parse().unwrap();
    let toml = format!(
        "[server]\nlisten = [\"{addr}\"]\nworkers = 2\nrun_as_user = {UID}\n\
         [metrics]\nlisten = \"127.0.0.1:9253\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5300\"]\n"
    );
    let wrapper = [&ns.exec()[..], &AS_THE_CHART_RUNS_IT[..]].concat();
    let mut nodens = Nodens::launch(&toml, &wrapper);
    in_netns(&ns.name, || nodens.wait_ready());
    let status = std::fs::read_to_string(format!("/proc/{}/status", nodens.proc.pid())).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uids.split_whitespace().skip(1).collect::<Vec<_>>(),
        vec![UID.to_string(); 4],
        "{uids}"
    );

    let mut root = intruder(&ns.exec(), None, "reuseport", &["169.254.20.10", "53"]);
    root.wait_for_line(0, secs(10), "the attempt on TCP", |l| l.contains("tcp "));
    let uid = UID.to_string();
    let mut fsuid = intruder(
        &ns.exec(),
        None,
        "reuseport",
        &["169.254.20.10", "53", &uid],
    );
    fsuid.wait_for_line(0, secs(10), "the attempt on TCP", |l| l.contains("tcp "));
    let answered = in_netns(&ns.name, || {
        (0..300u16)
            .filter(|&id| {
                udp_exchange_from(
                    addr.ip(),
                    addr,
                    &status_query(id),
                    Duration::from_millis(500),
                )
                .is_some_and(|reply| reply[..2] == id.to_be_bytes())
            })
            .count()
    });
    let stolen = |said: &[String]| said.iter().filter(|l| l.starts_with("received")).count();
    let (by_root, by_fsuid) = (root.lines(), fsuid.lines());
    eprintln!(
        "300 queries: {answered} answered by nodens, {} and {} received by the others",
        stolen(&by_root),
        stolen(&by_fsuid)
    );
    assert!(
        by_root.iter().any(|l| l.starts_with("udp refused")),
        "{by_root:#?}"
    );
    assert!(
        by_root.iter().any(|l| l.starts_with("tcp refused")),
        "{by_root:#?}"
    );
    assert!(
        by_fsuid.iter().any(|l| l == &format!("fsuid {UID}")),
        "{by_fsuid:#?}"
    );
    assert!(
        by_fsuid.iter().any(|l| l.starts_with("tcp refused")),
        "{by_fsuid:#?}"
    );
    assert_eq!(stolen(&by_root), 0, "{by_root:#?}");
    assert_eq!(stolen(&by_fsuid), 0, "{by_fsuid:#?}");
    assert_eq!(answered, 300);
    // The kernel let the second in: found within a check or two, and named.
    assert!(by_fsuid.iter().any(|l| l == "udp joined"), "{by_fsuid:#?}");
    let seen = in_netns(&ns.name, || {
        nodens.wait_metric("nodens_reuseport_strangers_total", &[], 1.0)
    });
    assert_eq!(seen, 1.0);
    let (_, page) = in_netns(&ns.name, || http_get(nodens.http.unwrap(), "/health")).unwrap();
    assert!(
        page.contains("stranger: a UDP socket of uid 64999 on 169.254.20.10:53"),
        "{page}"
    );
}
