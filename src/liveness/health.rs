//! What `/health` and the metrics say of the serving threads: panics,
//! workers restarted after one, workers dead.
//!
//! A panic on the request path must never be a silent partial outage: a UDP
//! worker that died with its socket still in the `SO_REUSEPORT` group would
//! leave the kernel steering a share of every pod's flows into a buffer
//! nobody reads. So every panic is counted (a hook, process-wide), a UDP
//! worker catches a panic of its loop and serves again (`listen::udp`), and
//! a worker thread that ends anyway is marked dead: `/health` then fails
//! (the kubelet restarts nodens) and its progress counter, which the
//! listener owns, stops (the fail-open supervisor kills the server).

use std::sync::atomic::Ordering;
use std::sync::{LazyLock, Once};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};

use super::{Progress, REGISTRY};
use crate::log_limit::LogLimiter;

/// Every panic of the process, on any thread.
pub(crate) static PANICS: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "nodens_panics_total",
        "Panics on any thread of the process (each is also logged): a bug, to report.",
    )
    .expect("valid metric")
});

/// Serving loops that panicked and were started again.
pub(crate) static RESTARTS: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "nodens_worker_restarts_total",
        "Serving loops (UDP workers, TCP acceptors) that panicked and were started again on the same socket.",
    )
    .expect("valid metric")
});

/// Serving loops whose thread ended while their listener still serves.
pub(crate) static DEAD: LazyLock<IntGauge> = LazyLock::new(|| {
    IntGauge::new(
        "nodens_workers_dead",
        "Serving threads that ended while their listener serves: /health fails while any is.",
    )
    .expect("valid metric")
});

/// Installs the hook that counts every panic. The previous hook (the
/// message, and a backtrace with `RUST_BACKTRACE`) still runs, at most once
/// a second: a panic repeated on every query must not flood the log.
pub fn count_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let limit = LogLimiter::new(Duration::from_secs(1));
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.inc();
            if let Some(suppressed) = limit.allow() {
                if suppressed > 0 {
                    eprintln!("nodens: {suppressed} more panics since the last one reported");
                }
                previous(info);
            }
        }));
    });
}

/// A worker thread's mark: dropped while the thread unwinds, the worker is
/// dead. Held by the thread for its whole life.
pub(crate) struct DeadIfUnwound(pub(crate) std::sync::Arc<Progress>);

impl Drop for DeadIfUnwound {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.mark_dead();
        }
    }
}

impl Progress {
    /// The loop panicked and serves again.
    pub(crate) fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        RESTARTS.inc();
    }

    /// The loop's thread ended for good while it should serve.
    pub(crate) fn mark_dead(&self) {
        if !self.dead.swap(true, Ordering::Relaxed) {
            DEAD.inc();
        }
    }
}

/// Sockets of other processes on nodens's listening addresses, as the
/// server's last check found them (`listen::reuseport`).
static STRANGERS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Records what the server's last check of its sockets found.
pub(crate) fn set_strangers(found: Vec<String>) {
    *crate::lock::lock(&STRANGERS) = found;
}

/// The serving loops as `/health` reports them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Loops whose thread is gone: the process no longer serves all it
    /// should.
    pub dead: Vec<String>,
    /// Loops that panicked and serve again, with how many times.
    pub restarted: Vec<(String, u64)>,
    pub panics: u64,
    /// Other processes' sockets on a listening address: they receive
    /// nothing (the selector), but someone is trying.
    pub strangers: Vec<String>,
}

impl Health {
    /// Whether the process serves all it should.
    pub fn ok(&self) -> bool {
        self.dead.is_empty()
    }

    /// The `/health` page: `OK` or `DEAD`, then what happened.
    pub fn page(&self) -> String {
        let mut page = String::from(if self.ok() { "OK\n" } else { "DEAD\n" });
        for name in &self.dead {
            page.push_str(&format!("dead: {name}\n"));
        }
        for (name, times) in &self.restarted {
            page.push_str(&format!("restarted: {name} ({times} times)\n"));
        }
        if self.panics > 0 {
            page.push_str(&format!("panics: {}\n", self.panics));
        }
        for stranger in &self.strangers {
            page.push_str(&format!("stranger: {stranger}\n"));
        }
        page
    }
}

/// The health of the process's serving loops.
pub fn health() -> Health {
    let loops = REGISTRY.live();
    let mut health = Health {
        panics: PANICS.get(),
        strangers: crate::lock::lock(&STRANGERS).clone(),
        ..Health::default()
    };
    for p in loops {
        if p.dead.load(Ordering::Relaxed) {
            health.dead.push(p.name.clone());
        }
        let restarts = p.restarts.load(Ordering::Relaxed);
        if restarts > 0 {
            health.restarted.push((p.name.clone(), restarts));
        }
    }
    health
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::liveness::Registry;

    #[test]
    fn a_thread_that_unwinds_is_dead_and_one_that_returns_is_not() {
        let registry = Registry::new();
        let unwound = registry.register("udp-0".into());
        let returned = registry.register("udp-1".into());
        let mark = DeadIfUnwound(unwound.clone());
        let _ = std::thread::spawn(move || {
            let _mark = mark;
            panic!("a worker's bug");
        })
        .join();
        let mark = DeadIfUnwound(returned.clone());
        std::thread::spawn(move || drop(mark)).join().unwrap();
        assert!(unwound.dead.load(Ordering::Relaxed));
        assert!(!returned.dead.load(Ordering::Relaxed));
    }

    #[test]
    fn the_page_says_ok_only_without_dead_loops() {
        let mut health = Health {
            restarted: vec![("udp 127.0.0.1:53 #0".into(), 2)],
            panics: 2,
            ..Health::default()
        };
        assert!(health.ok());
        assert_eq!(
            health.page(),
            "OK\nrestarted: udp 127.0.0.1:53 #0 (2 times)\npanics: 2\n"
        );
        health.dead.push("udp 127.0.0.1:53 #1".into());
        assert!(!health.ok());
        assert!(
            health
                .page()
                .starts_with("DEAD\ndead: udp 127.0.0.1:53 #1\n")
        );
    }
}
