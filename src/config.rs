//! The configuration file: one TOML document, every option with a default.
//!
//! `Config::default()` serves out of the box: `127.0.0.1:1053`, everything
//! forwarded to the nameservers of `/etc/resolv.conf`. Errors name the line
//! and column of the offending value, both for syntax errors and for values
//! that parse but make no sense (a zone listed twice, an upstream that is one
//! of our own listen addresses).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use bytesize::ByteSize;
use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::wire::name;

/// The whole configuration, as read from the file (or the defaults).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub cache: CacheConfig,
    pub metrics: MetricsConfig,
    pub log: LogConfig,
    #[serde(rename = "zone")]
    pub zones: Vec<ZoneConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Addresses to serve on, UDP and TCP on each.
    pub listen: Vec<Spanned<ListenAddr>>,
    /// Worker threads; 0 means the smaller of the cgroup CPU quota and the
    /// process's CPU affinity mask.
    pub workers: usize,
    /// The largest UDP answer sent to a client, whatever size it advertises.
    pub max_udp_payload: u16,
    /// A client TCP connection with nothing in flight is closed after this long.
    #[serde(with = "humantime_serde")]
    pub tcp_idle_timeout: Duration,
    /// A client TCP message must arrive whole within this long of its first
    /// byte, and a new connection's first message within this long of the
    /// accept (against slowloris: trickled bytes restart no timer).
    #[serde(with = "humantime_serde")]
    pub tcp_read_timeout: Duration,
    /// Concurrent client TCP connections; further ones are closed at once.
    pub tcp_max_connections: usize,
    /// Concurrent TCP connections from one client address.
    pub tcp_max_connections_per_client: usize,
    /// Queries in flight on one client TCP connection before we stop reading it.
    pub tcp_max_inflight: usize,
    /// The whole time a cache miss may take before the client gets SERVFAIL.
    #[serde(with = "humantime_serde")]
    pub query_timeout: Duration,
    /// Source ranges answered; others get REFUSED. Unset: loopback, the
    /// private, shared (RFC 6598) and link-local ranges, IPv6 ULA and
    /// link-local. `["0.0.0.0/0", "::/0"]` answers everyone.
    pub allow: Option<Vec<Spanned<IpNet>>>,
    /// Queries per second one client address may send; 0: no limit.
    pub client_rate_limit: u32,
    /// Queries a client may send at once above its rate; 0: the rate.
    pub client_rate_burst: u32,
    /// Cache misses waiting on upstreams at once; a miss beyond it gets a
    /// stale answer if there is one, else no answer (it is dropped, as
    /// unbound drops queries beyond `num-queries-per-thread`).
    pub max_misses_in_flight: usize,
    /// On SIGTERM, how long in-flight queries may take to finish.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: vec![Spanned::new(
                0..0,
                ListenAddr("127.0.0.1:1053".parse().unwrap()),
            )],
            workers: 0,
            max_udp_payload: 1232,
            tcp_idle_timeout: Duration::from_secs(10),
            tcp_read_timeout: Duration::from_secs(2),
            tcp_max_connections: 1024,
            tcp_max_connections_per_client: 64,
            tcp_max_inflight: 64,
            query_timeout: Duration::from_secs(4),
            allow: None,
            client_rate_limit: 0,
            client_rate_burst: 0,
            max_misses_in_flight: 2048,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Upper bound on the bytes the cache holds (entries plus their keys).
    pub capacity: ByteSize,
    /// How long a failure (SERVFAIL, or no upstream answered) is cached; 0 disables.
    #[serde(with = "humantime_serde")]
    pub servfail_ttl: Duration,
    /// TTL put on an expired answer served because every upstream failed (RFC 8767).
    #[serde(with = "humantime_serde")]
    pub stale_ttl: Duration,
    /// How long past expiry an answer may still be served stale; 0 disables serve-stale.
    #[serde(with = "humantime_serde")]
    pub stale_max_age: Duration,
    /// Hits an entry needs before it is refreshed ahead of expiry; 0 disables prefetch.
    pub prefetch_min_hits: u32,
    /// Refresh when this percentage of the original TTL or less remains.
    pub prefetch_percent: u8,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity: ByteSize::mib(64),
            servfail_ttl: Duration::from_secs(5),
            stale_ttl: Duration::from_secs(30),
            stale_max_age: Duration::from_secs(3600),
            prefetch_min_hits: 3,
            prefetch_percent: 10,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address of the HTTP server for /metrics, /health and /ready; "" disables it.
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9253".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing filter: "info", "debug", "nodens=debug,warn", ...
    pub level: String,
    pub format: LogFormat,
    /// At most one log line per upstream per this interval for upstream errors;
    /// the rest are counted and the count is logged with the next line.
    #[serde(with = "humantime_serde")]
    pub upstream_error_interval: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: LogFormat::Text,
            upstream_error_interval: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

