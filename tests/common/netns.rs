//! Root and network namespaces: tests that need privileges ask
//! [`require_root`], and [`in_netns`] runs client code inside a namespace a
//! test made itself.

use std::path::Path;
use std::thread;

pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// For tests that need root (network namespaces, cgroups): true to go on,
/// false to skip (only when NODENS_ALLOW_SKIP_ROOT=1), else panics.
pub fn require_root(what: &str) -> bool {
    if euid() == 0 {
        return true;
    }
    if std::env::var("NODENS_ALLOW_SKIP_ROOT").as_deref() == Ok("1") {
        eprintln!("SKIPPED {what}: needs root, and NODENS_ALLOW_SKIP_ROOT=1");
        return false;
    }
    panic!(
        "{what} needs root (network namespaces / cgroups); run as root, or set NODENS_ALLOW_SKIP_ROOT=1 to skip it"
    )
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
