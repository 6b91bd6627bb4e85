//! The DNS cache processes' CPU quota against their threads: a process
//! with many runnable threads in a small CFS quota spends the quota in the
//! first milliseconds of each period and is then throttled for the rest,
//! which is latency on every query (the field report: 25m CPU and 72
//! runtime threads).

use std::path::{Path, PathBuf};

use super::Out;
use super::sockets::{comm_of, processes};
use crate::doctor::{Finding, Severity};

const DNS_CACHES: [&str; 5] = ["nodens", "node-cache", "coredns", "dnsmasq", "unbound"];

/// A CFS quota: `quota_us` of CPU time every `period_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quota {
    pub(crate) quota_us: u64,
    pub(crate) period_us: u64,
}

impl Quota {
    fn cores(self) -> f64 {
        self.quota_us as f64 / self.period_us as f64
    }
    fn whole_cores(self) -> u64 {
        self.quota_us.div_ceil(self.period_us).max(1)
    }
}

/// From cpu.stat: periods with runnable threads, those throttled, and the
/// time throttled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Throttling {
    pub(crate) periods: u64,
    pub(crate) throttled: u64,
    pub(crate) throttled_usec: u64,
}

/// A process's cgroup CPU settings, and the file they were read from.
#[derive(Debug, Clone, PartialEq)]
struct Cpu {
    dir: PathBuf,
    quota: Option<Quota>,
    throttling: Option<Throttling>,
}

pub(crate) fn check(proc_root: &Path, cgroup_root: &Path, out: &mut Out) {
    let found: Vec<(u32, PathBuf, String)> = processes(proc_root)
        .into_iter()
        .map(|(pid, dir)| {
            let comm = comm_of(&dir);
            (pid, dir, comm)
        })
        .filter(|(_, _, comm)| DNS_CACHES.contains(&comm.as_str()))
        // Not this doctor run itself (it is `nodens` too).
        .filter(|(pid, _, _)| *pid != std::process::id())
        .collect();
    if found.is_empty() {
        out.fact(format!(
            "DNS cache processes: none found in {} ({})",
            proc_root.display(),
            DNS_CACHES.join(", ")
        ));
    }
    for (pid, dir, comm) in found {
        check_process(pid, &dir, &comm, cgroup_root, out);
    }
}

fn check_process(pid: u32, dir: &Path, comm: &str, cgroup_root: &Path, out: &mut Out) {
    let who = format!("{comm} (pid {pid})");
    let Some(threads) = threads_of(dir) else {
        out.fact(format!(
            "{who}: threads not read ({}/status)",
            dir.display()
        ));
        return;
    };
    let threads_text = if threads == 1 {
        "1 thread".to_string()
    } else {
        format!("{threads} threads")
    };
    let cpu = match std::fs::read_to_string(dir.join("cgroup")) {
        Ok(text) => cpu_of(&text, cgroup_root),
        Err(e) => {
            out.fact(format!("{who}: {threads_text}; cgroup not read ({e})"));
            return;
        }
    };
    let Some(cpu) = cpu else {
        out.fact(format!(
            "{who}: {threads_text}; its cgroup's CPU settings not found under {} (not mounted here?)",
            cgroup_root.display()
        ));
        return;
    };
    let Some(quota) = cpu.quota else {
        out.fact(format!(
            "{who}: {threads_text}, no CPU quota ({})",
            cpu.dir.display()
        ));
        return;
    };
    let line = format!(
        "{who}: {threads_text}, CPU quota {} us per {} us ({:.3} CPU) in {}",
        quota.quota_us,
        quota.period_us,
        quota.cores(),
        cpu.dir.display()
    );
    out.fact(line.clone());
    let throttled = cpu.throttling.map(|t| {
        format!(
            "throttled in {} of {} periods, {:.1} s in total (cpu.stat)",
            t.throttled,
            t.periods,
            t.throttled_usec as f64 / 1e6
        )
    });
    if let Some(t) = &throttled {
        out.fact(format!("{who}: {t}"));
    }
    if threads > 4 * quota.whole_cores() && threads > 8 {
        let mut f = Finding::new(
            "cpu-quota-threads",
            Severity::Warning,
            format!(
                "{who} runs {threads} threads in a {:.3} CPU quota: it is throttled in bursts",
                quota.cores()
            ),
        )
        .evidence(line);
        if let Some(t) = throttled {
            f = f.evidence(t);
        }
        out.finding(f.fix(fix_for(comm, quota)));
    }
}

fn fix_for(comm: &str, quota: Quota) -> String {
    let cores = quota.whole_cores();
    let own = match comm {
        "nodens" => format!(
            "nodens: leave server.workers unset (0), so the workers follow the quota, or set it to {cores}."
        ),
        "coredns" | "node-cache" => format!(
            "Go: set GOMAXPROCS={cores} in the container's environment (Go before 1.25 does not read the quota)."
        ),
        _ => String::new(),
    };
    format!(
        "Fewer threads than the quota can run, or a larger quota: raise the CPU limit (at least \
         {} CPU for {cores} busy threads), or drop the limit and keep the request. {own}",
        cores
    )
}

