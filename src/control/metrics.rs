//! The control channel's series: requests by command, clients refused,
//! and cache flushes with the entries they dropped.

use prometheus::IntCounter;

use crate::metrics::{Counters, Registry, label_set};

label_set! {
    /// `nodens_control_requests_total`.
    pub(crate) struct CommandLabels { command = "command" }
    /// `nodens_cache_flushes_total`.
    pub(crate) struct ScopeLabels { scope = "scope" }
}

pub struct ControlMetrics {
    requests: Counters<CommandLabels<'static>>,
    pub(super) refused: IntCounter,
    flushes: Counters<ScopeLabels<'static>>,
    pub(super) flushed_entries: IntCounter,
}

impl ControlMetrics {
    pub fn register(r: &Registry) -> ControlMetrics {
        ControlMetrics {
            requests: r.counters(
                "nodens_control_requests_total",
                "Requests on the control socket, by command (invalid: not understood).",
            ),
            refused: r.counter(
                "nodens_control_refused_total",
                "Clients of the control socket refused: not running as nodens's uid.",
            ),
            flushes: r.counters(
                "nodens_cache_flushes_total",
                "Cache flushes asked for on the control socket, by scope (name, zone, all).",
            ),
            flushed_entries: r.counter(
                "nodens_cache_flushed_entries_total",
                "Cache entries dropped by flushes.",
            ),
        }
    }

    pub(super) fn request(&self, command: &str) {
        self.requests.get(&CommandLabels { command }).inc();
    }

    pub(super) fn flush(&self, scope: &str, entries: usize) {
        self.flushes.get(&ScopeLabels { scope }).inc();
        self.flushed_entries.inc_by(entries as u64);
    }
}
