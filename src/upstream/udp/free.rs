//! An upstream's free UDP sockets: each socket whose query got its answer
//! waits here for the next query to the same upstream, at most
//! [`MAX_USES`] queries and [`MAX_AGE`] in all (see the module above).
//!
//! Owned by the upstream (`upstream::Upstream::udp`), not the process: two
//! request paths, or an upstream dropped on reload, share nothing, and
//! dropping the upstream closes its sockets. One list per thread, because
//! a socket is registered with the event loop of the runtime that opened
//! it and every thread of nodens runs tasks of one runtime only; a list
//! remembers its thread, since a thread that exits passes its slot on to
//! the next one. Behind a lock only for the sweep ([`sweep`], once a
//! second): a thread's own exchanges find it uncontended.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Mutex, Weak};
use std::thread::ThreadId;
use std::time::Duration;

use thread_local::ThreadLocal;
use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::lock::lock;

/// Queries one socket carries before it is closed.
pub(super) const MAX_USES: u32 = 32;
/// How long a socket is used before it is closed.
pub(super) const MAX_AGE: Duration = Duration::from_secs(5);
/// Free sockets kept per upstream and thread; more are closed.
const MAX_FREE: usize = 256;
/// How often [`sweep`] looks for free sockets past [`MAX_AGE`]: none stays
/// open longer than `MAX_AGE` and this.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    /// This thread's id, read once (`thread::current()` clones a handle).
    static THIS_THREAD: ThreadId = std::thread::current().id();
}

pub(super) struct PooledSocket {
    pub(super) socket: UdpSocket,
    pub(super) uses: u32,
    /// When it is closed instead of reused ([`MAX_AGE`] after it opened):
    /// a comparison per use, where an age would be a subtraction.
    pub(super) expires: Instant,
}

/// One upstream's UDP side: its address, and its free sockets, one list
/// per thread.
pub(crate) struct Sockets {
    pub(super) server: SocketAddr,
    threads: ThreadLocal<Mutex<ThreadList>>,
}

/// One thread's free sockets: the one given back last at the back (it is
/// used next), expired ones closed from the front.
struct ThreadList {
    thread: ThreadId,
    sockets: VecDeque<PooledSocket>,
}

impl Sockets {
    pub(crate) fn new(server: SocketAddr) -> Sockets {
        Sockets {
            server,
            threads: ThreadLocal::new(),
        }
    }

    /// Runs `f` on this thread's list, emptied first if it was another
    /// thread's (one that exited).
    fn with_mine<T>(&self, f: impl FnOnce(&mut VecDeque<PooledSocket>) -> T) -> T {
        let me = THIS_THREAD.with(|id| *id);
        let list = self.threads.get_or(|| {
            Mutex::new(ThreadList {
                thread: me,
                sockets: VecDeque::new(),
            })
        });
        let mut list = lock(list);
        if list.thread != me {
            list.thread = me;
            list.sockets.clear();
        }
        f(&mut list.sockets)
    }

    /// The socket given back last, if it is not past its age.
    pub(super) fn take(&self, now: Instant) -> Option<PooledSocket> {
        loop {
            let pooled = self.with_mine(VecDeque::pop_back)?;
            if now < pooled.expires {
                return Some(pooled);
            }
        }
    }

    /// Keeps `pooled` for the next query, unless it has carried its last.
    pub(super) fn give_back(&self, pooled: PooledSocket, now: Instant) {
        let too_old = |s: &PooledSocket| now >= s.expires;
        if pooled.uses >= MAX_USES || too_old(&pooled) {
            return;
        }
        self.with_mine(|list| {
            // Sockets left over from a burst do not stay open for long.
            while list.front().is_some_and(too_old) {
                list.pop_front();
            }
            if list.len() < MAX_FREE {
                list.push_back(pooled);
            }
        });
    }

    /// Closes the free sockets of every thread that expire by `now`;
    /// returns how many it closed.
    pub(crate) fn close_expired(&self, now: Instant) -> usize {
        let mut expired = Vec::new();
        for list in self.threads.iter() {
            let mut list = lock(list);
            let (keep, old): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut list.sockets)
                .into_iter()
                .partition(|s| now < s.expires);
            list.sockets = keep;
            expired.extend(old);
        }
        // They close on return, out of the locks (each leaves its event loop).
        expired.len()
    }
}

/// Closes, every [`SWEEP_EVERY`], the free sockets of `free` past
/// [`MAX_AGE`], so that a thread with no more misses (the burst of
/// refreshes after an outage, then quiet) does not keep them open until
/// its next one. Ends when the upstream is gone (upkeep).
pub(crate) async fn sweep(free: Weak<Sockets>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(free) = free.upgrade() else {
            return;
        };
        free.close_expired(Instant::now());
    }
}
