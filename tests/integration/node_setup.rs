//! Node setup (`[node] setup = true`): nodens puts the non-loopback listen
//! addresses on an interface of its own (`nodelocaldns`), writes the
//! NOTRACK/ACCEPT rules NodeLocal DNSCache writes, keeps both in place
//! (repairing what goes missing every `reconcile_interval`), and removes
//! them on a clean exit unless told to keep them.
//!
//! Each test runs in a network namespace it creates itself (lo up, deleted
//! on drop, panic or not, with everything nodens put in it): CoreDNS
//! serving the test zone on 127.0.0.1:5300, nodens listening on
//! 169.254.20.10:53 (and [fd00::10]:53) with its metrics on
//! 127.0.0.1:9253, all inside the namespace. The test's own queries and
//! scrapes run on a thread that entered the namespace ([`in_netns`]); the
//! state is read with the real tools (`ip`, `nft`, `iptables-save`,
//! `ip6tables-save`) run with `ip netns exec`. No packet leaves the
//! namespace.
//!
//! Proves:
//! 1. `nftables_backend_sets_up_repairs_and_removes`: the interface (up,
//!    the /32, of the kind `link_kind = "auto"` picks on this kernel) and
//!    the table `inet nodens` with its four chains and every rule once,
//!    nothing else, each marked as nodens's by its comment; queries over
//!    UDP and TCP answered on 169.254.20.10:53; the metrics say present;
//!    `node status` exits 0.
//!    A flushed chain, a deleted table and a deleted link are each restored
//!    within a deadline, with the repairs counter rising and a "restored"
//!    log line (and queries answered again after the link came back).
//!    After `kill -9` everything is still there, and a restart gives the
//!    same table, still the same a few reconcile intervals later. SIGTERM:
//!    exit 0, link and table gone, `node status` exits 1. Last, the spec's
//!    comment to the letter: every rule's comment is exactly "nodens".
//! 2. `iptables_backend_sets_up_repairs_restarts_and_tears_down`: the same
//!    with the NODENS-* chains in raw and filter, each reached by exactly
//!    one jump; a flushed chain, a deleted jump and a deleted address are
//!    restored; after `kill -9` and a restart nodens's lines of
//!    `iptables-save` are identical (no duplicated rule or jump);
//!    `node teardown` then leaves nothing (no chain, no jump, no link), and
//!    exits 0 again when there is nothing to remove. Last, every rule's
//!    comment is exactly "nodens" (`-m comment --comment nodens`).
//! 3. `dual_stack_nftables` / `dual_stack_iptables`: 169.254.20.10 and
//!    fd00::10 in one process: both addresses on the interface, the rules
//!    for both (in the inet table; in iptables and ip6tables), queries to
//!    both answered; SIGTERM removes everything.
//! 4. `keep_on_exit_leaves_everything_until_teardown` (backend "auto") and
//!    `keep_rules_flag_leaves_everything_until_teardown` (`serve
//!    --keep-rules`): after SIGTERM everything is still in place and
//!    `node status` exits 0; `node teardown` removes it.
//!    `auto_follows_kube_proxy`: "auto" writes the rules with the firewall
//!    kube-proxy's own rules are in (nftables mode, iptables mode, none).
//! 5. `teardown_removes_both_backends_and_families`: what a handover left
//!    behind from an nftables run and then an iptables run (IPv4 and IPv6)
//!    is all removed by one `node teardown`.
//! 6. `setup_false_touches_nothing`: with `setup = false` nodens serves on
//!    an address set up by someone else, writes no rule, and leaves that
//!    interface alone on exit.
//!
//! Needs root (`needs!(Need::Root)`: fails without it, unless NODENS_ALLOW_SKIP=1).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

const IFACE: &str = "nodelocaldns";
const UPSTREAM: &str = "127.0.0.1:5300";
const METRICS: &str = "127.0.0.1:9253";
const RECONCILE: Duration = Duration::from_millis(500);
/// How long a repair may take: many reconcile intervals, on a busy 2-CPU machine.
const REPAIR_DEADLINE: Duration = Duration::from_secs(10);
const REPAIRS: &str = "nodens_node_repairs_total";
const IFACE_PRESENT: &str = "nodens_node_interface_present";
const RULES_PRESENT: &str = "nodens_node_rules_present";

fn v4() -> SocketAddr {
    "169.254.20.10:53".parse().unwrap()
}
fn v6() -> SocketAddr {
    "[fd00::10]:53".parse().unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Nftables,
    Iptables,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Nftables => "nftables",
            Backend::Iptables => "iptables",
        }
    }
}

// ---- set-up ---------------------------------------------------------------------

