//! The process lifecycle: config checking, health endpoints, SIGHUP reload
//! and SIGTERM drain.
//!
//! Proves that `check-config` exits 0 on a good file and 1 naming FILE:LINE
//! on a bad one, and prints a deprecated key's warning with its line and
//! still exits 0; that /health and /ready answer 200; that SIGHUP applies a
//! new config (zone moved to another upstream, TTL policy, an added listen
//! address) while dnsperf runs across it losing no query; that an invalid
//! file on SIGHUP is logged and the old config keeps serving; and that
//! SIGTERM with a slow miss in flight still answers it, reports 503 on
//! /ready while draining, and exits 0.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use support::*;

fn check_config(text: &str) -> (i32, String, std::path::PathBuf, tempfile::TempDir) {
    let (out, path, dir) = check_config_output(text);
    let code = out.status.code().expect("exit code");
    (
        code,
        String::from_utf8_lossy(&out.stderr).to_string(),
        path,
        dir,
    )
}

/// `nodens check-config` of `text` written to a file: its whole output.
fn check_config_output(
    text: &str,
) -> (std::process::Output, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodens.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(nodens_bin())
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("run nodens check-config");
    (out, path, dir)
}

#[test]
fn check_config_names_the_bad_line() {
    let good = "[server]\nlisten = [\"127.0.0.1:1053\"]\nworkers = 1\n\n[[zone]]\nname = \"test.\"\nupstreams = [\"127.0.0.2:5300\"]\n";
    let (code, stderr, _, _d) = check_config(good);
    assert_eq!(code, 0, "good config rejected: {stderr}");

    let bad = [
        // (text, line of the error)
        (
            "[server]\nlisten = [\"127.0.0.1:1053\"]\nworkers = 1\n\n[[zone]]\nname = \"test.\"\nupstreams = [\"10.0.0.300\"]\n",
            7,
        ),
        ("[server]\nlisten = [\"127.0.0.1:1053\"]\nworkers = \n", 3),
        ("[server]\nworkers = 1\n[cache]\nprefetch = 3\n", 4),
        (
            "[server]\nlisten = [\"127.0.0.1:1053\"]\n\n[[zone]]\nname = \"test.\"\nupstreams = [\"127.0.0.1:1053\"]\n",
            6,
        ),
        (
            "[[zone]]\nname = \"test.\"\nupstreams = [\"127.0.0.2\"]\n[[zone]]\nname = \"TEST\"\nupstreams = [\"127.0.0.3\"]\n",
            5,
        ),
    ];
    for (text, line) in bad {
        let (code, stderr, path, _d) = check_config(text);
        assert_eq!(
            code, 1,
            "exit code for a bad config (line {line}); stderr: {stderr}"
        );
        let want = format!("{}:{line}:", path.display());
        assert!(
            stderr.contains(&want),
            "stderr does not name {want}:\n{stderr}"
        );
    }

    let missing = Command::new(nodens_bin())
        .args(["check-config", "/nonexistent/nodens.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1), "missing file");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/nodens.toml"));
}

/// The warning of a deprecated key (`nodens::config::DEPRECATED_KEYS`) at
/// `line:col` of `path`.
fn deprecation(path: &std::path::Path, line: usize, col: usize, old: &str) -> String {
    let key = nodens::config::DEPRECATED_KEYS
        .iter()
        .find(|k| k.old == old)
        .expect("a deprecated key");
    format!(
        "{}:{line}:{col}: `{} {old}` is deprecated since {} and will be removed in {}: write `{}` instead",
        path.display(),
        key.section,
        key.since,
        key.removed_in,
        key.new
    )
}

#[test]
fn check_config_warns_of_deprecated_keys_and_exits_0() {
    let text = "[server]\nlisten = [\"127.0.0.1:1053\"]\ntcp_max_inflight = 8\n\n[[zone]]\nname = \"test.\"\nupstreams = [\"127.0.0.2:5300\"]\npool = { max_inflight = 2 }\n";
    let (out, path, _dir) = check_config_output(text);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "warnings are not errors: {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}: OK\n", path.display())
    );
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            deprecation(&path, 3, 1, "tcp_max_inflight"),
            deprecation(&path, 8, 10, "max_inflight"),
        ]
    );

    // The old name beside the new one: an error at the old one's line.
    let both = text.replace(
        "pool = { max_inflight = 2 }",
        "pool = { max_in_flight = 2, max_inflight = 2 }",
    );
    let (code, stderr, path, _d) = check_config(&both);
    assert_eq!(code, 1, "{stderr}");
    let want = format!(
        "{}:8:29: `[zone.pool] max_inflight` and `max_in_flight` are the same key",
        path.display()
    );
    assert!(
        stderr.contains(&want),
        "stderr does not say {want}:\n{stderr}"
    );
}

