//! How many worker threads to run.
//!
//! A node cache runs in a pod with a CPU limit, often far below the node's
//! core count. Sizing threads by the host (as Go did before 1.25: 72
//! threads inside a 25m CPU limit) makes the kernel throttle the whole
//! process. The default is the smaller of the cgroup CPU quota (cgroup v1
//! `cpu.cfs_quota_us` or v2 `cpu.max`, rounded down, at least 1) and the
//! CPUs in the affinity mask, which is what
//! `std::thread::available_parallelism` computes on Linux.

use std::num::NonZeroUsize;

/// The worker count to use and a sentence saying where it came from.
pub fn workers(configured: usize) -> (usize, &'static str) {
    if configured > 0 {
        return (configured, "configured");
    }
    let n = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    (n, "cgroup CPU quota and CPU affinity")
}