/// The config: listen on `listen`, metrics on 127.0.0.1:9253, the zone
/// `test.` -> CoreDNS on 127.0.0.1:5300, and this `[node]` section.
fn config(listen: &[SocketAddr], node: NodeSection) -> String {
    // Net::fixed: every address here is inside the test's own namespace.
    let cfg = Cfg::new(&Net::fixed(131))
        .listen(listen)
        .metrics_listen(METRICS)
        .shutdown_grace(secs(1))
        .zone(Zone::new("test.", &[UPSTREAM.parse().unwrap()]));
    format!("{}\n{}", cfg.to_toml(), node.to_toml())
}

/// `[node]` with setup on, this backend, and a short reconcile interval.
fn node(backend: &str) -> NodeSection {
    NodeSection::new()
        .interface(IFACE)
        .link_kind("auto")
        .backend(backend)
        .reconcile_interval(RECONCILE)
}

/// CoreDNS with the test zone on 127.0.0.1:5300 inside the namespace.
fn upstream(ns: &NodeNs) -> CoreDns {
    let core = CoreDns::launch(
        &ns.exec(),
        UPSTREAM.parse().unwrap(),
        &[("test.", test_zone(""))],
    );
    in_netns(&ns.name, || core.wait_ready());
    core
}

/// Starts `nodens serve --config FILE [extra...]` inside the namespace and
/// waits (from inside) for /ready.
fn start(ns: &NodeNs, toml: &str, extra: &[&str]) -> Nodens {
    let mut wrapper: Vec<String> = ns.exec().iter().map(|s| s.to_string()).collect();
    if !extra.is_empty() {
        // `ip netns exec` and `sh -c exec` both exec: the pid is nodens's.
        wrapper.extend([
            "sh".to_string(),
            "-c".to_string(),
            format!("exec \"$@\" {}", extra.join(" ")),
            "sh".to_string(),
        ]);
    }
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut nodens = Nodens::launch(toml, &wrapper);
    in_netns(&ns.name, || nodens.wait_ready());
    nodens
}

fn metrics(ns: &NodeNs, nodens: &Nodens) -> Vec<Sample> {
    parse_metrics(&in_netns(&ns.name, || nodens.metrics_text()))
}

fn metric(ns: &NodeNs, nodens: &Nodens, name: &str, labels: &[(&str, &str)]) -> f64 {
    sum_metric(&metrics(ns, nodens), name, labels)
}

/// `nodens ARGS --config FILE` inside the namespace: (exit code, stdout + stderr).
fn cli(ns: &NodeNs, args: &[&str], config: &Path) -> (Option<i32>, String) {
    let mut cmd = Command::new(tool("ip"));
    cmd.args(["netns", "exec", &ns.name])
        .arg(nodens_bin())
        .args(args)
        .arg("--config")
        .arg(config);
    let out = output_within(cmd, Duration::from_secs(30));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "[nodens {}] exit {:?}:\n{text}",
        args.join(" "),
        out.status.code()
    );
    (out.status.code(), text)
}

// ---- what is in place -------------------------------------------------------------

fn host_prefix(a: &SocketAddr) -> String {
    let len = if a.is_ipv4() { 32 } else { 128 };
    format!("{}/{len}", a.ip())
}

/// The interface exists, is up, and holds exactly the held addresses (as
/// /32 or /128).
fn interface_in_place(ns: &NodeNs, held: &[SocketAddr]) -> Result<(), String> {
    let link = ns.link(IFACE).ok_or_else(|| format!("no link {IFACE}"))?;
    if !link.up {
        return Err(format!("{IFACE} is not up: {}", link.text));
    }
    let mut have = ns.addrs(IFACE);
    have.sort();
    let mut want: Vec<String> = held.iter().map(host_prefix).collect();
    want.sort();
    if have != want {
        return Err(format!("addresses on {IFACE}: {have:?}, want {want:?}"));
    }
    Ok(())
}

