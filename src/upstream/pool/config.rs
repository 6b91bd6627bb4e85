//! The pool's configuration section (`[zone.pool]`, the `pool` of an
//! upstream's settings): how many connections to one upstream address, how
//! much each carries, how long a query may wait for one.

use std::time::Duration;

use serde::Deserialize;

/// Limits of the TCP connection pool to one upstream address.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// Open connections at most, dialling ones included.
    pub max_connections: usize,
    /// Queries in flight on one connection (RFC 7766 pipelining); 1 for
    /// servers that answer one query at a time, in order (dnsmasq).
    pub max_in_flight: usize,
    /// A connection that has carried this many queries is retired; 0: no limit.
    pub max_queries_per_connection: u64,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// A connection with nothing in flight for this long is closed, at that moment.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Queries that may wait for a connection when all are busy; more fail at once.
    pub max_queue: usize,
    /// How long a query may wait in the queue before it fails.
    #[serde(with = "humantime_serde")]
    pub max_queue_wait: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_connections: 4,
            max_in_flight: 1,
            max_queries_per_connection: 0,
            connect_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(10),
            max_queue: 256,
            max_queue_wait: Duration::from_secs(1),
        }
    }
}
