//! A cgroup with a CPU quota for a test's processes (v1 or v2, whichever
//! the machine has), removed on drop with whatever still runs in it.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

/// A cgroup with a CPU quota, removed on drop (after its processes are gone).
pub struct CpuCgroup {
    dir: PathBuf,
}

impl CpuCgroup {
    /// quota/period in microseconds, v1 or v2, whichever this machine has.
    /// `tag` tells apart the test binaries that run at once.
    pub fn create(tag: &str, quota_us: u64, period_us: u64) -> CpuCgroup {
        let name = format!("nodens-{tag}-{}", std::process::id());
        if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            // cgroup v2: the cpu controller must be enabled for children.
            let root = Path::new("/sys/fs/cgroup");
            let ctl =
                std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
            if !ctl.split_whitespace().any(|c| c == "cpu") {
                std::fs::write(root.join("cgroup.subtree_control"), "+cpu").unwrap_or_else(|e| {
                    panic!("cannot enable the cpu controller in /sys/fs/cgroup (cgroup v2): {e}")
                });
            }
            let dir = root.join(&name);
            let _ = std::fs::remove_dir(&dir);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            std::fs::write(dir.join("cpu.max"), format!("{quota_us} {period_us}")).unwrap();
            CpuCgroup { dir }
        } else {
            let root = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.join("cpu.cfs_quota_us").exists())
                .expect("no cgroup v1 cpu controller mounted under /sys/fs/cgroup");
            let dir = root.join(&name);
            let _ = std::fs::remove_dir(&dir);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            std::fs::write(dir.join("cpu.cfs_period_us"), period_us.to_string()).unwrap();
            std::fs::write(dir.join("cpu.cfs_quota_us"), quota_us.to_string()).unwrap();
            CpuCgroup { dir }
        }
    }

    /// A wrapper that moves the shell into the cgroup, then execs the command.
    pub fn wrapper(&self) -> Vec<String> {
        let procs = self.dir.join("cgroup.procs");
        vec![
            "sh".into(),
            "-c".into(),
            format!("echo $$ > '{}' && exec \"$@\"", procs.display()),
            "sh".into(),
        ]
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        // Only our wrapped command was put here; anything still in it is a
        // descendant of it. The cgroup empties once they are gone.
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill(2) on a pid in the cgroup this test created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove cgroup {}", self.dir.display());
    }
}