/// One forwarding zone: queries at or below `name` go to `upstreams`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneConfig {
    pub name: Spanned<ZoneName>,
    /// Upstream servers, `IP` or `IP:port`; empty means the nameservers of `resolv_conf`.
    #[serde(default)]
    pub upstreams: Vec<Spanned<ServerAddr>>,
    #[serde(default = "default_resolv_conf")]
    pub resolv_conf: PathBuf,
    #[serde(default)]
    pub policy: Policy,
    /// How long to wait for one upstream before trying the next.
    #[serde(default = "default_upstream_timeout", with = "humantime_serde")]
    pub upstream_timeout: Duration,
    /// TTL clamps for answers (positive responses).
    #[serde(default, with = "humantime_serde")]
    pub min_ttl: Duration,
    #[serde(default = "default_max_ttl", with = "humantime_serde")]
    pub max_ttl: Duration,
    /// Upper clamp for NXDOMAIN and NODATA (RFC 2308 TTLs from the SOA).
    #[serde(default = "default_negative_max_ttl", with = "humantime_serde")]
    pub negative_max_ttl: Duration,
    /// How queries travel to this zone's upstreams.
    #[serde(default)]
    pub transport: Transport,
    /// Randomise the letter case of questions sent over UDP and accept only
    /// answers in the same case (0x20); a server that does not keep case
    /// is detected and asked without it.
    #[serde(default = "default_true")]
    pub randomize_case: bool,
    /// The bounded TCP connection pool, one per upstream address.
    #[serde(default)]
    pub pool: PoolConfig,
    /// Consecutive failed exchanges after which an upstream is marked down:
    /// skipped while another is up, and probed with backoff until it answers.
    #[serde(default = "default_max_fails")]
    pub max_fails: u32,
    /// First wait between health probes of a down upstream; doubles up to 30 s.
    #[serde(default = "default_health_check", with = "humantime_serde")]
    pub health_check: Duration,
}

/// How a zone's queries travel upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// UDP; TCP (through the pool) only for an answer that came back truncated.
    #[default]
    PreferUdp,
    /// Every query over TCP through the pool (NodeLocal DNSCache's `force_tcp`).
    ForceTcp,
    /// UDP, and the same query over TCP if UDP gets no answer within half
    /// the upstream timeout (a datagram lost to a conntrack race, say).
    TcpFallbackOnTimeout,
}

/// Limits of the TCP connection pool to one upstream address.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// Open connections at most, dialling ones included.
    pub max_connections: usize,
    /// Queries in flight on one connection (RFC 7766 pipelining); 1 for
    /// servers that answer one query at a time, in order (dnsmasq).
    pub max_inflight: usize,
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
            max_inflight: 1,
            max_queries_per_connection: 0,
            connect_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(10),
            max_queue: 256,
            max_queue_wait: Duration::from_secs(1),
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_max_fails() -> u32 {
    2
}
fn default_health_check() -> Duration {
    Duration::from_millis(500)
}

fn default_resolv_conf() -> PathBuf {
    PathBuf::from("/etc/resolv.conf")
}
fn default_upstream_timeout() -> Duration {
    Duration::from_secs(2)
}
fn default_max_ttl() -> Duration {
    Duration::from_secs(3600)
}
fn default_negative_max_ttl() -> Duration {
    Duration::from_secs(1800)
}

