//! Where misses go: zones (longest suffix wins), each with its upstream
//! servers, and the transports that carry a query to one of them.

pub mod case;
pub mod forward;
pub mod health;
pub mod pool;
pub mod udp;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge};
use thiserror::Error;

use crate::cache::TtlPolicy;
use crate::config::{Config, Policy, PoolConfig, Transport, ZoneConfig, resolv_conf_nameservers};
use crate::log_limit::LogLimiter;
use crate::metrics::{Metrics, PROXY_NAME};
use crate::wire::{name, rcode_name};
use health::Health;
use pool::Pool;

/// One upstream server, shared by every zone that lists its address, so
/// that its connection bound and its health are per server, not per zone.
pub struct Upstream {
    pub addr: SocketAddr,
    /// The `to` label in metrics and logs.
    pub label: String,
    pub settings: UpstreamSettings,
    pub log_limit: LogLimiter,
    pub pool: Pool,
    pub health: Health,
    /// Whether this server keeps the letter case of questions (0x20).
    pub case: case::CaseMemory,
    /// Queries sent to this upstream and not yet answered, UDP and TCP.
    pub inflight: IntGauge,
    /// Metric handles the miss path uses on every query, resolved once.
    pub udp_conn_hits: IntCounter,
    pub udp_conn_misses: IntCounter,
    duration_by_rcode: [Histogram; 6],
    healthy: IntGauge,
    metrics: Arc<Metrics>,
}

/// What an upstream is built from; an upstream whose settings did not
/// change survives a reload with its connections and health.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSettings {
    pub pool: PoolConfig,
    pub max_fails: u32,
    pub health_check: Duration,
    /// Probe over TCP (the first zone listing it forces TCP) or UDP.
    pub probe_over_tcp: bool,
    pub probe_timeout: Duration,
    pub log_interval: Duration,
}

impl Upstream {
    fn new(addr: SocketAddr, settings: UpstreamSettings, metrics: &Arc<Metrics>) -> Upstream {
        let label = addr.to_string();
        let healthy = metrics.upstream_healthy.with_label_values(&[&label]);
        healthy.set(1);
        Upstream {
            addr,
            pool: Pool::new(addr, settings.pool.clone(), metrics, &label),
            log_limit: LogLimiter::new(settings.log_interval),
            health: Health::default(),
            case: case::CaseMemory::default(),
            inflight: metrics.upstream_inflight.with_label_values(&[&label]),
            udp_conn_hits: metrics
                .proxy_conn_hits
                .with_label_values(&[PROXY_NAME, &label, "udp"]),
            udp_conn_misses: metrics
                .proxy_conn_misses
                .with_label_values(&[PROXY_NAME, &label, "udp"]),
            duration_by_rcode: std::array::from_fn(|rcode| {
                metrics.proxy_duration.with_label_values(&[
                    PROXY_NAME,
                    &label,
                    rcode_name(rcode as u16),
                ])
            }),
            healthy,
            metrics: metrics.clone(),
            label,
            settings,
        }
    }
}

impl Upstream {
    /// Records how long an exchange that ended with `rcode` took.
    pub fn observe_duration(&self, rcode: u16, seconds: f64) {
        match self.duration_by_rcode.get(usize::from(rcode)) {
            Some(h) => h.observe(seconds),
            None => self
                .metrics
                .proxy_duration
                .with_label_values(&[PROXY_NAME, &self.label, rcode_name(rcode)])
                .observe(seconds),
        }
    }
}

/// A forwarding zone, ready to use.
pub struct Zone {
    /// Position in the router's zone list (indexes per-zone metric handles).
    pub index: usize,
    /// Presentation form, the `zone` label in metrics ("cluster.local.").
    pub name: String,
    pub upstreams: Vec<Arc<Upstream>>,
    pub policy: Policy,
    pub transport: Transport,
    /// Randomise the letter case of questions sent over UDP (0x20).
    pub randomize_case: bool,
    pub upstream_timeout: Duration,
    pub ttl: TtlPolicy,
}

/// Maps a query name to its zone.
pub struct Router {
    zones: Vec<Arc<Zone>>,
    by_name: HashMap<Vec<u8>, usize>,
    upstreams: HashMap<SocketAddr, Arc<Upstream>>,
}

#[derive(Debug, Error)]
#[error("zone {zone}: {message}")]
pub struct RouterError {
    pub zone: String,
    pub message: String,
}

impl Router {
    /// Builds the zones of `config`, reusing the upstreams of `previous`
    /// (the running configuration) whose settings are unchanged.
    pub fn from_config(
        config: &Config,
        metrics: &Arc<Metrics>,
        previous: Option<&Router>,
    ) -> Result<Router, RouterError> {
        let mut router = Router {
            zones: Vec::new(),
            by_name: HashMap::new(),
            upstreams: HashMap::new(),
        };
        for zc in &config.zones {
            let zone = router.build_zone(zc, config, metrics, previous)?;
            let wire = name::from_text(&zone.name).expect("validated zone name");
            router.by_name.insert(wire, router.zones.len());
            router.zones.push(Arc::new(zone));
        }
        Ok(router)
    }

    /// The zone for a query name (folded to lower case), longest suffix first.
    #[inline]
    pub fn route(&self, folded_name: &[u8]) -> Option<&Arc<Zone>> {
        name::label_starts(folded_name)
            .find_map(|start| self.by_name.get(&folded_name[start..]))
            .map(|&i| &self.zones[i])
    }

    pub fn zones(&self) -> &[Arc<Zone>] {
        &self.zones
    }

