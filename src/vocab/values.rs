//! Typed values of the configuration file, each parsed once, where it is
//! read: a bad value is a deserialisation error, which carries its line.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer};
use tracing_subscriber::EnvFilter;

use crate::wire::name;

/// Implements `Deserialize` through `FromStr`, for values written as strings.
macro_rules! deserialize_from_str {
    ($type:ty) => {
        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

/// A value that could not be parsed, in words for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadValue(pub String);

/// A zone name, lower-cased and fully qualified ("cluster.local.", ".").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ZoneName(pub String);

impl FromStr for ZoneName {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, BadValue> {
        name::normalize_zone(s)
            .map(ZoneName)
            .map_err(|e| BadValue(e.0))
    }
}
deserialize_from_str!(ZoneName);

/// A DNS server address (an upstream, a listen address): `IP`, `IP:port`
/// or `[IPv6]:port`; port 53 when omitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DnsAddr(pub SocketAddr);

impl FromStr for DnsAddr {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, BadValue> {
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(DnsAddr(addr));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(DnsAddr(SocketAddr::new(ip, 53)));
        }
        Err(BadValue(format!(
            "`{s}` is not an address: expected IP, IP:port or [IPv6]:port"
        )))
    }
}
deserialize_from_str!(DnsAddr);

/// `metrics.listen`, `metrics.probe_listen`: `IP:port`, or "" for no HTTP
/// server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpListen(pub Option<SocketAddr>);

impl FromStr for HttpListen {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, BadValue> {
        if s.is_empty() {
            return Ok(HttpListen(None));
        }
        s.parse()
            .map(|a| HttpListen(Some(a)))
            .map_err(|_| BadValue(format!("`{s}` is not IP:port (or \"\" for none)")))
    }
}
deserialize_from_str!(HttpListen);

/// `log.level`: a tracing filter ("info", "nodens=debug,warn"), checked
/// when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFilter(String);

impl LogFilter {
    pub fn filter(&self) -> EnvFilter {
        EnvFilter::try_new(&self.0).expect("checked when parsed")
    }
}

impl fmt::Display for LogFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for LogFilter {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, BadValue> {
        match EnvFilter::try_new(s) {
            Ok(_) => Ok(LogFilter(s.to_string())),
            Err(_) => Err(BadValue(format!("log.level: `{s}` is not a valid filter"))),
        }
    }
}
deserialize_from_str!(LogFilter);

/// An RFC 1123 label, as Kubernetes names Services and namespaces.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
