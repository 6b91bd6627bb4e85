//! Node setup (`[node]`) as the tests see it: a network namespace of the
//! test's own ([`NodeNs`], deleted on drop), what is in place in it (the
//! interface and its addresses, the `inet nodens` nftables table, the
//! iptables/ip6tables chains), the rules the spec asks for ([`wanted_rules`])
//! and how a rule text is matched against them, and the `[node]` section
//! text ([`NodeSection`]).
//!
//! Everything is read with the real tools (`ip`, `nft`, `iptables-save`,
//! `ip6tables-save`) run inside the namespace with `ip netns exec`, each
//! under a deadline.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::netns::Netns;
use super::tools::tool;

/// How long any one command run by these helpers may take.
const COMMAND_DEADLINE: Duration = Duration::from_secs(20);

/// Runs `cmd` to completion, killing it (and panicking) after `timeout`.
pub fn output_within(mut cmd: Command, timeout: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {timeout:?}; killed");
        }
        thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The shared [`Netns`] guard (deleted on drop, panic or not, with whatever
/// nodens put in it), plus the readers the node tests need. Declare it
/// before the processes run inside it, so they die first.
pub struct NodeNs(Netns);

impl std::ops::Deref for NodeNs {
    type Target = Netns;
    fn deref(&self) -> &Netns {
        &self.0
    }
}

impl NodeNs {
    /// A fresh namespace `nodens-<tag>-<pid>-<random>`.
    pub fn create(tag: &str) -> NodeNs {
        NodeNs(Netns::create(tag))
    }

    /// `prog ARGS` (found on PATH) inside the namespace, whatever its exit status.
    pub fn output(&self, prog: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new(tool("ip"));
        cmd.args(["netns", "exec", &self.name])
            .arg(tool(prog))
            .args(args);
        output_within(cmd, COMMAND_DEADLINE)
    }

    /// `prog ARGS` inside the namespace; its stdout. Panics if it fails.
    pub fn run(&self, prog: &str, args: &[&str]) -> String {
        let out = self.output(prog, args);
        assert!(
            out.status.success(),
            "{prog} {} (in {}) failed ({}): {}{}",
            args.join(" "),
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// The link `dev`, if it exists.
    pub fn link(&self, dev: &str) -> Option<Link> {
        let out = self.output("ip", &["-o", "-d", "link", "show", "dev", dev]);
        if !out.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let flags = text
            .split_once('<')
            .and_then(|(_, r)| r.split_once('>'))
            .map(|(f, _)| f.split(',').map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default();
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let kind = ["dummy", "ifb"]
            .into_iter()
            .find(|k| tokens.contains(k))
            .map(str::to_string);
        Some(Link {
            up: flags.iter().any(|f| f == "UP"),
            kind,
            text,
        })
    }

    /// The addresses on `dev` that are not link-local, as `IP/PREFIX`
    /// ("169.254.20.10/32", "fd00::10/128"); empty if there is no such link.
    pub fn addrs(&self, dev: &str) -> Vec<String> {
        let out = self.output("ip", &["-o", "addr", "show", "dev", dev]);
        if !out.status.success() {
            return Vec::new();
        }
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.contains("scope link"))
            .filter_map(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                let i = t.iter().position(|w| *w == "inet" || *w == "inet6")?;
                t.get(i + 1).map(|s| s.to_string())
            })
            .collect()
    }

    /// The table `inet nodens`, if it exists.
    pub fn nft_table(&self) -> Option<NftTable> {
        let out = self.output("nft", &["list", "table", "inet", "nodens"]);
        out.status
            .success()
            .then(|| NftTable::parse(&String::from_utf8_lossy(&out.stdout)))
    }

    /// `iptables-save` (or `ip6tables-save`), parsed.
    pub fn ipt_save(&self, v6: bool) -> IptSave {
        let prog = if v6 {
            "ip6tables-save"
        } else {
            "iptables-save"
        };
        IptSave::parse(&self.run(prog, &[]))
    }

    /// Whether this kernel can make a `dummy` link (tried on a probe link
    /// in the namespace, removed at once).
    pub fn kernel_has_dummy(&self) -> bool {
        let ok = self
            .output("ip", &["link", "add", "nodensprobe0", "type", "dummy"])
            .status
            .success();
        if ok {
            self.run("ip", &["link", "del", "nodensprobe0"]);
        }
        ok
    }
}

/// A link as `ip -d link show` prints it.
#[derive(Debug, Clone)]
pub struct Link {
    pub up: bool,
    /// "dummy" or "ifb" if the details say so.
    pub kind: Option<String>,
    pub text: String,
}

// ---- the [node] section ---------------------------------------------------------

/// Where tests keep the claim on the node setup: not the default
/// `/run/nodens`, which a chart on this machine (lab/kube) makes its own
/// uid's. Claims are per network namespace, so parallel tests share it.
pub const TEST_STATE_DIR: &str = "/run/nodens-test";

/// The `[node]` section, setting by setting; only what is set is written.
/// [`NodeSection::new`] starts with `setup = true`.
#[derive(Clone, Debug)]
pub struct NodeSection {
    keys: Vec<(&'static str, String)>,
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

impl Default for NodeSection {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeSection {
    pub fn new() -> NodeSection {
        NodeSection { keys: Vec::new() }
            .setup(true)
            .state_dir(TEST_STATE_DIR)
    }
    pub fn state_dir(self, dir: &str) -> Self {
        self.set("state_dir", quoted(dir))
    }
    fn set(mut self, key: &'static str, value: String) -> Self {
        self.keys.retain(|(k, _)| *k != key);
        self.keys.push((key, value));
        self
    }
    pub fn setup(self, on: bool) -> Self {
        self.set("setup", on.to_string())
    }
    pub fn interface(self, name: &str) -> Self {
        self.set("interface", quoted(name))
    }
    pub fn link_kind(self, kind: &str) -> Self {
        self.set("link_kind", quoted(kind))
    }
    pub fn backend(self, backend: &str) -> Self {
        self.set("backend", quoted(backend))
    }
    pub fn reconcile_interval(self, d: Duration) -> Self {
        self.set(
            "reconcile_interval",
            quoted(&format!("{}ms", d.as_millis())),
        )
    }
    pub fn keep_on_exit(self, on: bool) -> Self {
        self.set("keep_on_exit", on.to_string())
    }
    pub fn to_toml(&self) -> String {
        let mut s = String::from("[node]\n");
        for (k, v) in &self.keys {
            s.push_str(&format!("{k} = {v}\n"));
        }
        s
    }
}

// ---- the rules the spec asks for ---------------------------------------------------

/// Where a rule lives: the four hooks of NodeLocal DNSCache's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    RawPrerouting,
    RawOutput,
    FilterInput,
    FilterOutput,
}

pub const HOOKS: [Hook; 4] = [
    Hook::RawPrerouting,
    Hook::RawOutput,
    Hook::FilterInput,
    Hook::FilterOutput,
];

impl Hook {
    /// The chain in `table inet nodens`.
    pub fn nft_chain(self) -> &'static str {
        match self {
            Hook::RawPrerouting => "prerouting",
            Hook::RawOutput => "output_raw",
            Hook::FilterInput => "input",
            Hook::FilterOutput => "output",
        }
    }
    /// The nft hook and priority of that chain.
    pub fn nft_hook(self) -> (&'static str, &'static str) {
        match self {
            Hook::RawPrerouting => ("prerouting", "raw"),
            Hook::RawOutput => ("output", "raw"),
            Hook::FilterInput => ("input", "filter"),
            Hook::FilterOutput => ("output", "filter"),
        }
    }
    /// iptables: (table, built-in chain, nodens's chain).
    pub fn ipt(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Hook::RawPrerouting => ("raw", "PREROUTING", "NODENS-PREROUTING"),
            Hook::RawOutput => ("raw", "OUTPUT", "NODENS-OUTPUT"),
            Hook::FilterInput => ("filter", "INPUT", "NODENS-INPUT"),
            Hook::FilterOutput => ("filter", "OUTPUT", "NODENS-OUTPUT"),
        }
    }
}

/// Which end of the packet a rule matches: destination IP + dport, or
/// source IP + sport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Dst,
    Src,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    NoTrack,
    Accept,
}

/// One rule the spec asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleWant {
    pub hook: Hook,
    pub ip: IpAddr,
    pub port: u16,
    pub proto: &'static str,
    pub side: Side,
    pub verdict: Verdict,
}

