//! Where tasks run: the one rule, in one place.
//!
//! nodens has one multi-threaded runtime (the *main* runtime, started by
//! `main`) and, per UDP worker thread, a current-thread runtime whose event
//! loop turns only while that worker has misses of its own in flight. So:
//!
//! - **Query work** (resolving a miss, serving a TCP connection, a prefetch)
//!   is tracked: shutdown stops reading and waits for it. A miss runs where
//!   its query arrived: a UDP worker polls its misses on its own loop (and
//!   holds a [`Tasks::token`] while it has any), TCP spawns them on main
//!   ([`Tasks::spawn_query`]), so a reply leaves from the same thread without
//!   a hand-off. A prefetch is not tied to a client and runs on main
//!   ([`Tasks::spawn_query_on_main`]): a worker's loop may stop turning.
//! - **Upkeep** (TCP accept loops, upstream pool connections, health
//!   probes, the HTTP server) is not tracked: it lives as long as its owner
//!   and is stopped by it. It always runs on main ([`Upkeep::spawn`]), never
//!   on a worker's loop, for the same reason.

use std::future::Future;

use tokio::runtime::Handle;
use tokio_util::task::TaskTracker;

/// Spawns upkeep on the main runtime.
#[derive(Clone, Debug)]
pub struct Upkeep(Handle);

impl Upkeep {
    /// The runtime this is called on; nodens builds its upkeep handles on
    /// main (at start and on reload). Panics outside a runtime.
    pub(crate) fn current() -> Upkeep {
        Upkeep(Handle::current())
    }

    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, task: F) {
        drop(self.0.spawn(task));
    }

    /// Upkeep its owner stops before its end (a watch dropped on reload).
    pub fn spawn_stoppable<F: Future<Output = ()> + Send + 'static>(
        &self,
        task: F,
    ) -> tokio::task::AbortHandle {
        self.0.spawn(task).abort_handle()
    }

    /// Enters the main runtime (to register a socket with its event loop).
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.0.enter()
    }
}

/// Query work, tracked for the drain on shutdown, and the upkeep handle.
#[derive(Clone, Debug)]
pub struct Tasks {
    queries: TaskTracker,
    upkeep: Upkeep,
}

impl Tasks {
    /// The main runtime is the one this is called on.
    pub fn on_current_runtime() -> Tasks {
        Tasks {
            queries: TaskTracker::new(),
            upkeep: Upkeep::current(),
        }
    }

    /// Query work on the runtime of the calling thread.
    pub fn spawn_query<F: Future<Output = ()> + Send + 'static>(&self, task: F) {
        drop(tokio::spawn(self.queries.track_future(task)));
    }

    /// Query work on the main runtime, whatever thread asks.
    pub fn spawn_query_on_main<F: Future<Output = ()> + Send + 'static>(&self, task: F) {
        drop(self.queries.spawn_on(task, &self.upkeep.0));
    }

    /// Query work that is not a task of its own (a UDP worker, which
    /// answers its misses on its own event loop): the drain waits until the
    /// token is dropped.
    pub fn token(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.queries.token()
    }

    pub fn upkeep(&self) -> &Upkeep {
        &self.upkeep
    }

    /// Stops accepting new query work and waits for what runs now.
    pub async fn drain(&self) {
        self.queries.close();
        self.queries.wait().await;
    }

    /// Query work still running (tasks, and UDP workers not yet exited).
    pub fn running(&self) -> usize {
        self.queries.len()
    }
}
