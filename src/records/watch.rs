//! Hosts files followed while nodens runs: every `reload` interval each
//! file's mtime, size and inode are compared with the last read, and a
//! changed file is read again (CoreDNS's `hosts` polls the same way, every
//! 5 s by default), on a blocking thread, never more than
//! `hosts::MAX_HOSTS_FILE` bytes. A file that cannot be read or parsed (or
//! is too large) keeps its last good records, with one log line until it is
//! good again.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;

use super::hosts::{HostsData, Stamp, read_file};
use crate::tasks::Upkeep;

/// One hosts file and its records now.
pub(crate) struct Source {
    pub(crate) path: PathBuf,
    pub(crate) data: ArcSwap<HostsData>,
    state: Mutex<State>,
}

struct State {
    stamp: Option<Stamp>,
    /// What failed last, so that it is logged once.
    failing: Option<String>,
}

impl Source {
    pub(crate) fn new(path: PathBuf, data: Arc<HostsData>, stamp: Option<Stamp>) -> Source {
        Source {
            path,
            data: ArcSwap::new(data),
            state: Mutex::new(State {
                stamp,
                failing: None,
            }),
        }
    }

    /// Reads the file again if it changed.
    fn check(&self, zones: &[Box<[u8]>], reverse: bool) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let meta = match std::fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) => {
                let why = format!("cannot read: {e}");
                if state.failing.as_ref() != Some(&why) {
                    tracing::warn!(path = %self.path.display(), "hosts file {why}; its last records stay in force");
                    state.failing = Some(why);
                }
                return;
            }
        };
        let stamp = Stamp::of(&meta);
        if state.stamp == Some(stamp) && state.failing.is_none() {
            return;
        }
        match read_file(&self.path, zones, reverse) {
            Ok((data, _)) => {
                tracing::info!(path = %self.path.display(), names = data.len(), "hosts file read");
                self.data.store(Arc::new(data));
                state.failing = None;
                state.stamp = Some(stamp);
            }
            Err(why) => {
                let why = why.to_string();
                if state.failing.as_ref() != Some(&why) {
                    tracing::warn!("{why}; its last records stay in force");
                    state.failing = Some(why);
                }
                state.stamp = Some(stamp);
            }
        }
    }
}

/// Polls `sources` every `every` until they are dropped (a reload builds
/// new ones).
pub(crate) fn follow(
    sources: &Arc<Vec<Source>>,
    zones: Vec<Box<[u8]>>,
    reverse: bool,
    every: Duration,
    upkeep: &Upkeep,
) {
    if every.is_zero() || sources.is_empty() {
        return;
    }
    let weak: Weak<Vec<Source>> = Arc::downgrade(sources);
    upkeep.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(sources) = weak.upgrade() else {
                return;
            };
            // File I/O off the runtime's threads: a slow or huge file
            // (read to a bound) must not hold up the main loop.
            let zones = zones.clone();
            let checked = tokio::task::spawn_blocking(move || {
                for source in sources.iter() {
                    source.check(&zones, reverse);
                }
            });
            if let Err(e) = checked.await {
                tracing::error!("hosts files: the check failed: {e}");
            }
        }
    });
}