/// Every rule the spec asks for the held addresses: for each (IP, port)
/// and both udp and tcp, NOTRACK in raw prerouting (dst), NOTRACK in raw
/// output (src and dst), ACCEPT in filter input (dst), ACCEPT in filter
/// output (src).
pub fn wanted_rules(held: &[SocketAddr]) -> Vec<RuleWant> {
    let mut v = Vec::new();
    for a in held {
        for proto in ["udp", "tcp"] {
            for (hook, side, verdict) in [
                (Hook::RawPrerouting, Side::Dst, Verdict::NoTrack),
                (Hook::RawOutput, Side::Src, Verdict::NoTrack),
                (Hook::RawOutput, Side::Dst, Verdict::NoTrack),
                (Hook::FilterInput, Side::Dst, Verdict::Accept),
                (Hook::FilterOutput, Side::Src, Verdict::Accept),
            ] {
                v.push(RuleWant {
                    hook,
                    ip: a.ip(),
                    port: a.port(),
                    proto,
                    side,
                    verdict,
                });
            }
        }
    }
    v
}

/// The values after token `i`: one token, or the elements of a `{ ... }` set.
fn values_at<'a>(t: &[&'a str], i: usize) -> Vec<&'a str> {
    match t.get(i) {
        Some(&"{") => t[i + 1..]
            .iter()
            .take_while(|w| **w != "}")
            .copied()
            .collect(),
        Some(w) => vec![*w],
        None => Vec::new(),
    }
}

