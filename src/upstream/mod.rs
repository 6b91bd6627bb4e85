//! Where misses go: zones (longest suffix wins), each with its upstream
//! servers, and the transports that carry a query to one of them.

pub mod forward;
pub mod tcp;
pub mod udp;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::cache::TtlPolicy;
use crate::config::{resolv_conf_nameservers, Config, Policy, ZoneConfig};
use crate::log_limit::LogLimiter;
use crate::wire::name;

/// One upstream server.
pub struct Upstream {
    pub addr: SocketAddr,
    /// The `to` label in metrics and logs.
    pub label: String,
    pub log_limit: LogLimiter,
}

/// A forwarding zone, ready to use.
pub struct Zone {
    /// Presentation form, the `zone` label in metrics ("cluster.local.").
    pub name: String,
    pub upstreams: Vec<Upstream>,
    pub policy: Policy,
    pub upstream_timeout: Duration,
    pub ttl: TtlPolicy,
}

/// Maps a query name to its zone.
pub struct Router {
    zones: Vec<Arc<Zone>>,
    by_name: HashMap<Vec<u8>, usize>,
}

#[derive(Debug, Error)]
#[error("zone {zone}: {message}")]
pub struct RouterError {
    pub zone: String,
    pub message: String,
}

impl Router {
    pub fn from_config(config: &Config) -> Result<Router, RouterError> {
        let mut zones = Vec::new();
        let mut by_name = HashMap::new();
        for zc in &config.zones {
            let zone = build_zone(zc, config)?;
            let wire = name::from_text(&zone.name).expect("validated zone name");
            by_name.insert(wire, zones.len());
            zones.push(Arc::new(zone));
        }
        Ok(Router { zones, by_name })
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
}

fn build_zone(zc: &ZoneConfig, config: &Config) -> Result<Zone, RouterError> {
    let zone_name = zc.name.get_ref().0.clone();
    let addrs: Vec<SocketAddr> = if zc.upstreams.is_empty() {
        resolv_conf_nameservers(&zc.resolv_conf).map_err(|message| RouterError { zone: zone_name.clone(), message })?
    } else {
        zc.upstreams.iter().map(|u| u.get_ref().0).collect()
    };
    let secs = |d: Duration| d.as_secs().min(u32::MAX.into()) as u32;
    Ok(Zone {
        name: zone_name,
        upstreams: addrs
            .into_iter()
            .map(|addr| Upstream {
                addr,
                label: addr.to_string(),
                log_limit: LogLimiter::new(config.log.upstream_error_interval),
            })
            .collect(),
        policy: zc.policy,
        upstream_timeout: zc.upstream_timeout,
        ttl: TtlPolicy {
            min_ttl: secs(zc.min_ttl),
            max_ttl: secs(zc.max_ttl),
            negative_max_ttl: secs(zc.negative_max_ttl),
            failure_ttl: secs(config.cache.servfail_ttl),
        },
    })
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
        }
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
        let router = Router::from_config(&config).unwrap();
        let zone = |n: &str| router.route(&name::from_text(n).unwrap()).unwrap().name.clone();
        assert_eq!(zone("a.b.svc.cluster.local"), "svc.cluster.local.");
        assert_eq!(zone("pod.cluster.local"), "cluster.local.");
        assert_eq!(zone("cluster.local"), "cluster.local.");
        assert_eq!(zone("xcluster.local"), ".");
        assert_eq!(zone("example.com"), ".");
        assert_eq!(zone("."), ".");
    }
}