fn threads_of(dir: &Path) -> Option<u64> {
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

/// The CPU settings of a /proc/PID/cgroup text: cgroup v2 (`0::/path`,
/// `cpu.max`) when the root has `cgroup.controllers`, else v1's cpu
/// controller (`N:cpu,cpuacct:/path`, `cpu.cfs_quota_us`).
fn cpu_of(cgroup_text: &str, root: &Path) -> Option<Cpu> {
    if root.join("cgroup.controllers").exists() {
        let path = cgroup_text.lines().find_map(|l| l.strip_prefix("0::"))?;
        let dir = root.join(path.trim_start_matches('/'));
        let quota = std::fs::read_to_string(dir.join("cpu.max"))
            .ok()
            .and_then(|t| parse_cpu_max(&t));
        let throttling = std::fs::read_to_string(dir.join("cpu.stat"))
            .ok()
            .map(|t| parse_cpu_stat(&t));
        return Some(Cpu {
            dir,
            quota,
            throttling,
        });
    }
    let (controllers, path) = cgroup_text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then_some((controllers, path))
    })?;
    let mount = [controllers, "cpu,cpuacct", "cpu"]
        .iter()
        .map(|c| root.join(c))
        .find(|d| d.join("cpu.cfs_quota_us").exists())?;
    let dir = mount.join(path.trim_start_matches('/'));
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let quota = match (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
        (Some(q), Some(p)) => parse_cfs(&q, &p),
        _ => None,
    };
    let throttling = read("cpu.stat").map(|t| parse_cpu_stat(&t));
    Some(Cpu {
        dir,
        quota,
        throttling,
    })
}

/// cgroup v2 `cpu.max`: "max 100000" (none) or "2500 100000".
pub(crate) fn parse_cpu_max(text: &str) -> Option<Quota> {
    let mut words = text.split_whitespace();
    let quota_us = words.next()?.parse().ok()?;
    let period_us = words.next()?.parse().ok().filter(|p| *p > 0)?;
    Some(Quota {
        quota_us,
        period_us,
    })
}

/// cgroup v1: `cpu.cfs_quota_us` (-1: none) and `cpu.cfs_period_us`.
fn parse_cfs(quota: &str, period: &str) -> Option<Quota> {
    let quota_us = quota.trim().parse::<i64>().ok().filter(|q| *q > 0)?;
    let period_us = period.trim().parse().ok().filter(|p| *p > 0)?;
    Some(Quota {
        quota_us: quota_us as u64,
        period_us,
    })
}

/// `cpu.stat`, v2 (`throttled_usec`) or v1 (`throttled_time`, ns).
pub(crate) fn parse_cpu_stat(text: &str) -> Throttling {
    let mut t = Throttling::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), Some(value)) = (
            words.next(),
            words.next().and_then(|v| v.parse::<u64>().ok()),
        ) else {
            continue;
        };
        match key {
            "nr_periods" => t.periods = value,
            "nr_throttled" => t.throttled = value,
            "throttled_usec" => t.throttled_usec = value,
            "throttled_time" => t.throttled_usec = value / 1000,
            _ => {}
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_and_cfs_files() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        let q = parse_cpu_max("2500 100000\n").unwrap();
        assert_eq!(
            (q.quota_us, q.period_us, q.whole_cores()),
            (2500, 100000, 1)
        );
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("250000\n", "100000\n").unwrap().whole_cores(), 3);
    }

    #[test]
    fn cpu_stat_v1_and_v2() {
        let v2 = "usage_usec 1000\nnr_periods 5000\nnr_throttled 1234\nthrottled_usec 12300000\n";
        assert_eq!(
            parse_cpu_stat(v2),
            Throttling {
                periods: 5000,
                throttled: 1234,
                throttled_usec: 12_300_000
            }
        );
        let v1 = "nr_periods 10\nnr_throttled 3\nthrottled_time 5000000\n";
        assert_eq!(parse_cpu_stat(v1).throttled_usec, 5000);
    }

    #[test]
    fn a_v1_hierarchy_on_disk() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cpu,cpuacct/kubepods/pod1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(root.path().join("cpu,cpuacct/cpu.cfs_quota_us"), "-1").unwrap();
        std::fs::write(dir.join("cpu.cfs_quota_us"), "2500").unwrap();
        std::fs::write(dir.join("cpu.cfs_period_us"), "100000").unwrap();
        let cpu = cpu_of(
            "4:memory:/x\n3:cpu,cpuacct:/kubepods/pod1\n0::/\n",
            root.path(),
        )
        .unwrap();
        assert_eq!(cpu.dir, dir);
        assert_eq!(
            cpu.quota,
            Some(Quota {
                quota_us: 2500,
                period_us: 100000
            })
        );
    }
}