fn ip_eq(text: &str, ip: IpAddr) -> bool {
    let bare = text.trim_matches('"');
    let (addr, len) = match bare.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (bare, None),
    };
    let full = if ip.is_ipv4() { "32" } else { "128" };
    addr.parse::<IpAddr>().ok() == Some(ip) && len.is_none_or(|l| l == full)
}

/// Whether an nft rule (as `nft list` prints it) matches `w`: the address
/// (`ip daddr X` / `ip6 saddr X`, or X in a set), the protocol and port
/// (`udp dport 53`, or `meta l4proto udp` with `th dport 53`, sets
/// allowed) and the verdict.
pub fn nft_rule_matches(rule: &str, w: &RuleWant) -> bool {
    let spaced = nft_without_comment(rule).replace(',', " ");
    let t: Vec<&str> = spaced.split_whitespace().collect();
    let fam = if w.ip.is_ipv4() { "ip" } else { "ip6" };
    let (afield, pfield) = match w.side {
        Side::Dst => ("daddr", "dport"),
        Side::Src => ("saddr", "sport"),
    };
    let port = w.port.to_string();
    let at = |a: &str, b: &str| -> Vec<usize> {
        (0..t.len().saturating_sub(1))
            .filter(|&i| t[i] == a && t[i + 1] == b)
            .collect()
    };
    let addr_ok = at(fam, afield)
        .into_iter()
        .any(|i| values_at(&t, i + 2).iter().any(|v| ip_eq(v, w.ip)));
    let direct = at(w.proto, pfield)
        .into_iter()
        .any(|i| values_at(&t, i + 2).contains(&port.as_str()));
    let l4 = (0..t.len())
        .filter(|&i| t[i] == "l4proto")
        .any(|i| values_at(&t, i + 1).contains(&w.proto))
        && at("th", pfield)
            .into_iter()
            .any(|i| values_at(&t, i + 2).contains(&port.as_str()));
    let verdict = match w.verdict {
        Verdict::NoTrack => t.contains(&"notrack"),
        Verdict::Accept => t.contains(&"accept"),
    };
    addr_ok && (direct || l4) && verdict
}

/// Splits an iptables-save line into words, a `"..."` (with `\"` escapes)
/// being one word without its quotes (the doctor's reader of the rules).
pub fn split_quoted(line: &str) -> Vec<String> {
    nodens::doctor::split_words(line)
}

/// The words of an iptables rule with the comment's text left out.
fn ipt_words(rule: &str) -> Vec<String> {
    let mut w = split_quoted(rule);
    if let Some(i) = w.iter().position(|x| x == "--comment") {
        w.drain(i..(i + 2).min(w.len()));
    }
    w
}

