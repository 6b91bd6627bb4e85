//! Node setup (`[node]`) as the tests see it: a network namespace of the
//! test's own ([`NodeNs`], deleted on drop) and what is in place in it (the
//! interface and its addresses, the `inet nodens` nftables table, the
//! iptables/ip6tables chains, read with [`crate::listing`]). The rules the
//! spec asks for are [`crate::rules`]; the `[node]` section text is
//! [`crate::node_section`].
//!
//! Everything is read with the real tools (`ip`, `nft`, `iptables-save`,
//! `ip6tables-save`) run inside the namespace with `ip netns exec`, each
//! under a deadline.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::netns::Netns;
use super::tools::tool;

use super::listing::{IptSave, NftTable};

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
