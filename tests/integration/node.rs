//! Node-level behaviour: the defaults a DaemonSet pod relies on.
//!
//! - With no zone configured, nodens forwards everything to the nameservers
//!   of /etc/resolv.conf. Proved inside a network namespace of our own whose
//!   /etc/resolv.conf (via /etc/netns/NAME) points at a CoreDNS on
//!   127.0.0.1:53 in that namespace. Needs root.
//! - The default worker count is min(cgroup CPU quota, CPU affinity),
//!   floored, at least 1: `taskset -c 0` gives 1; a cgroup with a 25m CPU
//!   quota gives 1 (needs root); with no limit it is the machine's count.
//!
//! Each test declares what it needs (`needs!`): root, `taskset`; without
//! it a test fails, unless NODENS_ALLOW_SKIP=1.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::*;

// ---- network namespace ------------------------------------------------------

/// A network namespace with lo up and its own resolv.conf, deleted on drop.
struct Netns {
    name: String,
    etc: PathBuf,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    fn create(resolv_conf: &str) -> Netns {
        let name = format!(
            "nodens-test-{}-{:04x}",
            std::process::id(),
            random_u64() as u16
        );
        let ip = tool("ip");
        // A leftover from a killed run of the same pid: remove it first.
        let _ = Command::new(&ip).args(["netns", "del", &name]).output();
        run(Command::new(&ip).args(["netns", "add", &name]));
        let ns = Netns {
            etc: PathBuf::from("/etc/netns").join(&name),
            name,
        };
        run(Command::new(&ip).args(["-n", &ns.name, "link", "set", "lo", "up"]));
        std::fs::create_dir_all(&ns.etc).unwrap();
        std::fs::write(ns.etc.join("resolv.conf"), resolv_conf).unwrap();
        ns
    }

