//! What observes answers: the query log, dnstap and the workload counters
//! are three observers of one event, a reply at the point where it is
//! counted (`serve::stats::ZoneStats::reply`).
//!
//! The request path builds one [`Event`] per reply and hands it to the
//! [`Observers`] of the listener and zone: none when every observer is off
//! (the counting point pays a loop over an empty list), else one call each.
//! An observer never waits and never makes a system call: the workload
//! counters add to a fixed table, and the two that write (the query log,
//! dnstap) copy a fixed-size record into one [`queue::Queue`] design, whose
//! writer thread formats and writes off the request path.
//!
//! Configuration: none of its own; each observer has its section
//! (`[query_log]`, `[dnstap]`, `[server] workload_counters`).

pub(crate) mod queue;

use std::net::SocketAddr;
use std::time::Instant;

use crate::listen::Proto;
use crate::wire::query::Query;

/// Where the reply came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A fresh cache entry (autopath's answers from the cache included).
    Cache,
    /// An expired entry served stale (RFC 8767).
    Stale,
    /// Written by nodens itself: a local NXDOMAIN, the identity names, a
    /// REFUSED, FORMERR or SERVFAIL of its own.
    Local,
    /// Asked upstream for this query (or joined an identical one in flight).
    Upstream,
}

impl Source {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Cache => "cache",
            Source::Stale => "stale",
            Source::Local => "local",
            Source::Upstream => "upstream",
        }
    }
}

/// A reply as the stage that wrote it knows it.
#[derive(Clone, Copy)]
pub(crate) struct Answered<'a> {
    pub(crate) query: &'a Query<'a>,
    pub(crate) client: SocketAddr,
    /// When the query arrived.
    pub(crate) started: Instant,
    pub(crate) source: Source,
    /// The reply as written.
    pub(crate) reply: &'a [u8],
}

/// A reply as it is counted: what every observer is told.
#[derive(Clone, Copy)]
pub(crate) struct Event<'a> {
    pub(crate) answered: Answered<'a>,
    pub(crate) proto: Proto,
    pub(crate) rcode: u16,
    /// From the query's arrival to the reply's counting.
    pub(crate) seconds: f64,
}

/// Something told of every reply of the listeners and zones it is
/// attached to. Runs on the request path: it must not wait.
pub(crate) trait Observer: Send + Sync {
    fn observe(&self, event: &Event<'_>);
}

impl<T: Observer + ?Sized> Observer for std::sync::Arc<T> {
    #[inline]
    fn observe(&self, event: &Event<'_>) {
        (**self).observe(event)
    }
}

/// The observers of one listener's zone, in the order they are told.
#[derive(Default)]
pub(crate) struct Observers(Vec<Box<dyn Observer>>);

impl Observers {
    /// Adds `observer` when there is one.
    pub(crate) fn with(mut self, observer: Option<impl Observer + 'static>) -> Observers {
        if let Some(o) = observer {
            self.0.push(Box::new(o));
        }
        self
    }

    /// No observer is on.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Tells each observer of `event`.
    #[inline]
    pub(crate) fn observe(&self, event: &Event<'_>) {
        for observer in &self.0 {
            observer.observe(event);
        }
    }
}
