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
//! keeps `CAP_NET_ADMIN`, `CAP_NET_RAW` and `CAP_KILL` once it has started
//! the server: what its withdraw and its signals to the server need.
//!
//! Threads share one address space, so this is a bound on what a thread
//! is allowed by the kernel, not isolation between them: the container's
//! own capability set (deploy: `NET_BIND_SERVICE`, and `NET_ADMIN` for node
//! setup) is the outer bound. Without the capabilities to change (not
//! root, no CAP_SETPCAP) this does nothing and says so at debug level.

use caps::{CapSet, Capability, CapsHashSet};

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
/// and with `node_setup` also `CAP_NET_ADMIN` and `CAP_NET_RAW`.
pub fn keep_only_in_this_thread(node_setup: bool) {
    let mut keep = vec![Capability::CAP_NET_BIND_SERVICE];
    if node_setup {
        keep.extend([Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW]);
    }
    keep_only_these_in_this_thread(&keep);
}

/// Keeps only `keep` in the calling thread's effective, permitted and
/// bounding sets, and clears its inheritable set. Threads it starts from
/// then on, and programs it runs, get at most these.
pub fn keep_only_these_in_this_thread(keep: &[Capability]) {
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
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        let wanted = if matches!(set, CapSet::Inheritable) {
            CapsHashSet::new()
        } else {
            only.clone()
        };
        if let Err(e) = caps::set(None, set, &wanted) {
            tracing::debug!("cannot set {set:?} capabilities: {e}");
        }
    }
}