#[test]
fn health_and_ready() {
    needs!(Need::CoreDns);
    let (net, _core, nodens) = setup();
    let http = net.metrics();
    assert_eq!(http_get(http, "/health").unwrap().0, 200);
    assert_eq!(http_get(http, "/ready").unwrap().0, 200);
    let (code, body) = http_get(http, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("coredns_"), "no coredns_* metric in /metrics");
    // Ready means the DNS listeners answer.
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );
    assert_eq!(
        tcp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );
}

/// Parses "Queries completed: N" and "Queries lost: N" from dnsperf's report.
fn dnsperf_counts(lines: &[String]) -> (u64, u64) {
    let field = |key: &str| -> u64 {
        let line = lines
            .iter()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no `{key}` in dnsperf output:\n{}", lines.join("\n")));
        line.split(':')
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("bad line {line:?}"))
    };
    (field("Queries completed"), field("Queries lost"))
}

#[test]
fn sighup_reload_under_load_loses_no_query() {
    needs!(Need::CoreDns, Need::Tool("dnsperf"), Need::Alone);
    let net = Net::alloc();
    let old_up = CoreDns::test_zone(net.upstream(0), "");
    let new_up = CoreDns::test_zone(net.upstream(1), "onlyb 300 IN A 192.0.2.202");
    let extra_listen = net.other(10, 1053);
    let base = Cfg::new(&net).log_level("info");
    let nodens = Nodens::start(&base.clone().zone(Zone::new("test.", &[old_up.addr])));

    let data = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        data.path(),
        "www.test A\nwww.test AAAA\nmail.test MX\nalias.test A\nnope.test A\n",
    )
    .unwrap();
    let mut cmd = Command::new(tool("dnsperf"));
    cmd.args([
        "-s",
        &nodens.dns.ip().to_string(),
        "-p",
        &nodens.dns.port().to_string(),
        "-d",
    ])
    .arg(data.path())
    .args(["-l", "6", "-Q", "2000", "-t", "3"]);
    let mut perf = Proc::spawn("dnsperf", cmd);

    // Reload once the load is visibly flowing.
    wait_until(Duration::from_secs(5), "dnsperf traffic", || {
        (nodens.metric("coredns_dns_requests_total", &[]) >= 500.0).then_some(())
    });
    nodens.reload(
        &base
            .clone()
            .listen(&[net.nodens(), extra_listen])
            .zone(Zone::new("test.", &[new_up.addr]).max_ttl(secs(60)))
            .to_toml(),
    );

    // The zone moved: a name only the new upstream has resolves, with the new TTL cap.
    let r = wait_until(
        Duration::from_secs(10),
        "onlyb.test. from the new upstream",
        || {
            let r = udp_query(nodens.dns, &Q::new("onlyb.test.", Rt::A));
            (r.a() == vec![ipv4("192.0.2.202")]).then_some(r)
        },
    );
    assert!(
        r.ttls()[0] <= 60,
        "max_ttl 60s not applied: TTL {}",
        r.ttls()[0]
    );
    // The added listen address serves.
    wait_until(
        Duration::from_secs(10),
        "the added listen address to answer",
        || {
            udp_query_timeout(
                extra_listen,
                &Q::new("www.test.", Rt::A),
                Duration::from_millis(300),
            )
            .filter(|r| r.a() == vec![ipv4("192.0.2.1")])
        },
    );
    new_up.sync_log();
    assert!(new_up.count_queries("onlyb.test.", "A") >= 1);

    let st = perf
        .wait_exit(Duration::from_secs(30))
        .expect("dnsperf finished");
    assert!(st.success(), "dnsperf failed: {st}");
    thread::sleep(Duration::from_millis(100)); // let the reader thread take the last lines
    let (completed, lost) = dnsperf_counts(&perf.lines());
    assert!(completed >= 2000, "only {completed} queries completed");
    assert_eq!(lost, 0, "queries lost across the reload");
}