/// Checks one chain's rules against what the spec asks for it: every wanted
/// rule is there exactly once (a rule may cover several, e.g. `meta l4proto
/// { tcp, udp }`), every rule is a wanted one and carries a comment marking
/// it as nodens's (starting with "nodens"; [`spec_comments`] checks that
/// each names its rule), and no rule appears twice.
fn chain_matches(
    what: &str,
    rules: &[String],
    wants: &[RuleWant],
    matches: fn(&str, &RuleWant) -> bool,
    comment: fn(&str) -> Option<String>,
) -> Result<(), String> {
    for w in wants {
        let n = rules.iter().filter(|r| matches(r, w)).count();
        if n == 0 {
            return Err(format!("{what}: no rule for {w:?}; rules: {rules:#?}"));
        }
        if n > 1 {
            return Err(format!("{what}: {n} rules for {w:?}; rules: {rules:#?}"));
        }
    }
    for r in rules {
        if !comment(r).is_some_and(|c| c.starts_with("nodens")) {
            return Err(format!("{what}: rule without a nodens comment: {r}"));
        }
        if !wants.iter().any(|w| matches(r, w)) {
            return Err(format!("{what}: unexpected rule: {r}"));
        }
    }
    let mut sorted = rules.to_vec();
    sorted.sort();
    sorted.dedup();
    if sorted.len() != rules.len() {
        return Err(format!("{what}: duplicated rules: {rules:#?}"));
    }
    Ok(())
}

/// The table `inet nodens` with its four chains (hooks and priorities as
/// specified) and exactly the wanted rules.
fn nft_in_place(ns: &NodeNs, held: &[SocketAddr]) -> Result<(), String> {
    let t = ns
        .nft_table()
        .ok_or_else(|| "no table inet nodens".to_string())?;
    let wants = wanted_rules(held);
    for hook in HOOKS {
        let name = hook.nft_chain();
        let c = t
            .chain(name)
            .ok_or_else(|| format!("no chain {name} in table inet nodens:\n{}", t.text))?;
        let (h, p) = hook.nft_hook();
        if c.hook.as_deref() != Some(h) || c.priority.as_deref() != Some(p) {
            return Err(format!(
                "chain {name}: hook {:?} priority {:?}, want hook {h} priority {p}",
                c.hook, c.priority
            ));
        }
        let ws: Vec<RuleWant> = wants.iter().filter(|w| w.hook == hook).copied().collect();
        chain_matches(
            &format!("inet nodens {name}"),
            &c.rules,
            &ws,
            nft_rule_matches,
            nft_comment,
        )?;
    }
    Ok(())
}

/// For each family held: the NODENS-* chains in raw and filter, each reached
/// by exactly one jump from its built-in chain, with exactly the wanted rules.
fn ipt_in_place(ns: &NodeNs, held: &[SocketAddr]) -> Result<(), String> {
    for v6 in [false, true] {
        let family: Vec<SocketAddr> = held.iter().filter(|a| a.is_ipv6() == v6).copied().collect();
        if family.is_empty() {
            continue;
        }
        let prog = if v6 { "ip6tables" } else { "iptables" };
        let s = ns.ipt_save(v6);
        let wants = wanted_rules(&family);
        for hook in HOOKS {
            let (table, builtin, chain) = hook.ipt();
            if !s.has_chain(table, chain) {
                return Err(format!("{prog} -t {table}: no chain {chain}:\n{}", s.text));
            }
            let jumps = s.jumps(table, builtin, chain);
            if jumps.len() != 1 {
                return Err(format!(
                    "{prog} -t {table}: {} jumps from {builtin} to {chain} (want exactly 1): {jumps:?}",
                    jumps.len()
                ));
            }
            let ws: Vec<RuleWant> = wants.iter().filter(|w| w.hook == hook).copied().collect();
            chain_matches(
                &format!("{prog} -t {table} {chain}"),
                &s.rules(table, chain),
                &ws,
                ipt_rule_matches,
                ipt_comment,
            )?;
        }
    }
    Ok(())
}

/// Every rule in nodens's chains carries a comment of its own that names
/// it: `nodens: <verdict> <proto> <to|from> <addr:port> in <hook>`, distinct
/// within its chain (how nodens tells its rules apart). Lists the rules
/// whose comment is missing, not of that form, or repeated.
fn names_a_rule(comment: &str) -> bool {
    let words: Vec<&str> = comment.split(' ').collect();
    matches!(
        words.as_slice(),
        [
            "nodens:",
            "notrack" | "accept",
            "udp" | "tcp",
            "to" | "from",
            _,
            "in",
            _
        ]
    )
}

fn spec_comments(ns: &NodeNs, backend: Backend) -> Result<(), String> {
    let mut off = Vec::new();
    match backend {
        Backend::Nftables => {
            let t = ns.nft_table().ok_or("no table inet nodens")?;
            for c in &t.chains {
                let mut seen = std::collections::HashSet::new();
                for r in &c.rules {
                    let comment = nft_comment(r).unwrap_or_default();
                    if !names_a_rule(&comment) || !seen.insert(comment) {
                        off.push(format!("inet nodens {}: {r}", c.name));
                    }
                }
            }
        }
        Backend::Iptables => {
            for v6 in [false, true] {
                let s = ns.ipt_save(v6);
                for hook in HOOKS {
                    let (table, _, chain) = hook.ipt();
                    let mut seen = std::collections::HashSet::new();
                    for r in s.rules(table, chain) {
                        let comment = ipt_comment(&r).unwrap_or_default();
                        if !names_a_rule(&comment) || !seen.insert(comment) {
                            off.push(format!("-t {table} -A {chain} {r}"));
                        }
                    }
                }
            }
        }
    }
    if off.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} rules whose comment does not name them, e.g.:\n{}",
            off.len(),
            off.iter().take(4).cloned().collect::<Vec<_>>().join("\n")
        ))
    }
}