impl ZoneConfig {
    /// The zone for everything, forwarding to the nameservers of /etc/resolv.conf.
    pub fn root() -> Self {
        ZoneConfig {
            name: Spanned::new(0..0, ZoneName(".".into())),
            upstreams: Vec::new(),
            resolv_conf: default_resolv_conf(),
            policy: Policy::default(),
            upstream_timeout: default_upstream_timeout(),
            min_ttl: Duration::ZERO,
            max_ttl: default_max_ttl(),
            negative_max_ttl: default_negative_max_ttl(),
            transport: Transport::default(),
            randomize_case: true,
            pool: PoolConfig::default(),
            max_fails: default_max_fails(),
            health_check: default_health_check(),
        }
    }
}

/// In which order a zone's upstreams are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// In the configured order, like resolv.conf.
    #[default]
    Sequential,
    /// A random first upstream per query, then the others in order.
    Random,
}

/// A zone name, lower-cased and fully qualified ("cluster.local.", ".").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ZoneName(pub String);

impl FromStr for ZoneName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        name::normalize_zone(s).map(ZoneName)
    }
}

impl<'de> Deserialize<'de> for ZoneName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An upstream server: `IP`, `IP:port`, `[IPv6]:port`; port 53 when omitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerAddr(pub SocketAddr);

impl FromStr for ServerAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_addr(s, 53).map(ServerAddr)
    }
}

impl<'de> Deserialize<'de> for ServerAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A listen address: like [`ServerAddr`], port 53 when omitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenAddr(pub SocketAddr);

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_addr(&s, 53)
            .map(ListenAddr)
            .map_err(serde::de::Error::custom)
    }
}

fn parse_addr(s: &str, default_port: u16) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    Err(format!(
        "`{s}` is not an address: expected IP, IP:port or [IPv6]:port"
    ))
}