#[test]
fn invalid_config_on_sighup_is_logged_and_old_config_kept() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let old_up = CoreDns::test_zone(net.upstream(0), "");
    let new_up = CoreDns::test_zone(net.upstream(1), "onlyb 300 IN A 192.0.2.202");
    let base = Cfg::new(&net);
    let mut nodens = Nodens::start(&base.clone().zone(Zone::new("test.", &[old_up.addr])));
    assert_eq!(
        udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).a(),
        vec![ipv4("192.0.2.1")]
    );

    let before = nodens.proc.line_count();
    let file_name = nodens
        .config_path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    nodens.reload("[server]\nlisten = [\"127.0.82.1:1053\"\nworkers = \n");
    nodens.proc.wait_for_line(
        before,
        Duration::from_secs(5),
        "a log line about the invalid config",
        |l| l.contains(&file_name),
    );
    // Give a broken reload every chance to break things before checking.
    thread::sleep(Duration::from_millis(300));
    nodens.assert_alive();
    assert_eq!(http_get(net.metrics(), "/ready").unwrap().0, 200);
    let r = udp_query(nodens.dns, &Q::new("mail.test.", Rt::MX));
    assert_eq!(r.rcode(), rcode::NOERROR);
    old_up.wait_queries("mail.test.", "MX", 1, Duration::from_secs(5));
    assert_eq!(
        udp_query(nodens.dns, &Q::new("onlyb.test.", Rt::A)).rcode(),
        rcode::NXDOMAIN,
        "still the old upstream"
    );

    // A valid file afterwards is applied as usual.
    nodens.reload(
        &base
            .clone()
            .zone(Zone::new("test.", &[new_up.addr]))
            .to_toml(),
    );
    wait_until(
        Duration::from_secs(10),
        "onlyb.test. from the new upstream",
        || {
            (udp_query(nodens.dns, &Q::new("onlyb.test.", Rt::A)).a() == vec![ipv4("192.0.2.202")])
                .then_some(())
        },
    );
}

#[test]
fn sigterm_answers_in_flight_query_and_exits_0() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let silent = Silent::bind(net.silent(0));
    let core = CoreDns::test_zone(net.upstream(0), "");
    let mut nodens = Nodens::start(
        &Cfg::new(&net)
            .shutdown_grace(secs(10))
            .query_timeout(secs(5))
            .zone(Zone::new("test.", &[core.addr]))
            .zone(Zone::new("slow.test.", &[silent.addr, core.addr]).upstream_timeout(ms(1500))),
    );

    let dns = nodens.dns;
    let client = thread::spawn(move || {
        udp_query_timeout(
            dns,
            &Q::new("x.slow.test.", Rt::A).id(0x5eed),
            Duration::from_secs(8),
        )
    });
    // In flight for sure: the silent upstream has it.
    silent
        .recv(Duration::from_secs(3))
        .expect("slow miss reached the silent upstream");

    nodens.proc.signal(libc::SIGTERM);
    let mut saw_503 = false;
    let deadline = Instant::now() + Duration::from_millis(1200);
    while Instant::now() < deadline {
        match http_get(net.metrics(), "/ready") {
            Ok((503, _)) => {
                saw_503 = true;
                break;
            }
            Ok(_) => thread::sleep(Duration::from_millis(20)),
            Err(_) => break,
        }
    }

    let r = client
        .join()
        .unwrap()
        .expect("in-flight query answered after SIGTERM");
    let answered = Instant::now();
    assert_eq!(r.id(), 0x5eed);
    assert_eq!(r.a(), vec![ipv4("192.0.2.30")]);
    let st = nodens
        .proc
        .wait_exit(Duration::from_secs(12))
        .expect("nodens exited");
    assert_eq!(st.code(), Some(0), "exit status after SIGTERM: {st}");
    assert!(
        answered.elapsed() < Duration::from_secs(4),
        "exit took {:?} after the last answer (grace is 10 s)",
        answered.elapsed()
    );
    assert!(saw_503, "/ready never answered 503 while draining");
}

/// `lameduck`: after SIGTERM /ready turns 503 at once, and new queries are
/// still answered for the lameduck time (a datapath that stops sending to
/// the pod only when it sees it not ready loses none); then it exits 0.
#[test]
fn sigterm_with_lameduck_keeps_answering_while_not_ready() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let mut nodens = Nodens::start(
        &Cfg::new(&net)
            .shutdown_grace(secs(2))
            .server_option("lameduck", "\"3s\"")
            .zone(Zone::new("test.", &[core.addr])),
    );
    nodens.proc.signal(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match http_get(net.metrics(), "/ready") {
            Ok((503, _)) => break,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "/ready after SIGTERM: {other:?}, want 503"
                );
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
    // Past the 100 ms in which a stopping UDP worker still answers what it
    // reads: without the lameduck time nothing reads any more.
    thread::sleep(Duration::from_millis(500));
    // Not ready, and still answering new queries (a miss and then a hit).
    for id in [0x1a1e, 0x1a1f] {
        let r = udp_query_timeout(
            nodens.dns,
            &Q::new("www.test.", Rt::A).id(id),
            Duration::from_millis(1500),
        )
        .expect("a query sent while lame-duck is answered");
        assert_eq!(r.id(), id);
        assert_eq!(r.rcode(), rcode::NOERROR);
    }
    let st = nodens
        .proc
        .wait_exit(Duration::from_secs(10))
        .expect("nodens exited after the lameduck time and the drain");
    assert_eq!(st.code(), Some(0), "exit status after SIGTERM: {st}");
}
