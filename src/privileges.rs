//! Capabilities: what nodens keeps once its sockets are bound.
//!
//! Binding port 53 needs `CAP_NET_BIND_SERVICE`; nothing else nodens does
//! while serving needs a capability. Linux capabilities belong to threads,
//! so each thread drops what it does not need when it starts:
//!
//! - the threads that read client packets and talk to upstreams (the UDP
//!   workers and the runtime's threads) keep nothing;
//! - the main thread, which binds new listen addresses on reload, keeps
//!   `CAP_NET_BIND_SERVICE` only, in its effective, permitted and bounding
//!   sets; with node setup on (`[node] setup = true`) also `CAP_NET_ADMIN`
//!   and `CAP_NET_RAW`, for the netlink requests and the `nft`/`iptables`
//!   runs that keep the interface and rules in place (done on that thread).
//!
//! The fail-open supervisor (`node/supervisor.rs`), a process of its own,
//! keeps `CAP_NET_ADMIN` and `CAP_NET_RAW` once it has started the server:
//! what its withdraw needs (it signals a server of its own uid).
//!
//! Threads share one address space, so this is a bound on what a thread
//! is allowed by the kernel, not isolation between them: the container's
//! own capability set (deploy: `NET_BIND_SERVICE`, and `NET_ADMIN` for node
//! setup) is the outer bound. Without the capabilities to change (not
//! root, no CAP_SETPCAP) this does nothing and says so at debug level.

use caps::{CapSet, Capability, CapsHashSet};

/// What the main thread of the server needs: port 53, and with node setup
/// the interface and the rules (`nft`, `iptables`).
fn needed(node_setup: bool) -> Vec<Capability> {
    let mut keep = vec![Capability::CAP_NET_BIND_SERVICE];
    if node_setup {
        keep.extend([Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW]);
    }
    keep
}

/// What a program nodens runs needs (`nft`, `iptables`, the supervised
/// server): handed on through the ambient set, which is how a process that
/// is not root passes capabilities across `execve`.
fn raise_ambient(caps: &[Capability]) {
    for &cap in caps {
        if let Err(e) = caps::raise(None, CapSet::Ambient, cap) {
            tracing::debug!("cannot raise {cap} in the ambient set: {e}");
        }
    }
}

/// Runs this process as `uid`:`gid` (no supplementary groups) from now on,
/// keeping `keep` (effective, permitted, inheritable and ambient: a program
/// it runs gets them too) and nothing else. A dedicated uid is what keeps
/// other root processes on the node out of nodens's sockets: the kernel
/// admits a socket to a `SO_REUSEPORT` group only for the uid that made the
/// group. Call before any thread starts (the ids and capabilities of the
/// calling thread are set; threads started later inherit them).
pub fn become_user(uid: u32, gid: u32, keep: &[Capability]) -> std::io::Result<()> {
    let last = || std::io::Error::last_os_error();
    // SAFETY: prctl, setgroups, setresgid and setresuid read only their
    // integer arguments (setgroups: a zero-length list, no pointer read).
    unsafe {
        if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
            return Err(last());
        }
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(last());
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            return Err(last());
        }
        if libc::setresuid(uid, uid, uid) != 0 {
            return Err(last());
        }
        libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
    }
    let keep: CapsHashSet = keep
        .iter()
        .copied()
        .filter(|&cap| caps::has_cap(None, CapSet::Permitted, cap).unwrap_or(false))
        .collect();
    for set in [CapSet::Permitted, CapSet::Effective, CapSet::Inheritable] {
        caps::set(None, set, &keep).map_err(std::io::Error::other)?;
    }
    raise_ambient(&keep.into_iter().collect::<Vec<_>>());
    Ok(())
}

/// The capabilities `nodens serve` keeps across [`become_user`]: the
/// server's, and the supervisor's (which hands them to the server it runs).
pub fn for_serving(node_setup: bool) -> Vec<Capability> {
    needed(node_setup)
}

/// The capabilities `nodens node guard` keeps: a withdraw's.
pub fn for_guarding() -> Vec<Capability> {
    vec![Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW]
}

/// Sets no_new_privs: nothing this process runs can gain privileges
/// (setuid binaries, file capabilities). Call before threads start, which
/// inherit it.
pub fn forbid_new_privileges() {
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS reads only its integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        tracing::debug!(
            "cannot set no_new_privs: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Drops every capability of the calling thread.
pub fn drop_all_in_this_thread() {
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        if let Err(e) = caps::clear(None, set) {
            tracing::debug!("cannot clear {set:?} capabilities: {e}");
        }
    }
}

/// Keeps only `CAP_NET_BIND_SERVICE` in the calling thread (the main one),
/// and with `node_setup` also `CAP_NET_ADMIN` and `CAP_NET_RAW`, which stay
/// inheritable and ambient too: the `nft` and `iptables` the node work runs
/// need them, and a process that is not root passes nothing else across
/// `execve`.
pub fn keep_only_in_this_thread(node_setup: bool) {
    let keep = needed(node_setup);
    let for_programs: Vec<Capability> = keep
        .iter()
        .copied()
        .filter(|&cap| cap != Capability::CAP_NET_BIND_SERVICE)
        .collect();
    keep_only_these_in_this_thread(&keep, &for_programs);
}

/// Keeps only `keep` in the calling thread's effective, permitted and
/// bounding sets, and `for_programs` (a part of `keep`) in its inheritable
/// and ambient sets: threads it starts from then on get at most `keep`,
/// programs it runs at most `for_programs`.
pub fn keep_only_these_in_this_thread(keep: &[Capability], for_programs: &[Capability]) {
    // The bounding set first: dropping from it needs CAP_SETPCAP, which
    // goes with the effective set below.
    if let Ok(bounding) = caps::read(None, CapSet::Bounding) {
        for cap in bounding.into_iter().filter(|c| !keep.contains(c)) {
            if let Err(e) = caps::drop(None, CapSet::Bounding, cap) {
                tracing::debug!("cannot drop {cap} from the bounding set: {e}");
                break;
            }
        }
    }
    let only: CapsHashSet = keep
        .iter()
        .copied()
        .filter(|&cap| caps::has_cap(None, CapSet::Permitted, cap).unwrap_or(false))
        .collect();
    let for_programs: CapsHashSet = only
        .iter()
        .copied()
        .filter(|cap| for_programs.contains(cap))
        .collect();
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        let wanted = if matches!(set, CapSet::Inheritable) {
            &for_programs
        } else {
            &only
        };
        if let Err(e) = caps::set(None, set, wanted) {
            tracing::debug!("cannot set {set:?} capabilities: {e}");
        }
    }
    if let Err(e) = caps::clear(None, CapSet::Ambient) {
        tracing::debug!("cannot clear the ambient set: {e}");
    }
    raise_ambient(&for_programs.into_iter().collect::<Vec<_>>());
}