fn nodens_ipt_lines(ns: &NodeNs) -> Vec<String> {
    let mut v = ns.ipt_save(false).nodens_lines();
    v.extend(
        ns.ipt_save(true)
            .nodens_lines()
            .into_iter()
            .map(|l| format!("(v6) {l}")),
    );
    v
}

/// The interface and the rules of `backend` are in place; the other
/// backend holds nothing of nodens's.
fn in_place(ns: &NodeNs, backend: Backend, held: &[SocketAddr]) -> Result<(), String> {
    interface_in_place(ns, held)?;
    match backend {
        Backend::Nftables => {
            nft_in_place(ns, held)?;
            let other = nodens_ipt_lines(ns);
            if !other.is_empty() {
                return Err(format!(
                    "backend nftables, yet iptables holds nodens lines: {other:#?}"
                ));
            }
        }
        Backend::Iptables => {
            ipt_in_place(ns, held)?;
            if let Some(t) = ns.nft_table() {
                return Err(format!(
                    "backend iptables, yet table inet nodens exists:\n{}",
                    t.text
                ));
            }
        }
    }
    Ok(())
}

/// Nothing of nodens's: no link, no `inet nodens`, no NODENS chain, jump or
/// nodens-commented rule in iptables or ip6tables.
fn gone(ns: &NodeNs) -> Result<(), String> {
    if let Some(l) = ns.link(IFACE) {
        return Err(format!("link {IFACE} still there: {}", l.text));
    }
    if let Some(t) = ns.nft_table() {
        return Err(format!("table inet nodens still there:\n{}", t.text));
    }
    let lines = nodens_ipt_lines(ns);
    if !lines.is_empty() {
        return Err(format!("iptables still holds nodens lines: {lines:#?}"));
    }
    Ok(())
}

fn assert_ok(r: Result<(), String>, when: &str) {
    if let Err(e) = r {
        panic!("{when}: {e}");
    }
}