/// Whether an iptables-save rule (the part after `-A CHAIN`) matches `w`
/// (the chain is checked by the caller).
pub fn ipt_rule_matches(rule: &str, w: &RuleWant) -> bool {
    let words = ipt_words(rule);
    let t: Vec<&str> = words.iter().map(String::as_str).collect();
    let (aflag, pflag, psflag) = match w.side {
        Side::Dst => ("-d", "--dport", "--dports"),
        Side::Src => ("-s", "--sport", "--sports"),
    };
    let after = |flag: &str| -> Vec<&str> {
        (0..t.len().saturating_sub(1))
            .filter(|&i| t[i] == flag)
            .map(|i| t[i + 1])
            .collect()
    };
    let port = w.port.to_string();
    let addr_ok = after(aflag).iter().any(|v| ip_eq(v, w.ip));
    let proto_ok = after("-p").contains(&w.proto);
    let port_ok = after(pflag).contains(&port.as_str())
        || after(psflag)
            .iter()
            .any(|v| v.split(',').any(|p| p == port));
    let target = after("-j");
    let verdict = match w.verdict {
        Verdict::NoTrack => {
            target.contains(&"NOTRACK") || (target.contains(&"CT") && t.contains(&"--notrack"))
        }
        Verdict::Accept => target.contains(&"ACCEPT"),
    };
    addr_ok && proto_ok && port_ok && verdict
}

/// The text of an iptables rule's `--comment`, if it has one.
pub fn ipt_comment(rule: &str) -> Option<String> {
    let w = split_quoted(rule);
    let i = w.iter().position(|x| x == "--comment")?;
    w.get(i + 1).cloned()
}

/// The text of an nft rule's `comment "..."`, if it has one.
pub fn nft_comment(rule: &str) -> Option<String> {
    let start = rule.find("comment \"")? + "comment \"".len();
    let mut out = String::new();
    let mut chars = rule[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// An nft rule without its comment (nft prints the comment last).
fn nft_without_comment(rule: &str) -> &str {
    match rule.find(" comment \"") {
        Some(i) => &rule[..i],
        None => rule,
    }
}

// ---- nft ---------------------------------------------------------------------------

/// One chain of an nft table: its hook and priority (from the `type` line)
/// and its rules, counters taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftChain {
    pub name: String,
    pub hook: Option<String>,
    pub priority: Option<String>,
    pub rules: Vec<String>,
}

/// A table as `nft list table` prints it.
#[derive(Debug, Clone)]
pub struct NftTable {
    pub text: String,
    pub chains: Vec<NftChain>,
}

/// A rule with its counter (`counter packets N bytes M`) taken out and
/// whitespace collapsed, so two listings compare equal whatever the traffic.
pub fn strip_counters(rule: &str) -> String {
    let t: Vec<&str> = rule.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] == "counter" {
            i += 1;
            while i + 1 < t.len() && (t[i] == "packets" || t[i] == "bytes") {
                i += 2;
            }
            continue;
        }
        out.push(t[i]);
        i += 1;
    }
    out.join(" ")
}

impl NftTable {
    pub fn parse(text: &str) -> NftTable {
        let mut chains = Vec::new();
        let mut cur: Option<NftChain> = None;
        // Depth of the blocks opened inside the table (chains, sets, ...).
        let mut depth = 0usize;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if line.starts_with("table ") {
                continue;
            }
            if line == "}" {
                if depth == 1
                    && let Some(c) = cur.take()
                {
                    chains.push(c);
                }
                depth = depth.saturating_sub(1);
                continue;
            }
            if line.ends_with('{') {
                depth += 1;
                if depth == 1
                    && let Some(name) = line
                        .strip_prefix("chain ")
                        .map(|r| r.trim_end_matches('{').trim())
                {
                    cur = Some(NftChain {
                        name: name.to_string(),
                        hook: None,
                        priority: None,
                        rules: Vec::new(),
                    });
                }
                continue;
            }
            let Some(c) = cur.as_mut() else { continue };
            if depth != 1 {
                continue;
            }
            if line.starts_with("type ") {
                let t: Vec<&str> = line
                    .split(|ch: char| ch.is_whitespace() || ch == ';')
                    .filter(|w| !w.is_empty())
                    .collect();
                let after = |k: &str| {
                    t.iter()
                        .position(|w| *w == k)
                        .and_then(|i| t.get(i + 1))
                        .map(|s| s.to_string())
                };
                c.hook = after("hook");
                c.priority = after("priority");
                continue;
            }
            if line.starts_with("policy ") {
                continue;
            }
            c.rules.push(strip_counters(line));
        }
        NftTable {
            text: text.to_string(),
            chains,
        }
    }

    pub fn chain(&self, name: &str) -> Option<&NftChain> {
        self.chains.iter().find(|c| c.name == name)
    }

    /// The listing with counters taken out: what must not change across a restart.
    pub fn canonical(&self) -> Vec<String> {
        let mut v = Vec::new();
        for c in &self.chains {
            v.push(format!(
                "chain {} hook {:?} priority {:?}",
                c.name, c.hook, c.priority
            ));
            for r in &c.rules {
                v.push(format!("  {r}"));
            }
        }
        v
    }
}

