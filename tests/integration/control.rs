//! The control channel (`[server] control_socket`): `nodens cache
//! show|flush|dump` as an operator runs them, the command line against a
//! running nodens and a real CoreDNS upstream.
//!
//! - show and dump name what is cached, its state and its records; a
//!   flush of a name, a zone or all is counted, and the next query for a
//!   flushed name goes upstream;
//! - a flush while queries stream in is seen by the next query on every
//!   worker: the upstream's answer changed underneath a long TTL, and
//!   after the flush every fresh client socket (spread over the workers by
//!   SO_REUSEPORT) gets the new one;
//! - another root process on the node, not running as nodens's uid,
//!   connects and asks for a flush: refused, counted, nothing dropped;
//!   the command line run as root becomes nodens's uid and is served.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::*;

/// Runs `nodens cache ARGS --socket PATH`; its stdout, or the test fails
/// with its stderr.
fn cache_cli(socket: &Path, args: &[&str]) -> String {
    let out = Command::new(nodens_bin())
        .arg("cache")
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .expect("nodens cache runs");
    assert!(
        out.status.success(),
        "nodens cache {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A nodens forwarding `.` to `upstream`, its control socket in `dir`.
fn nodens_with_control(net: &Net, upstream: SocketAddr, dir: &Path, workers: usize) -> Nodens {
    let cfg = Cfg::new(net)
        .workers(workers)
        .server_option(
            "control_socket",
            &format!("\"{}\"", dir.join("control.sock").display()),
        )
        .zone(Zone::new(".", &[upstream]));
    let mut nodens = Nodens::start(&cfg);
    nodens.wait_ready();
    nodens
}

#[test]
fn show_dump_and_flush_a_name_a_zone_or_all() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = private_dir();
    let nodens = nodens_with_control(&net, core.addr, dir.path(), 1);
    let socket = dir.path().join("control.sock");
    for (name, t) in [
        ("www.test.", Rt::A),
        ("www.test.", Rt::AAAA),
        ("mail.test.", Rt::MX),
        ("nothere.test.", Rt::A),
    ] {
        udp_query(nodens.dns, &Q::new(name, t));
    }

    let shown = cache_cli(&socket, &["show", "WWW.Test"]);
    eprintln!("{shown}");
    assert!(shown.contains("www.test. IN A answer fresh"), "{shown}");
    assert!(shown.contains("www.test. IN AAAA answer fresh"), "{shown}");
    assert!(shown.contains("IN A 192.0.2.1"), "{shown}");
    assert!(shown.contains("IN AAAA 2001:db8::1"), "{shown}");
    assert!(shown.ends_with("2 entries\n"), "{shown}");
    let only_a = cache_cli(&socket, &["show", "www.test.", "A"]);
    assert!(
        only_a.ends_with("1 entries\n") && !only_a.contains("AAAA"),
        "{only_a}"
    );
    let denial = cache_cli(&socket, &["show", "nothere.test"]);
    assert!(
        denial.contains("nothere.test. IN A nxdomain fresh"),
        "{denial}"
    );
    assert!(
        denial.contains("SOA"),
        "the negative answer's SOA: {denial}"
    );

    let dump = cache_cli(&socket, &["dump", "--json"]);
    let lines: Vec<serde_json::Value> = dump
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{dump}");
    assert_eq!(lines[4]["done"]["entries"], 4, "{dump}");
    let mx = lines
        .iter()
        .find(|l| l["entry"]["type"] == "MX")
        .unwrap_or_else(|| panic!("no MX entry: {dump}"));
    assert_eq!(mx["entry"]["state"], "fresh");
    let ttl = mx["entry"]["ttl_left"].as_u64().unwrap();
    assert!((290..=300).contains(&ttl), "TTL left {ttl}");

    // A name: the next query for it goes upstream again, the others do not.
    let flushed = cache_cli(&socket, &["flush", "www.test"]);
    assert_eq!(flushed, "flushed (name): 2 entries\n");
    assert_eq!(
        nodens.metric("nodens_cache_flushes_total", &[("scope", "name")]),
        1.0
    );
    assert_eq!(
        nodens.metric("nodens_cache_flushed_entries_total", &[]),
        2.0
    );
    let before = core.count_queries("www.test.", "A");
    let mail_before = core.count_queries("mail.test.", "MX");
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    udp_query(nodens.dns, &Q::new("mail.test.", Rt::MX));
    assert_eq!(
        core.wait_queries("www.test.", "A", before + 1, secs(5)),
        before + 1
    );
    core.sync_log();
    assert_eq!(
        core.count_queries("mail.test.", "MX"),
        mail_before,
        "mail.test. was not flushed"
    );

    // A zone: the name and every name below it.
    let flushed = cache_cli(&socket, &["flush", "--zone", "test."]);
    assert_eq!(flushed, "flushed (zone): 3 entries\n");
    assert!(cache_cli(&socket, &["dump"]).ends_with("0 entries\n"));
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(
        cache_cli(&socket, &["flush", "--all"]),
        "flushed (all): 1 entries\n"
    );
    assert_eq!(
        nodens.metric("nodens_cache_flushes_total", &[("scope", "all")]),
        1.0
    );
    assert_eq!(
        nodens.metric("nodens_cache_flushed_entries_total", &[]),
        6.0
    );

    // Bad input: a clear error, exit 1, nothing flushed.
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    let out = Command::new(nodens_bin())
        .args(["cache", "show", "www.test.", "NOSUCHTYPE", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown type"),
        "{out:?}"
    );
    assert!(cache_cli(&socket, &["dump"]).ends_with("1 entries\n"));
}

#[test]
fn a_flush_under_load_is_seen_by_the_next_query_on_every_worker() {
    needs!(Need::CoreDns);
    const WORKERS: usize = 4;
    let net = Net::alloc();
    let mut core = CoreDns::test_zone(net.upstream(0), "");
    let dir = private_dir();
    let mut nodens = nodens_with_control(&net, core.addr, dir.path(), WORKERS);
    assert_eq!(nodens.wait_workers(secs(10)), WORKERS);
    let socket = dir.path().join("control.sock");
    let www = Q::new("www.test.", Rt::A);
    assert_eq!(udp_query(nodens.dns, &www).a(), vec![ipv4("192.0.2.1")]);

    // The upstream's answer changes underneath the cached one (TTL 300).
    core.stop();
    let _core = CoreDns::start(
        net.upstream(0),
        &[("test.", zone_file("test.", "www 300 IN A 192.0.2.77\n"))],
    );
    assert_eq!(
        udp_query(nodens.dns, &www).a(),
        vec![ipv4("192.0.2.1")],
        "from the cache"
    );

    // Queries stream in on every worker while the flush runs (bounded: 10 s).
    let stop = AtomicBool::new(false);
    let answered = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let until = Instant::now() + secs(10);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    if udp_query_timeout(nodens.dns, &www, Duration::from_secs(2)).is_some() {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        wait_until(secs(5), "queries under way", || {
            (answered.load(Ordering::Relaxed) > 50).then_some(())
        });
        assert_eq!(
            cache_cli(&socket, &["flush", "www.test."]),
            "flushed (name): 1 entries\n"
        );
        // The next query on every worker: each from a fresh socket, so
        // SO_REUSEPORT spreads them over the workers.
        let after: Vec<Vec<std::net::Ipv4Addr>> =
            in_parallel(64, |_| udp_query(nodens.dns, &www).a());
        stop.store(true, Ordering::Relaxed);
        let old: Vec<_> = after
            .iter()
            .filter(|a| a.contains(&ipv4("192.0.2.1")))
            .collect();
        assert!(
            old.is_empty(),
            "{} of 64 queries after the flush got the old answer",
            old.len()
        );
        assert!(
            after.iter().all(|a| a == &vec![ipv4("192.0.2.77")]),
            "{after:?}"
        );
    });
    eprintln!(
        "{} queries answered around the flush",
        answered.load(Ordering::Relaxed)
    );
}

#[test]
fn a_process_that_is_not_nodens_s_uid_is_refused() {
    needs!(Need::Root, Need::CoreDns);
    // nodens runs as a uid of its own, as the chart runs it. Another root
    // process on the node (root passes the directory's mode) connects to
    // the control socket and asks for a flush of everything.
    const UID: u32 = 64997;
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = private_dir();
    let socket = dir.path().join("control.sock");
    let (_bin_dir, bin) = world_runnable_nodens();
    let toml = format!(
        "[server]\nlisten = [\"{dns}\"]\nworkers = 1\ncontrol_socket = \"{path}\"\nrun_as_user = {UID}\n\
         [metrics]\nlisten = \"{http}\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"{up}\"]\n",
        dns = net.nodens(),
        http = net.metrics(),
        path = socket.display(),
        up = core.addr,
    );
    let mut nodens = Nodens::launch_bin(&toml, &AS_THE_CHART_RUNS_IT, &bin);
    nodens.wait_ready();
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));

    let flush_all = r#"{"command":"cache-flush","scope":"all"}"#;
    let mut intruder = intruder(&[], None, "control", &[socket.to_str().unwrap(), flush_all]);
    intruder.wait_for_line(0, secs(10), "the end of the exchange", |l| l == "end");
    let said = intruder.lines();
    eprintln!("{said:#?}");
    assert!(
        said.iter()
            .any(|l| l.starts_with("reply: {\"error\":\"refused:") && l.contains("uid 0")),
        "{said:#?}"
    );
    assert!(!said.iter().any(|l| l.contains("flushed")), "{said:#?}");
    assert_eq!(nodens.metric("nodens_control_refused_total", &[]), 1.0);
    assert_eq!(
        nodens.metric("nodens_cache_flushes_total", &[("scope", "all")]),
        0.0
    );

    // The operator's command line, as root: becomes nodens's uid, is served.
    let shown = Command::new(&bin)
        .args(["cache", "show", "www.test.", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{shown:?}");
    assert!(
        text.contains("www.test. IN A answer fresh"),
        "still cached: {text}"
    );
    assert_eq!(nodens.metric("nodens_control_refused_total", &[]), 1.0);
}

/// What an upstream answers reaches the operator's terminal through `nodens
/// cache show`: a TXT record carrying an escape sequence (clear the screen)
/// is printed with the escape written out, never as the control bytes.
#[test]
fn cache_show_writes_control_characters_out() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "evil 60 IN TXT \"\\027[2Jowned\\007\"");
    let dir = private_dir();
    let nodens = nodens_with_control(&net, core.addr, dir.path(), 1);
    let reply = udp_query(nodens.dns, &Q::new("evil.test.", Rt::TXT));
    assert_eq!(reply.rcode(), rcode::NOERROR);
    assert!(reply.raw.contains(&0x1b), "the upstream's TXT carries ESC");
    let shown = cache_cli(&dir.path().join("control.sock"), &["show", "evil.test."]);
    assert!(shown.contains("owned"), "{shown}");
    assert!(
        !shown.chars().any(|c| c.is_control() && c != '\n'),
        "control characters reached the terminal: {shown:?}"
    );
    assert!(shown.contains("\\027[2J"), "{shown}");
}