/// Polls `f` until it is Ok, panicking with its last error after `timeout`.
fn wait_ok(timeout: Duration, what: &str, mut f: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Queries www.test. A over UDP and TCP at `addr` from inside the namespace.
fn assert_answers(ns: &NodeNs, addr: SocketAddr, when: &str) {
    in_netns(&ns.name, || {
        let q = Q::new("www.test.", Rt::A);
        let r = udp_query(addr, &q);
        assert_eq!(r.rcode(), rcode::NOERROR, "{when}: UDP to {addr}: rcode");
        assert_eq!(r.a(), vec![ipv4("192.0.2.1")], "{when}: UDP to {addr}");
        let r = tcp_query(addr, &q);
        assert_eq!(r.rcode(), rcode::NOERROR, "{when}: TCP to {addr}: rcode");
        assert_eq!(r.a(), vec![ipv4("192.0.2.1")], "{when}: TCP to {addr}");
    });
}

fn assert_present_metrics(ns: &NodeNs, nodens: &Nodens, backend: Backend) {
    let m = metrics(ns, nodens);
    assert_eq!(
        sum_metric(&m, IFACE_PRESENT, &[]),
        1.0,
        "{IFACE_PRESENT} while everything is in place"
    );
    assert_eq!(
        sum_metric(&m, RULES_PRESENT, &[("backend", backend.name())]),
        1.0,
        "{RULES_PRESENT}{{backend=\"{}\"}} while everything is in place",
        backend.name()
    );
}

/// `nodens node status` exits 0 and names the interface, the addresses and
/// the backend.
fn assert_status_ok(ns: &NodeNs, config: &Path, backend: Backend, held: &[SocketAddr]) {
    let (code, out) = cli(ns, &["node", "status"], config);
    assert_eq!(
        code,
        Some(0),
        "node status with everything in place:\n{out}"
    );
    assert!(
        out.contains(IFACE),
        "node status names no interface:\n{out}"
    );
    for a in held {
        assert!(
            out.contains(&a.ip().to_string()),
            "node status does not show {}:\n{out}",
            a.ip()
        );
    }
    assert!(
        out.to_ascii_lowercase().contains(backend.name()),
        "node status names no backend {}:\n{out}",
        backend.name()
    );
}

/// Breaks something with `damage`, then waits for everything to be in place
/// again, for `nodens_node_repairs_total{what}` to rise and for a log line
/// saying "restored".
fn expect_repair(
    ns: &NodeNs,
    nodens: &mut Nodens,
    backend: Backend,
    held: &[SocketAddr],
    what: &str,
    how: &str,
    damage: impl FnOnce(),
) {
    let before = metric(ns, nodens, REPAIRS, &[("what", what)]);
    let from = nodens.proc.line_count();
    damage();
    let t0 = Instant::now();
    wait_ok(REPAIR_DEADLINE, &format!("the repair after {how}"), || {
        nodens.assert_alive();
        in_place(ns, backend, held)
    });
    eprintln!("{how}: in place again after {:?}", t0.elapsed());
    let after = wait_until(
        Duration::from_secs(5),
        &format!("{REPAIRS}{{what=\"{what}\"}} to rise above {before} after {how}"),
        || {
            let v = metric(ns, nodens, REPAIRS, &[("what", what)]);
            (v > before).then_some(v)
        },
    );
    eprintln!("{how}: {REPAIRS}{{what=\"{what}\"}} {before} -> {after}");
    nodens.proc.wait_for_line(
        from,
        Duration::from_secs(5),
        &format!("a log line with \"restored\" after {how}"),
        |l| l.contains("restored"),
    );
}

/// Sends SIGTERM: exit status 0.
fn terminate_ok(nodens: &mut Nodens) {
    let st = nodens.terminate();
    assert_eq!(st.code(), Some(0), "exit status after SIGTERM: {st}");
}

// ---- the tests ------------------------------------------------------------------------

#[test]
fn nftables_backend_sets_up_repairs_and_removes() {
    needs!(
        Need::Root,
        Need::Tool("nft"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    tool("nft");
    // Declared first, dropped last: the processes die before the namespace goes.
    let ns = NodeNs::create("nft");
    let _core = upstream(&ns);
    let want_kind = if ns.kernel_has_dummy() {
        "dummy"
    } else {
        "ifb"
    };
    let held = [v4()];
    let toml = config(&held, node("nftables"));
    let mut nodens = start(&ns, &toml, &[]);

    assert_ok(in_place(&ns, Backend::Nftables, &held), "after start");
    // Checked to the letter at the end, so the rest is tested whatever it says.
    let comments = spec_comments(&ns, Backend::Nftables);
    let link = ns.link(IFACE).unwrap();
    assert_eq!(
        link.kind.as_deref(),
        Some(want_kind),
        "link_kind = \"auto\" on a kernel {} dummy: {}",
        if want_kind == "dummy" {
            "with"
        } else {
            "without"
        },
        link.text
    );
    assert_answers(&ns, v4(), "after start");
    assert_present_metrics(&ns, &nodens, Backend::Nftables);
    assert_status_ok(&ns, &nodens.config_path, Backend::Nftables, &held);

    expect_repair(
        &ns,
        &mut nodens,
        Backend::Nftables,
        &held,
        "rules",
        "nft flush chain inet nodens prerouting",
        || {
            ns.run("nft", &["flush", "chain", "inet", "nodens", "prerouting"]);
        },
    );
    expect_repair(
        &ns,
        &mut nodens,
        Backend::Nftables,
        &held,
        "rules",
        "nft delete table inet nodens",
        || {
            ns.run("nft", &["delete", "table", "inet", "nodens"]);
        },
    );
    expect_repair(
        &ns,
        &mut nodens,
        Backend::Nftables,
        &held,
        "interface",
        "ip link del nodelocaldns",
        || {
            ns.run("ip", &["link", "del", IFACE]);
        },
    );
    assert_answers(&ns, v4(), "after the link was restored");
    assert_present_metrics(&ns, &nodens, Backend::Nftables);

    // kill -9 leaves everything behind; a restart writes the same table.
    let before = ns.nft_table().expect("table inet nodens").canonical();
    nodens.proc.kill();
    assert_ok(
        in_place(&ns, Backend::Nftables, &held),
        "after kill -9 (nothing removes it)",
    );
    let mut nodens = start(&ns, &toml, &[]);
    assert_ok(in_place(&ns, Backend::Nftables, &held), "after the restart");
    assert_eq!(
        ns.nft_table().expect("table inet nodens").canonical(),
        before,
        "table inet nodens after kill -9 and a restart"
    );
    // A few reconcile passes later: still the same, nothing added.
    sleep_until(Instant::now(), RECONCILE * 4);
    nodens.assert_alive();
    assert_eq!(
        ns.nft_table().expect("table inet nodens").canonical(),
        before,
        "table inet nodens {:?} after the restart",
        RECONCILE * 4
    );
    assert_answers(&ns, v4(), "after the restart");

    terminate_ok(&mut nodens);
    assert_ok(gone(&ns), "after SIGTERM");
    let (code, out) = cli(&ns, &["node", "status"], &nodens.config_path);
    assert_eq!(code, Some(1), "node status with nothing in place:\n{out}");
    assert_ok(comments, "the rules' comments (each names its rule)");
}

#[test]
fn iptables_backend_sets_up_repairs_restarts_and_tears_down() {
    needs!(
        Need::Root,
        Need::Tool("iptables"),
        Need::Tool("iptables-save"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    tool("iptables");
    tool("iptables-save");
    let ns = NodeNs::create("ipt");
    let _core = upstream(&ns);
    let held = [v4()];
    let toml = config(&held, node("iptables"));
    let mut nodens = start(&ns, &toml, &[]);

    assert_ok(in_place(&ns, Backend::Iptables, &held), "after start");
    // Checked to the letter at the end, so the rest is tested whatever it says.
    let comments = spec_comments(&ns, Backend::Iptables);
    eprintln!(
        "iptables -t raw -S:\n{}",
        ns.run("iptables", &["-t", "raw", "-S"])
    );
    assert_answers(&ns, v4(), "after start");
    assert_present_metrics(&ns, &nodens, Backend::Iptables);
    assert_status_ok(&ns, &nodens.config_path, Backend::Iptables, &held);

    expect_repair(
        &ns,
        &mut nodens,
        Backend::Iptables,
        &held,
        "rules",
        "iptables -t raw -F NODENS-PREROUTING",
        || {
            ns.run(
                "iptables",
                &["-w", "5", "-t", "raw", "-F", "NODENS-PREROUTING"],
            );
        },
    );
    expect_repair(
        &ns,
        &mut nodens,
        Backend::Iptables,
        &held,
        "rules",
        "deleting the jump from filter INPUT to NODENS-INPUT",
        || {
            let jump = ns
                .ipt_save(false)
                .jumps("filter", "INPUT", "NODENS-INPUT")
                .pop()
                .expect("the jump to NODENS-INPUT");
            let words = split_quoted(&jump);
            let mut args = vec!["-w", "5", "-t", "filter", "-D", "INPUT"];
            args.extend(words.iter().map(String::as_str));
            ns.run("iptables", &args);
        },
    );
    expect_repair(
        &ns,
        &mut nodens,
        Backend::Iptables,
        &held,
        "interface",
        "ip addr del 169.254.20.10/32 dev nodelocaldns",
        || {
            ns.run("ip", &["addr", "del", "169.254.20.10/32", "dev", IFACE]);
        },
    );
    assert_answers(&ns, v4(), "after the address was restored");

    // kill -9 leaves everything behind; a restart gives identical lines.
    let before = nodens_ipt_lines(&ns);
    eprintln!("nodens's iptables-save lines:\n{}", before.join("\n"));
    nodens.proc.kill();
    assert_ok(
        in_place(&ns, Backend::Iptables, &held),
        "after kill -9 (nothing removes it)",
    );
    let mut nodens = start(&ns, &toml, &[]);
    assert_ok(in_place(&ns, Backend::Iptables, &held), "after the restart");
    assert_eq!(
        nodens_ipt_lines(&ns),
        before,
        "nodens's iptables-save lines after kill -9 and a restart"
    );
    sleep_until(Instant::now(), RECONCILE * 4);
    nodens.assert_alive();
    assert_eq!(
        nodens_ipt_lines(&ns),
        before,
        "nodens's iptables-save lines {:?} after the restart",
        RECONCILE * 4
    );
    assert_answers(&ns, v4(), "after the restart");

    // Killed again (everything left behind), then torn down by hand.
    nodens.proc.kill();
    assert_ok(in_place(&ns, Backend::Iptables, &held), "after kill -9");
    let (code, out) = cli(&ns, &["node", "teardown"], &nodens.config_path);
    assert_eq!(code, Some(0), "node teardown:\n{out}");
    assert_ok(gone(&ns), "after node teardown");
    let (code, out) = cli(&ns, &["node", "teardown"], &nodens.config_path);
    assert_eq!(
        code,
        Some(0),
        "node teardown with nothing to remove:\n{out}"
    );
    assert_ok(gone(&ns), "after a second node teardown");
    let (code, out) = cli(&ns, &["node", "status"], &nodens.config_path);
    assert_eq!(code, Some(1), "node status with nothing in place:\n{out}");
    assert_ok(comments, "the rules' comments (each names its rule)");
}

fn dual_stack(backend: Backend) {
    let ns = NodeNs::create(&format!("dual-{}", &backend.name()[..3]));
    let _core = upstream(&ns);
    let held = [v4(), v6()];
    let mut nodens = start(&ns, &config(&held, node(backend.name())), &[]);

    assert_ok(in_place(&ns, backend, &held), "after start");
    for a in held {
        assert_answers(&ns, a, "after start");
    }
    assert_present_metrics(&ns, &nodens, backend);
    assert_status_ok(&ns, &nodens.config_path, backend, &held);

    terminate_ok(&mut nodens);
    assert_ok(gone(&ns), "after SIGTERM");
}

#[test]
fn dual_stack_nftables() {
    needs!(
        Need::Root,
        Need::Tool("nft"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    tool("nft");
    dual_stack(Backend::Nftables);
}

#[test]
fn dual_stack_iptables() {
    needs!(
        Need::Root,
        Need::Tool("iptables"),
        Need::Tool("ip6tables"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    tool("iptables");
    tool("ip6tables");
    dual_stack(Backend::Iptables);
}

/// The backend whose rules_present series is 1 (the one "auto" chose).
fn backend_in_use(ns: &NodeNs, nodens: &Nodens) -> Backend {
    let m = metrics(ns, nodens);
    let present: Vec<&str> = m
        .iter()
        .filter(|s| s.name == RULES_PRESENT && s.value == 1.0)
        .filter_map(|s| s.label("backend"))
        .collect();
    match present.as_slice() {
        ["nftables"] => Backend::Nftables,
        ["iptables"] => Backend::Iptables,
        other => panic!("{RULES_PRESENT} at 1 for backends {other:?}; want exactly one"),
    }
}

/// After SIGTERM everything is still there and `status` says so; `teardown`
/// removes it.
fn kept_until_teardown(ns: &NodeNs, mut nodens: Nodens, backend: Backend, held: &[SocketAddr]) {
    let lines_before = nodens_ipt_lines(ns);
    let table_before = ns.nft_table().map(|t| t.canonical());
    terminate_ok(&mut nodens);
    assert_ok(in_place(ns, backend, held), "after SIGTERM, kept");
    assert_eq!(
        nodens_ipt_lines(ns),
        lines_before,
        "iptables lines after the exit"
    );
    assert_eq!(
        ns.nft_table().map(|t| t.canonical()),
        table_before,
        "table inet nodens after the exit"
    );
    assert_status_ok(ns, &nodens.config_path, backend, held);
    let (code, out) = cli(ns, &["node", "teardown"], &nodens.config_path);
    assert_eq!(code, Some(0), "node teardown:\n{out}");
    assert_ok(gone(ns), "after node teardown");
}

#[test]
fn keep_on_exit_leaves_everything_until_teardown() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    let ns = NodeNs::create("keep");
    let _core = upstream(&ns);
    let held = [v4()];
    let nodens = start(&ns, &config(&held, node("auto").keep_on_exit(true)), &[]);
    let backend = backend_in_use(&ns, &nodens);
    eprintln!("backend \"auto\" chose {}", backend.name());
    assert_ok(in_place(&ns, backend, &held), "after start");
    assert_answers(&ns, v4(), "after start");
    kept_until_teardown(&ns, nodens, backend, &held);
}

/// `auto` follows kube-proxy: with `KUBE-SERVICES` in iptables (iptables
/// mode) nodens's rules go to iptables; with kube-proxy's nftables table
/// (nftables mode), to nftables even where old `KUBE-SERVICES` chains are
/// left; the kubelet's own `KUBE-*` chains alone do not make it iptables.
#[test]
fn auto_follows_kube_proxy() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Tool("nft"),
        Need::Tool("iptables"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    let iptables_mode: &[(&str, &[&str])] = &[("iptables", &["-t", "nat", "-N", "KUBE-SERVICES"])];
    let nftables_mode: &[(&str, &[&str])] = &[
        ("iptables", &["-t", "nat", "-N", "KUBE-SERVICES"]),
        ("nft", &["add", "table", "ip", "kube-proxy"]),
    ];
    let kubelet_only: &[(&str, &[&str])] = &[
        ("iptables", &["-t", "mangle", "-N", "KUBE-KUBELET-CANARY"]),
        ("iptables", &["-t", "filter", "-N", "KUBE-FIREWALL"]),
    ];
    for (tag, traces, want) in [
        ("autoipt", iptables_mode, Backend::Iptables),
        ("autonft", nftables_mode, Backend::Nftables),
        ("autoklt", kubelet_only, Backend::Nftables),
    ] {
        let ns = NodeNs::create(tag);
        for (prog, args) in traces {
            ns.run(prog, args);
        }
        let _core = upstream(&ns);
        let held = [v4()];
        let mut nodens = start(&ns, &config(&held, node("auto")), &[]);
        assert_eq!(
            backend_in_use(&ns, &nodens),
            want,
            "{tag}: the backend auto chose"
        );
        assert_ok(in_place(&ns, want, &held), tag);
        assert_answers(&ns, v4(), tag);
        terminate_ok(&mut nodens);
        assert_ok(gone(&ns), &format!("{tag}: after SIGTERM"));
    }
}

#[test]
fn keep_rules_flag_leaves_everything_until_teardown() {
    needs!(
        Need::Root,
        Need::Tool("iptables"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    tool("iptables");
    let ns = NodeNs::create("keepflag");
    let _core = upstream(&ns);
    let held = [v4()];
    // keep_on_exit = false in the file: the flag alone keeps them.
    let toml = config(&held, node("iptables").keep_on_exit(false));
    let nodens = start(&ns, &toml, &["--keep-rules"]);
    assert_ok(in_place(&ns, Backend::Iptables, &held), "after start");
    assert_answers(&ns, v4(), "after start");
    kept_until_teardown(&ns, nodens, Backend::Iptables, &held);
}

#[test]
fn setup_false_touches_nothing() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Tool("iptables-save"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    let ns = NodeNs::create("nosetup");
    let _core = upstream(&ns);
    // Someone else's interface holding the address.
    let kind = if ns.kernel_has_dummy() {
        "dummy"
    } else {
        "ifb"
    };
    ns.run("ip", &["link", "add", IFACE, "type", kind]);
    ns.run("ip", &["addr", "add", "169.254.20.10/32", "dev", IFACE]);
    ns.run("ip", &["link", "set", IFACE, "up"]);
    let held = [v4()];
    let mut nodens = start(
        &ns,
        &config(&held, NodeSection::new().setup(false).backend("auto")),
        &[],
    );
    assert_answers(&ns, v4(), "setup = false");
    assert!(ns.nft_table().is_none(), "setup = false wrote inet nodens");
    let lines = nodens_ipt_lines(&ns);
    assert!(
        lines.is_empty(),
        "setup = false wrote iptables rules: {lines:#?}"
    );
    terminate_ok(&mut nodens);
    assert_ok(
        interface_in_place(&ns, &held),
        "setup = false: the interface after exit",
    );
    assert!(ns.nft_table().is_none(), "inet nodens after exit");
    assert!(nodens_ipt_lines(&ns).is_empty(), "iptables after exit");
}

#[test]
fn teardown_removes_both_backends_and_families() {
    needs!(
        Need::Root,
        Need::Tool("nft"),
        Need::Tool("ip6tables"),
        Need::Tool("ip6tables-save"),
        Need::CoreDns
    );
    tool("nft");
    tool("iptables");
    tool("ip6tables");
    let ns = NodeNs::create("teardown");
    let _core = upstream(&ns);
    let held = [v4(), v6()];

    // Left behind by a handover (keep_on_exit) with nftables...
    let mut nft = start(
        &ns,
        &config(&held, node("nftables").keep_on_exit(true)),
        &[],
    );
    assert_ok(
        in_place(&ns, Backend::Nftables, &held),
        "nftables, after start",
    );
    terminate_ok(&mut nft);
    assert_ok(
        in_place(&ns, Backend::Nftables, &held),
        "nftables, kept after SIGTERM",
    );
    // ... then by one with iptables (which may or may not clear the table).
    let mut ipt = start(
        &ns,
        &config(&held, node("iptables").keep_on_exit(true)),
        &[],
    );
    assert_ok(ipt_in_place(&ns, &held), "iptables, after start");
    for a in held {
        assert_answers(&ns, a, "iptables, after start");
    }
    terminate_ok(&mut ipt);
    assert_ok(ipt_in_place(&ns, &held), "iptables, kept after SIGTERM");
    assert_ok(interface_in_place(&ns, &held), "the interface, kept");
    eprintln!(
        "before teardown: table inet nodens {}",
        if ns.nft_table().is_some() {
            "present"
        } else {
            "absent"
        }
    );

    let (code, out) = cli(&ns, &["node", "teardown"], &ipt.config_path);
    assert_eq!(code, Some(0), "node teardown:\n{out}");
    assert_ok(gone(&ns), "after node teardown");
}