/// A configuration error, with the position of the value it is about when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: Option<PathBuf>,
    /// 1-based line and column.
    pub position: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}:", file.display())?;
        }
        if let Some((line, col)) = self.position {
            write!(f, "{line}:{col}: ")?;
        } else if self.file.is_some() {
            write!(f, " ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for ConfigError {}

fn position_of(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

impl Config {
    /// The built-in defaults, with the root zone forwarding to resolv.conf.
    pub fn default_with_root_zone() -> Config {
        Config::parse("").expect("the defaults are valid")
    }

    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: Some(path.to_owned()),
            position: None,
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(&text).map_err(|mut e| {
            e.file = Some(path.to_owned());
            e
        })
    }

    /// Parses and validates configuration text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError {
            file: None,
            position: e.span().map(|s| position_of(text, s.start)),
            message: e.message().trim_end().to_string(),
        })?;
        if config.zones.is_empty() {
            config.zones.push(ZoneConfig::root());
        }
        config.validate().map_err(|(span, message)| ConfigError {
            file: None,
            position: span.map(|s| position_of(text, s.start)),
            message,
        })?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), (Option<std::ops::Range<usize>>, String)> {
        let at = |span: std::ops::Range<usize>| if span.is_empty() { None } else { Some(span) };
        if self.server.listen.is_empty() {
            return Err((None, "server.listen: at least one address is needed".into()));
        }
        for (i, a) in self.server.listen.iter().enumerate() {
            if self.server.listen[..i]
                .iter()
                .any(|b| b.get_ref() == a.get_ref())
            {
                return Err((
                    at(a.span()),
                    format!("listen address {} is listed twice", a.get_ref().0),
                ));
            }
        }
        if self.server.max_udp_payload < 512 {
            return Err((None, "server.max_udp_payload: must be at least 512".into()));
        }
        if self.server.tcp_max_connections == 0
            || self.server.tcp_max_inflight == 0
            || self.server.tcp_max_connections_per_client == 0
        {
            return Err((
                None,
                "server.tcp_max_connections, tcp_max_connections_per_client and tcp_max_inflight must be at least 1".into(),
            ));
        }
        if self.server.tcp_read_timeout.is_zero() || self.server.tcp_idle_timeout.is_zero() {
            return Err((
                None,
                "server.tcp_read_timeout and tcp_idle_timeout must be more than 0".into(),
            ));
        }
        if self.server.max_misses_in_flight == 0 {
            return Err((
                None,
                "server.max_misses_in_flight: must be at least 1".into(),
            ));
        }
        if let Some(allow) = &self.server.allow
            && allow.is_empty()
        {
            return Err((
                None,
                "server.allow: an empty list would refuse every client; leave it out for the default ranges".into(),
            ));
        }
        if self.server.query_timeout.is_zero() {
            return Err((None, "server.query_timeout: must be more than 0".into()));
        }
        if self.cache.prefetch_percent > 100 {
            return Err((None, "cache.prefetch_percent: must be 0 to 100".into()));
        }
        if !self.metrics.listen.is_empty() && self.metrics.listen.parse::<SocketAddr>().is_err() {
            return Err((
                None,
                format!("metrics.listen: `{}` is not IP:port", self.metrics.listen),
            ));
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return Err((
                None,
                format!("log.level: `{}` is not a valid filter", self.log.level),
            ));
        }
        for (i, zone) in self.zones.iter().enumerate() {
            let name = zone.name.get_ref();
            if self.zones[..i].iter().any(|z| z.name.get_ref() == name) {
                return Err((
                    at(zone.name.span()),
                    format!("zone {} is listed twice", name.0),
                ));
            }
            if zone.upstream_timeout.is_zero() {
                return Err((
                    at(zone.name.span()),
                    format!("zone {}: upstream_timeout must be more than 0", name.0),
                ));
            }
            let pool = &zone.pool;
            if pool.max_connections == 0 || pool.max_inflight == 0 {
                return Err((
                    at(zone.name.span()),
                    format!(
                        "zone {}: pool.max_connections and pool.max_inflight must be at least 1",
                        name.0
                    ),
                ));
            }
            if pool.connect_timeout.is_zero() || pool.idle_timeout.is_zero() {
                return Err((
                    at(zone.name.span()),
                    format!("zone {}: pool timeouts must be more than 0", name.0),
                ));
            }
            if zone.health_check.is_zero() {
                return Err((
                    at(zone.name.span()),
                    format!("zone {}: health_check must be more than 0", name.0),
                ));
            }
            if zone.min_ttl > zone.max_ttl {
                return Err((
                    at(zone.name.span()),
                    format!("zone {}: min_ttl is above max_ttl", name.0),
                ));
            }
            for up in &zone.upstreams {
                let addr = up.get_ref().0;
                let earlier = self.zones[..i]
                    .iter()
                    .find(|z| z.upstreams.iter().any(|u| u.get_ref().0 == addr));
                if let Some(other) = earlier
                    && (other.pool != zone.pool
                        || other.max_fails != zone.max_fails
                        || other.health_check != zone.health_check)
                {
                    return Err((
                        at(up.span()),
                        format!(
                            "upstream {addr} is also listed by zone {} with different pool, max_fails or health_check settings; \
                             one server gets one connection pool, so they must agree",
                            other.name.get_ref().0
                        ),
                    ));
                }
                if self.is_own_address(addr) {
                    return Err((
                        at(up.span()),
                        format!(
                            "upstream {addr} is one of our own listen addresses: a forwarding loop"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn is_own_address(&self, addr: SocketAddr) -> bool {
        self.server.listen.iter().any(|l| {
            let l = l.get_ref().0;
            l.port() == addr.port() && (l.ip() == addr.ip() || l.ip().is_unspecified())
        })
    }

    /// The source ranges answered.
    pub fn allowed_sources(&self) -> Vec<IpNet> {
        match &self.server.allow {
            Some(list) => list.iter().map(|n| *n.get_ref()).collect(),
            None => crate::guard::acl::default_allow(),
        }
    }

    /// The listen addresses, without their positions in the file.
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.server.listen.iter().map(|a| a.get_ref().0).collect()
    }
}

/// Reads the `nameserver` lines of a resolv.conf file.
pub fn resolv_conf_nameservers(path: &Path) -> Result<Vec<SocketAddr>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let servers: Vec<SocketAddr> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
        })
        // Strip an IPv6 zone index ("fe80::1%eth0"): std cannot parse it.
        .filter_map(|ip| ip.split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect();
    if servers.is_empty() {
        return Err(format!("{}: no nameserver lines", path.display()));
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_serve() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.listen_addrs(), vec!["127.0.0.1:1053".parse().unwrap()]);
        assert_eq!(c.zones.len(), 1);
        assert_eq!(c.zones[0].name.get_ref().0, ".");
        assert!(c.zones[0].upstreams.is_empty());
    }

    #[test]
    fn syntax_error_names_line() {
        let e = Config::parse("[server]\nlisten = [\"127.0.0.1:53\"\nworkers = 2\n").unwrap_err();
        assert!(e.position.is_some(), "{e}");
    }

    #[test]
    fn bad_value_names_line() {
        let e = Config::parse("[server]\nworkers = 1\n\n[[zone]]\nname = \"cluster.local\"\nupstreams = [\"10.0.0.300\"]\n")
            .unwrap_err();
        assert_eq!(e.position.unwrap().0, 6, "{e}");
        assert!(e.message.contains("10.0.0.300"), "{e}");
    }

    #[test]
    fn unknown_key_names_line() {
        let e = Config::parse("[cache]\ncapacity = \"1 MiB\"\nprefetch = 3\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
    }

    #[test]
    fn duplicate_zone_names_second_line() {
        let text = "[[zone]]\nname = \"a.\"\nupstreams = [\"127.0.0.1\"]\n[[zone]]\nname = \"A\"\nupstreams = [\"127.0.0.1\"]\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 5, "{e}");
    }

    #[test]
    fn forwarding_loop_is_an_error() {
        let text = "[server]\nlisten = [\"127.0.0.1:1053\"]\n[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1053\"]\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 5, "{e}");
    }

    #[test]
    fn addresses_default_to_port_53() {
        let c = Config::parse(
            "[[zone]]\nname = \"x\"\nupstreams = [\"::1\", \"[::1]:5353\", \"10.0.0.1\"]\n",
        )
        .unwrap();
        let ups: Vec<String> = c.zones[0]
            .upstreams
            .iter()
            .map(|u| u.get_ref().0.to_string())
            .collect();
        assert_eq!(ups, ["[::1]:53", "[::1]:5353", "10.0.0.1:53"]);
        assert_eq!(c.zones[0].name.get_ref().0, "x.");
    }

    #[test]
    fn pool_table_belongs_to_its_zone() {
        let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\ntransport = \"force_tcp\"\n\
                    [zone.pool]\nmax_connections = 2\nidle_timeout = \"1s\"\n\
                    [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.2\"]\n";
        let c = Config::parse(text).unwrap();
        assert_eq!(c.zones[0].transport, Transport::ForceTcp);
        assert_eq!(c.zones[0].pool.max_connections, 2);
        assert_eq!(c.zones[0].pool.idle_timeout, Duration::from_secs(1));
        assert_eq!(c.zones[1].transport, Transport::PreferUdp);
        assert_eq!(c.zones[1].pool.max_connections, 4);
        let e = Config::parse("[[zone]]\nname = \"a\"\n[zone.pool]\nmax_conns = 2\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 4, "{e}");
    }

    #[test]
    fn shared_upstream_needs_one_pool_setting() {
        let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n[zone.pool]\nmax_connections = 2\n\
                    [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.1\"]\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 8, "{e}");
    }

    #[test]
    fn allow_list_errors_name_the_line() {
        let c = Config::parse("[server]\nallow = [\"10.0.0.0/8\", \"::/0\"]\n").unwrap();
        assert_eq!(c.allowed_sources().len(), 2);
        assert_eq!(Config::parse("").unwrap().allowed_sources().len(), 9);
        let e = Config::parse("[server]\nworkers = 1\nallow = [\"10.0.0.0/33\"]\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
    }

    #[test]
    fn resolv_conf_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("resolv.conf");
        std::fs::write(&p, "search a b\n# nameserver 9.9.9.9\nnameserver 127.0.0.53\nnameserver fe80::1%eth0\noptions ndots:5\n")
            .unwrap();
        let s = resolv_conf_nameservers(&p).unwrap();
        assert_eq!(
            s,
            vec![
                "127.0.0.53:53".parse().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
    }
}