    /// The prefix that runs a command inside the namespace (with its resolv.conf).
    fn exec(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// `dig` inside the namespace; its output if it got a reply.
    fn dig(&self, server: &str, port: u16, name: &str, qtype: &str) -> Option<String> {
        let out = Command::new(tool("ip"))
            .args(["netns", "exec", &self.name])
            .arg(tool("dig"))
            .args([
                &format!("@{server}"),
                "-p",
                &port.to_string(),
                name,
                qtype,
                "+time=1",
                "+tries=1",
            ])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = std::fs::remove_dir_all(&self.etc);
        let _ = std::fs::remove_dir("/etc/netns"); // only if empty
    }
}

#[test]
fn no_zones_means_forward_to_resolv_conf() {
    needs!(
        Need::Root,
        Need::Tool("ip"),
        Need::Tool("dig"),
        Need::CoreDns
    );
    // Declared first, dropped last: the processes below die before the namespace goes.
    let ns = Netns::create("# written by nodens tests\nnameserver 127.0.0.1\noptions ndots:5\n");
    let core = CoreDns::launch(
        &ns.exec(),
        "127.0.0.1:53".parse().unwrap(),
        &[("test.", test_zone(""))],
    );
    wait_until(
        Duration::from_secs(15),
        "CoreDNS inside the namespace",
        || {
            ns.dig("127.0.0.1", 53, "_ready.test.", "TXT")
                .filter(|o| o.contains("status:"))
        },
    );

    // No [[zone]]: the default zone "." and /etc/resolv.conf's nameservers.
    let config = "[server]\nlisten = [\"127.0.0.1:1053\"]\nworkers = 1\n\n[metrics]\nlisten = \"127.0.0.1:9253\"\n\n[log]\nlevel = \"debug\"\n";
    let mut nodens = Nodens::launch(config, &ns.exec());
    let out = wait_until(
        Duration::from_secs(20),
        "nodens inside the namespace to answer www.test.",
        || {
            nodens.assert_alive();
            ns.dig("127.0.0.1", 1053, "www.test.", "A")
                .filter(|o| o.contains("status: NOERROR"))
        },
    );
    assert!(out.contains("192.0.2.1"), "dig through nodens:\n{out}");
    let out = ns
        .dig("127.0.0.1", 1053, "nope.test.", "A")
        .expect("NXDOMAIN answer");
    assert!(
        out.contains("status: NXDOMAIN"),
        "dig through nodens:\n{out}"
    );

    core.sync_log_via(|name| {
        let _ = ns.dig("127.0.0.1", 53, name, "TXT");
    });
    assert!(
        core.count_queries("www.test.", "A") >= 1,
        "the resolv.conf nameserver never saw the query"
    );
    assert_eq!(core.count_queries("nope.test.", "A"), 1);
}

// ---- workers ---------------------------------------------------------------

/// A config without `workers` (so the default, 0 = automatic). No query is
/// ever sent; the zone only keeps nodens away from the host's resolv.conf.
fn auto_workers_config(net: &Net) -> String {
    Cfg::new(net)
        .auto_workers()
        .zone(Zone::new("test.", &[net.silent(0)]))
        .to_toml()
}

fn nproc() -> usize {
    let out = Command::new(tool("nproc")).output().expect("nproc");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("nproc output")
}

/// The CPU limit of this process's own cgroup (floor(quota / period), at
/// least 1), if there is one.
fn own_cgroup_cpu_limit() -> Option<usize> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let (quota, period) = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
        let max = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/cpu.max"))
            .or_else(|_| std::fs::read_to_string("/sys/fs/cgroup/cpu.max"))
            .ok()?;
        let mut f = max.split_whitespace();
        let quota = f.next()?.parse::<i64>().ok()?; // "max" does not parse: no limit
        (quota, f.next()?.parse::<i64>().ok()?)
    } else {
        let path = cgroups.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            ctrls.split(',').any(|c| c == "cpu").then_some(path)
        })?;
        let read = |file: &str| {
            std::fs::read_to_string(format!("/sys/fs/cgroup/cpu{path}/{file}"))
                .or_else(|_| std::fs::read_to_string(format!("/sys/fs/cgroup/cpu/{file}")))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        (read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?)
    };
    (quota > 0 && period > 0).then(|| ((quota / period) as usize).max(1))
}

#[test]
fn taskset_one_cpu_gives_one_worker() {
    needs!(Need::Tool("taskset"));
    let net = Net::alloc();
    let mut nodens = Nodens::launch(&auto_workers_config(&net), &["taskset", "-c", "0"]);
    assert_eq!(
        nodens.wait_workers(Duration::from_secs(20)),
        1,
        "workers under taskset -c 0"
    );
    nodens.wait_ready();
}

#[test]
fn workers_default_to_available_cpus() {
    let net = Net::alloc();
    let expected = own_cgroup_cpu_limit()
        .map_or(nproc(), |q| q.min(nproc()))
        .max(1);
    let mut nodens = Nodens::launch(&auto_workers_config(&net), &[]);
    assert_eq!(
        nodens.wait_workers(Duration::from_secs(20)),
        expected,
        "nproc = {}, own cgroup limit = {:?}",
        nproc(),
        own_cgroup_cpu_limit()
    );
    nodens.wait_ready();
}

#[test]
fn cgroup_cpu_quota_gives_one_worker() {
    needs!(Need::Root);
    let net = Net::alloc();
    if nproc() < 2 {
        eprintln!(
            "warning: only {} CPU; this test cannot tell the quota from the affinity",
            nproc()
        );
    }
    let cg = CpuCgroup::create("test", 2_500, 100_000); // 25m: 2.5% of one CPU
    let wrapper = cg.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut nodens = Nodens::launch(&auto_workers_config(&net), &wrapper);
    // Throttled to 2.5% of a CPU, startup is slow: a generous deadline.
    assert_eq!(
        nodens.wait_workers(Duration::from_secs(60)),
        1,
        "workers in a cgroup with a 25m CPU quota"
    );
    drop(nodens);
}