// ---- iptables ----------------------------------------------------------------------

/// One table of `iptables-save` output.
#[derive(Debug, Clone, Default)]
pub struct IptTable {
    pub name: String,
    /// The chains declared (`:NAME POLICY [p:b]`).
    pub chains: Vec<String>,
    /// The rules in order, as (chain, the rest of the `-A CHAIN` line).
    pub rules: Vec<(String, String)>,
}

/// `iptables-save` output, by table.
#[derive(Debug, Clone, Default)]
pub struct IptSave {
    pub text: String,
    pub tables: Vec<IptTable>,
}

impl IptSave {
    pub fn parse(text: &str) -> IptSave {
        let mut s = IptSave {
            text: text.to_string(),
            tables: Vec::new(),
        };
        for line in text.lines().map(str::trim) {
            if let Some(t) = line.strip_prefix('*') {
                s.tables.push(IptTable {
                    name: t.to_string(),
                    ..IptTable::default()
                });
            } else if let Some(c) = line.strip_prefix(':') {
                if let Some(t) = s.tables.last_mut() {
                    t.chains
                        .push(c.split_whitespace().next().unwrap_or("").to_string());
                }
            } else if let Some(r) = line.strip_prefix("-A ")
                && let Some(t) = s.tables.last_mut()
            {
                let (chain, rest) = r.split_once(' ').unwrap_or((r, ""));
                t.rules.push((chain.to_string(), rest.trim().to_string()));
            }
        }
        s
    }

    fn table(&self, table: &str) -> Option<&IptTable> {
        self.tables.iter().find(|t| t.name == table)
    }

    pub fn has_chain(&self, table: &str, chain: &str) -> bool {
        self.table(table)
            .is_some_and(|t| t.chains.iter().any(|c| c == chain))
    }

    /// The rules of `chain` in `table` (the part after `-A CHAIN`).
    pub fn rules(&self, table: &str, chain: &str) -> Vec<String> {
        self.table(table)
            .map(|t| {
                t.rules
                    .iter()
                    .filter(|(c, _)| c == chain)
                    .map(|(_, r)| r.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The rules of `chain` that jump to `target`.
    pub fn jumps(&self, table: &str, chain: &str, target: &str) -> Vec<String> {
        self.rules(table, chain)
            .into_iter()
            .filter(|r| {
                ipt_words(r)
                    .windows(2)
                    .any(|w| (w[0] == "-j" || w[0] == "-g") && w[1] == target)
            })
            .collect()
    }

    /// Every line that is nodens's (mentions NODENS or the nodens comment),
    /// prefixed by its table, counters left out: what must not change
    /// across a restart.
    pub fn nodens_lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut table = String::new();
        for line in self.text.lines().map(str::trim) {
            if let Some(t) = line.strip_prefix('*') {
                table = t.to_string();
            } else if line.starts_with('#') {
                continue;
            } else if line.contains("NODENS") || line.contains("nodens") {
                let line = match line.strip_prefix(':') {
                    // ":CHAIN POLICY [p:b]": the counters are not nodens's.
                    Some(c) => format!(":{}", c.split_whitespace().next().unwrap_or("")),
                    None => line.to_string(),
                };
                v.push(format!("*{table} {line}"));
            }
        }
        v
    }
}