    fn build_zone(
        &mut self,
        zc: &ZoneConfig,
        config: &Config,
        metrics: &Arc<Metrics>,
        previous: Option<&Router>,
    ) -> Result<Zone, RouterError> {
        let zone_name = zc.name.get_ref().0.clone();
        let error = |message: String| RouterError {
            zone: zone_name.clone(),
            message,
        };
        let addrs: Vec<SocketAddr> = if zc.upstreams.is_empty() {
            resolv_conf_nameservers(&zc.resolv_conf).map_err(error)?
        } else {
            zc.upstreams.iter().map(|u| u.get_ref().0).collect()
        };
        let settings = UpstreamSettings {
            pool: zc.pool.clone(),
            max_fails: zc.max_fails,
            health_check: zc.health_check,
            probe_over_tcp: zc.transport == Transport::ForceTcp,
            probe_timeout: zc.upstream_timeout,
            log_interval: config.log.upstream_error_interval,
        };
        let mut upstreams = Vec::new();
        for addr in addrs {
            let upstream = match self.upstreams.get(&addr) {
                Some(shared) if !shared_settings_agree(&shared.settings, &settings) => {
                    return Err(error(format!(
                        "upstream {addr} is listed by another zone with different pool, max_fails or health_check settings; \
                         one server gets one connection pool, so they must agree"
                    )));
                }
                Some(shared) => shared.clone(),
                None => {
                    let reused = previous
                        .and_then(|p| p.upstreams.get(&addr))
                        .filter(|u| u.settings == settings);
                    let upstream = reused.cloned().unwrap_or_else(|| {
                        Arc::new(Upstream::new(addr, settings.clone(), metrics))
                    });
                    self.upstreams.insert(addr, upstream.clone());
                    upstream
                }
            };
            upstreams.push(upstream);
        }
        let secs = |d: Duration| d.as_secs().min(u32::MAX.into()) as u32;
        Ok(Zone {
            index: self.zones.len(),
            name: zone_name.clone(),
            upstreams,
            policy: zc.policy,
            transport: zc.transport,
            randomize_case: zc.randomize_case,
            upstream_timeout: zc.upstream_timeout,
            ttl: TtlPolicy {
                min_ttl: secs(zc.min_ttl),
                max_ttl: secs(zc.max_ttl),
                negative_max_ttl: secs(zc.negative_max_ttl),
                failure_ttl: secs(config.cache.servfail_ttl),
            },
        })
    }
}

/// The settings two zones sharing an upstream must agree on.
fn shared_settings_agree(a: &UpstreamSettings, b: &UpstreamSettings) -> bool {
    a.pool == b.pool && a.max_fails == b.max_fails && a.health_check == b.health_check
}

/// Why one exchange with one upstream failed.
#[derive(Debug, Error)]
pub enum ExchangeError {
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("malformed response")]
    Malformed,
    #[error("connection closed before the answer")]
    Closed,
    #[error("answer to another question")]
    Mismatch,
    #[error("answer with the question in another letter case (0x20)")]
    CaseMismatch,
    #[error("a flood of answers that were not ours: spoofing suspected")]
    SpoofSuspected,
    #[error("an error answer without a question, which 0x20 cannot verify")]
    Unverifiable,
    #[error("TCP wait queue full")]
    QueueFull,
    #[error("waited too long in the TCP queue")]
    QueueTimeout,
}

impl ExchangeError {
    /// The `error` label of nodens_upstream_errors_total.
    pub fn label(&self) -> &'static str {
        match self {
            ExchangeError::Timeout => "timeout",
            ExchangeError::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "refused",
            ExchangeError::Io(_) => "network",
            ExchangeError::Malformed => "malformed",
            ExchangeError::Closed => "closed",
            ExchangeError::Mismatch => "mismatch",
            ExchangeError::CaseMismatch => "case_mismatch",
            ExchangeError::SpoofSuspected => "spoof_suspected",
            ExchangeError::Unverifiable => "unverifiable",
            ExchangeError::QueueFull => "queue_full",
            ExchangeError::QueueTimeout => "queue_timeout",
        }
    }

    /// Whether this says something about the upstream's health. A full or
    /// slow queue is our own bound at work, not the upstream failing.
    pub fn counts_against_health(&self) -> bool {
        !matches!(
            self,
            ExchangeError::QueueFull
                | ExchangeError::QueueTimeout
                | ExchangeError::CaseMismatch
                | ExchangeError::SpoofSuspected
                | ExchangeError::Unverifiable
        )
    }

    /// Whether a UDP answer came but cannot be trusted: the query is asked
    /// again over TCP, which an off-path forger cannot answer.
    pub fn needs_tcp_confirmation(&self) -> bool {
        matches!(
            self,
            ExchangeError::CaseMismatch
                | ExchangeError::SpoofSuspected
                | ExchangeError::Unverifiable
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_suffix_wins() {
        let text = "[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1\"]\n\
                    [[zone]]\nname = \"cluster.local\"\nupstreams = [\"127.0.0.1:2\"]\n\
                    [[zone]]\nname = \"svc.cluster.local\"\nupstreams = [\"127.0.0.1:3\"]\n";
        let config = Config::parse(text).unwrap();
        let metrics = Arc::new(Metrics::new("dns://test".into()));
        let router = Router::from_config(&config, &metrics, None).unwrap();
        let zone = |n: &str| {
            router
                .route(&name::from_text(n).unwrap())
                .unwrap()
                .name
                .clone()
        };
        assert_eq!(zone("a.b.svc.cluster.local"), "svc.cluster.local.");
        assert_eq!(zone("pod.cluster.local"), "cluster.local.");
        assert_eq!(zone("cluster.local"), "cluster.local.");
        assert_eq!(zone("xcluster.local"), ".");
        assert_eq!(zone("example.com"), ".");
        assert_eq!(zone("."), ".");
    }
}