/// The kubelet's exec probes over the control socket: no TCP port that
/// another process could take or fill. Healthy and ready while nodens
/// serves; the health page names a worker restarted after a panic.
#[test]
fn probes_over_the_control_socket() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = private_dir();
    let cfg = Cfg::new(&net)
        .server_option(
            "control_socket",
            &format!("\"{}\"", dir.path().join("control.sock").display()),
        )
        .zone(Zone::new(".", &[core.addr]));
    let mut nodens = Nodens::launch(
        &cfg.to_toml(),
        &["env", "NODENS_TEST_PANIC_QNAME=boom.test."],
    );
    nodens.wait_ready();
    let probe = |what: &str| {
        let out = Command::new(nodens_bin())
            .args(["probe", what, "--socket"])
            .arg(dir.path().join("control.sock"))
            .output()
            .expect("nodens probe runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(probe("health"), (Some(0), "OK\n".to_string()));
    assert_eq!(probe("ready"), (Some(0), "OK\n".to_string()));
    assert!(udp_query_timeout(nodens.dns, &Q::new("boom.test.", Rt::A), ms(300)).is_none());
    nodens.wait_metric("nodens_worker_restarts_total", &[], 1.0);
    let (code, page) = probe("health");
    assert_eq!(code, Some(0), "{page}");
    assert!(page.contains("restarted: udp"), "{page}");
    // No nodens there: the probe fails.
    drop(nodens);
    assert_eq!(probe("health").0, Some(1));
}

/// As the chart runs it: nodens started as root with the container's
/// capabilities, switched to a uid of its own, its control socket in a
/// directory only that uid may enter. `kubectl exec` and the kubelet's exec
/// probes run the command line as root with the same capabilities, which do
/// not include reading another uid's private directory: the command line
/// becomes the directory's owner before it looks inside. (Before, every
/// probe failed with `Permission denied` and the pod was restarted in a
/// loop.)
#[test]
fn root_without_dac_override_reaches_the_control_socket_of_nodens_s_uid() {
    needs!(Need::Root, Need::CoreDns, Need::Tool("setpriv"));
    use std::os::unix::fs::PermissionsExt;
    const UID: u32 = 64998;
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let (bin_dir, bin) = world_runnable_nodens();
    let run = bin_dir.path().join("run");
    let socket = run.join("control.sock");
    let cfg = Cfg::new(&net)
        .server_option("run_as_user", &UID.to_string())
        .server_option("control_socket", &format!("\"{}\"", socket.display()))
        .zone(Zone::new(".", &[core.addr]));
    let mut nodens = Nodens::launch_bin(&cfg.to_toml(), &AS_THE_CHART_RUNS_IT, &bin);
    nodens.wait_ready();
    let mode = std::fs::metadata(&run).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the socket's directory is private");
    let as_the_kubelet_execs = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args(AS_THE_CHART_RUNS_IT[1..].iter())
            .arg(&bin)
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, said) = as_the_kubelet_execs(&["probe", "health"]);
    assert_eq!(code, Some(0), "{said}");
    let (code, said) = as_the_kubelet_execs(&["probe", "ready"]);
    assert_eq!(code, Some(0), "{said}");
    let (code, said) = as_the_kubelet_execs(&["cache", "dump"]);
    assert_eq!(code, Some(0), "{said}");
    nodens.assert_alive();
}
