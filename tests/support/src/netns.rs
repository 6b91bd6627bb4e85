//! Root and network namespaces: tests that need privileges say
//! `needs!(Need::Root)` ([`crate::skip`]), and [`in_netns`] runs client code
//! inside a namespace a test made itself.

use std::path::Path;
use std::thread;

pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Runs `f` on a new thread that has joined the network namespace `name`
/// (one made with `ip netns add NAME`, i.e. `/var/run/netns/NAME`) and
/// returns its result; a panic in `f` is the caller's panic. Only that
/// thread changes namespace, and the sockets it opens belong to the
/// namespace, so the harness's clients ([`udp_query`], [`tcp_query`],
/// [`http_get`], [`Nodens::metric`], [`CoreDns::wait_ready`], ...) reach
/// servers running inside it. Needs root (CAP_SYS_ADMIN).
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    use std::os::fd::AsRawFd;
    let path = Path::new("/var/run/netns").join(name);
    let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    thread::scope(|s| {
        let worker = s.spawn(move || {
            // SAFETY: setns(2) on a namespace fd we hold open; CLONE_NEWNET
            // moves only the calling thread, which runs nothing else.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "setns({}): {}",
                path.display(),
                std::io::Error::last_os_error()
            );
            f()
        });
        worker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A network namespace a test makes for itself, with `lo` up; deleted on
/// drop (also when the test panics), and with it its interfaces and rules.
pub struct Netns {
    pub name: String,
}

/// Runs `cmd`, panicking with its stderr if it fails; returns its stdout.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

impl Netns {
    /// `nodens-TAG-PID-RANDOM`, so parallel tests never share a name.
    pub fn create(tag: &str) -> Netns {
        let name = format!(
            "nodens-{tag}-{}-{:04x}",
            std::process::id(),
            super::random_u64() as u16
        );
        run_ok(std::process::Command::new(super::tool("ip")).args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.run(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// The prefix that runs a command inside the namespace.
    pub fn exec(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// Puts each IPv4 address of `ips` on the namespace's `lo` (as a /32),
    /// for a server or a client to bind.
    pub fn add_to_lo(&self, ips: &[&str]) {
        for ip in ips {
            self.run(&["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"]);
        }
    }

    /// Runs `args` inside the namespace; panics if it fails.
    pub fn run(&self, args: &[&str]) -> String {
        run_ok(
            std::process::Command::new(super::tool("ip"))
                .args(["netns", "exec", &self.name])
                .args(args),
        )
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
