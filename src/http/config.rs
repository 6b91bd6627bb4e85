//! The HTTP servers' section (`[metrics]`) and its compile step: the two
//! servers' addresses, with the per-node override of the metrics address
//! from the environment, and their bounds.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;

use crate::vocab::{HttpListen, Invalid, key};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address of the HTTP server for /metrics (and /health, /ready); ""
    /// disables it. `NODENS_METRICS_LISTEN` in the environment overrides it
    /// (the chart's per-node address: one ConfigMap serves every node).
    pub listen: HttpListen,
    /// A second HTTP server with /health and /ready only, for the kubelet's
    /// probes: on loopback, out of reach of whoever can reach `listen`;
    /// "" (the default): none.
    pub probe_listen: HttpListen,
    /// Open connections per HTTP server; one more is accepted and closed at
    /// once, so waiting clients do not fill the kernel's backlog.
    pub max_connections: usize,
    /// A connection that has not sent a whole request head this long after
    /// it opened, or after its previous answer (keep-alive), is closed.
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: HttpListen(Some(([127, 0, 0, 1], 9253).into())),
            probe_listen: HttpListen(None),
            max_connections: 32,
            header_timeout: Duration::from_secs(5),
        }
    }
}

/// The HTTP servers and their bounds (`[metrics]`, docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpPlan {
    /// /metrics, /health and /ready, if any.
    pub metrics: Option<SocketAddr>,
    /// /health and /ready alone (the kubelet's probes), if any.
    pub probes: Option<SocketAddr>,
    /// Open connections per server.
    pub max_connections: usize,
    /// For a whole request head, from the connection's start or its last answer.
    pub header_timeout: Duration,
}

/// Overrides `metrics.listen`: `IP:port`, `[IPv6]:port`, or a bare IP (the
/// port stays `metrics.listen`'s, 9253 when that is ""). The file is one
/// ConfigMap for every node, and each node's pod has its own node IP
/// (the downward API's `status.hostIP`), so the address comes from here.
pub(crate) const METRICS_LISTEN_ENV: &str = "NODENS_METRICS_LISTEN";

/// The port a bare IP in [`METRICS_LISTEN_ENV`] gets when the file has no
/// metrics address to take it from.
const DEFAULT_METRICS_PORT: u16 = 9253;

impl MetricsConfig {
    /// `[metrics]` compiled; `env`: [`METRICS_LISTEN_ENV`], read by the
    /// load.
    pub(crate) fn compile(&self, env: Option<&str>) -> Result<HttpPlan, Invalid> {
        let m = self;
        let metrics =
            match env.map(str::trim) {
                None | Some("") => m.listen.0,
                Some(text) => Some(override_address(text, m.listen.0).map_err(|e| {
                    key(&["metrics", "listen"], format!("{METRICS_LISTEN_ENV}: {e}"))
                })?),
            };
        let probes = m.probe_listen.0;
        if probes.is_some() && probes == metrics {
            return Err(key(
                &["metrics", "probe_listen"],
                "metrics.probe_listen: must differ from metrics.listen (which serves /health and /ready too)",
            ));
        }
        if m.max_connections == 0 {
            return Err(key(
                &["metrics", "max_connections"],
                "metrics.max_connections: must be at least 1",
            ));
        }
        if m.header_timeout.is_zero() {
            return Err(key(
                &["metrics", "header_timeout"],
                "metrics.header_timeout: must be more than 0",
            ));
        }
        Ok(HttpPlan {
            metrics,
            probes,
            max_connections: m.max_connections,
            header_timeout: m.header_timeout,
        })
    }
}

/// The environment's metrics address: a whole socket address, or an IP
/// taking the file's port.
fn override_address(text: &str, file: Option<SocketAddr>) -> Result<SocketAddr, BadAddress> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let ip = text
        .parse::<IpAddr>()
        .map_err(|_| BadAddress(text.to_string()))?;
    let port = file.map_or(DEFAULT_METRICS_PORT, |a| a.port());
    Ok(SocketAddr::new(ip, port))
}

/// An address in the environment that is none.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not IP, IP:port or [IPv6]:port")]
struct BadAddress(String);

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> MetricsConfig {
        crate::config::File::parse(text).unwrap().metrics
    }

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn defaults_one_loopback_server() {
        let plan = file("").compile(None).ok().unwrap();
        assert_eq!(plan.metrics, addr("127.0.0.1:9253"));
        assert_eq!(plan.probes, None);
        assert_eq!(plan.max_connections, 32);
        assert_eq!(plan.header_timeout, std::time::Duration::from_secs(5));
    }

    #[test]
    fn the_environment_overrides_the_metrics_address() {
        let f = file("[metrics]\nlisten = \"0.0.0.0:9300\"\nprobe_listen = \"127.0.0.1:9254\"\n");
        let with = |env| f.compile(Some(env)).ok().unwrap();
        assert_eq!(with("10.1.2.3").metrics, addr("10.1.2.3:9300"));
        assert_eq!(with("fd00::7").metrics, addr("[fd00::7]:9300"));
        assert_eq!(with("10.1.2.3:9999").metrics, addr("10.1.2.3:9999"));
        assert_eq!(with("[fd00::7]:9999").metrics, addr("[fd00::7]:9999"));
        assert_eq!(with("").metrics, addr("0.0.0.0:9300"), "empty: the file's");
        assert_eq!(with("10.1.2.3").probes, addr("127.0.0.1:9254"));
        let off = file("[metrics]\nlisten = \"\"\n");
        let plan = off.compile(Some("10.1.2.3")).ok().unwrap();
        assert_eq!(plan.metrics, addr("10.1.2.3:9253"));
    }

    #[test]
    fn bad_values_are_refused_with_their_name() {
        let message = |text: &str, env: Option<&str>| match file(text).compile(env) {
            Err(Invalid::Key(_, m)) => m,
            other => panic!("{text:?} {env:?}: {:?}", other.ok()),
        };
        let m = message("", Some("node-ip"));
        assert!(
            m.contains("NODENS_METRICS_LISTEN") && m.contains("node-ip"),
            "{m}"
        );
        let m = message("[metrics]\nprobe_listen = \"127.0.0.1:9253\"\n", None);
        assert!(m.contains("metrics.probe_listen"), "{m}");
        let m = message("[metrics]\nmax_connections = 0\n", None);
        assert!(m.contains("metrics.max_connections"), "{m}");
        let m = message("[metrics]\nheader_timeout = \"0s\"\n", None);
        assert!(m.contains("metrics.header_timeout"), "{m}");
    }
}
