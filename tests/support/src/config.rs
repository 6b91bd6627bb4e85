//! The nodens configuration, typed: [`Cfg`] with its `[server]`, `[cache]`,
//! `[metrics]` and `[log]` settings and its [`Zone`]s (each with an optional
//! [`Pool`]), rendered to TOML text in one place ([`Cfg::to_toml`]). Only
//! what a test sets is written; nodens's defaults hold for the rest.
//!
//! Tests about invalid or odd configuration text write that text raw.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use super::net::Net;

/// A TOML value as this module writes it.
trait Toml {
    fn toml(&self) -> String;
}

impl Toml for str {
    fn toml(&self) -> String {
        format!("\"{}\"", self.replace('\\', "\\\\").replace('"', "\\\""))
    }
}
impl Toml for String {
    fn toml(&self) -> String {
        self.as_str().toml()
    }
}
impl Toml for SocketAddr {
    fn toml(&self) -> String {
        self.to_string().toml()
    }
}
impl Toml for bool {
    fn toml(&self) -> String {
        self.to_string()
    }
}
macro_rules! toml_int {
    ($($t:ty),*) => {$(
        impl Toml for $t {
            fn toml(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
toml_int!(u8, u16, u32, u64, usize);

/// A duration as humantime text: whole seconds as "4s", else milliseconds.
impl Toml for Duration {
    fn toml(&self) -> String {
        let ms = self.as_millis();
        if ms.is_multiple_of(1000) {
            format!("\"{}s\"", ms / 1000)
        } else {
            format!("\"{ms}ms\"")
        }
    }
}
impl<T: Toml> Toml for Vec<T> {
    fn toml(&self) -> String {
        let items: Vec<String> = self.iter().map(Toml::toml).collect();
        format!("[{}]", items.join(", "))
    }
}

/// `key = value` lines (or `, `-joined pairs) of the fields that are set.
#[derive(Clone, Debug, Default)]
struct Table(Vec<(&'static str, String)>);

impl Table {
    fn set(&mut self, key: &'static str, value: String) {
        self.0.retain(|(k, _)| *k != key);
        self.0.push((key, value));
    }
    fn unset(&mut self, key: &str) {
        self.0.retain(|(k, _)| *k != key);
    }
    fn lines(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k} = {v}\n")).collect()
    }
    fn inline(&self) -> String {
        let items: Vec<String> = self.0.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        format!("{{ {} }}", items.join(", "))
    }
}

/// Typed setters: `name(value)` sets `key` of `self.table`.
macro_rules! setters {
    ($table:ident { $($(#[$doc:meta])* $name:ident: $t:ty,)* }) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $t) -> Self {
                self.$table.set(stringify!($name), value.toml());
                self
            }
        )*
    };
}

/// How a zone's queries travel upstream (`transport`).
#[derive(Clone, Copy, Debug)]
pub enum Transport {
    PreferUdp,
    ForceTcp,
    TcpFallbackOnTimeout,
    Tls,
}

impl Toml for Transport {
    fn toml(&self) -> String {
        match self {
            Transport::PreferUdp => "prefer_udp",
            Transport::ForceTcp => "force_tcp",
            Transport::TcpFallbackOnTimeout => "tcp_fallback_on_timeout",
            Transport::Tls => "tls",
        }
        .toml()
    }
}

/// A zone's TCP pool limits (`pool = { ... }`).
#[derive(Clone, Debug, Default)]
pub struct Pool {
    table: Table,
}

impl Pool {
    pub fn new() -> Pool {
        Pool::default()
    }
    setters!(table {
        max_connections: usize,
        max_in_flight: usize,
        max_queries_per_connection: u64,
        connect_timeout: Duration,
        idle_timeout: Duration,
        max_queue: usize,
        max_queue_wait: Duration,
    });
}

/// One `[[zone]]`.
#[derive(Clone, Debug)]
pub struct Zone {
    table: Table,
}

impl Zone {
    /// The zone `name` forwarding to `upstreams` (none: the nameservers of
    /// resolv_conf).
    pub fn new(name: &str, upstreams: &[SocketAddr]) -> Zone {
        let mut table = Table::default();
        table.set("name", name.toml());
        if !upstreams.is_empty() {
            table.set("upstreams", upstreams.to_vec().toml());
        }
        Zone { table }
    }
    pub fn pool(mut self, pool: Pool) -> Zone {
        self.table.set("pool", pool.table.inline());
        self
    }
    /// `[zone.tls]`, given as an inline TOML table:
    /// `{ server_name = "dns.test", ca = "/path/ca.pem" }`.
    pub fn tls(mut self, inline_table: &str) -> Zone {
        self.table.set("tls", inline_table.to_string());
        self
    }
    /// `[zone.query_log]`, given as an inline TOML table: `{}` logs every
    /// query, `{ classes = ["error"], sample = 4 }`.
    pub fn query_log(mut self, inline_table: &str) -> Zone {
        self.table.set("query_log", inline_table.to_string());
        self
    }
    setters!(table {
        resolv_conf: &str,
        upstream_timeout: Duration,
        min_ttl: Duration,
        max_ttl: Duration,
        negative_max_ttl: Duration,
        transport: Transport,
        randomize_case: bool,
        max_fails: u32,
        health_check: Duration,
        /// `sequential`, `random` or `round_robin`.
        policy: &str,
        no_aaaa_for_ipv4_pods: bool,
        minimal: bool,
    });
}

/// A configuration for nodens, built setting by setting so tests state only
/// what they care about. Defaults: listen on `net.nodens()`, one worker,
/// metrics on `net.metrics()`, debug logs, and prefetch OFF (so upstream
/// query counts are exact unless a test turns it on).
#[derive(Clone, Debug)]
pub struct Cfg {
    server: Table,
    cache: Table,
    metrics: Table,
    log: Table,
    zones: Vec<Zone>,
    /// Sections written as given, after the others (`[cluster]`).
    extra: String,
}

impl Cfg {
    pub fn new(net: &Net) -> Cfg {
        let mut c = Cfg {
            server: Table::default(),
            cache: Table::default(),
            metrics: Table::default(),
            log: Table::default(),
            zones: Vec::new(),
            extra: String::new(),
        };
        c.server.set("listen", vec![net.nodens()].toml());
        c.server.set("workers", 1usize.toml());
        c.cache.set("prefetch_min_hits", 0u32.toml());
        c.metrics.set("listen", net.metrics().toml());
        c.log.set("level", "debug".toml());
        c
    }

    /// `[server] listen`.
    pub fn listen(mut self, addrs: &[SocketAddr]) -> Cfg {
        self.server.set("listen", addrs.to_vec().toml());
        self
    }
    /// Leaves `[server] workers` out, so nodens picks the count itself.
    pub fn auto_workers(mut self) -> Cfg {
        self.server.unset("workers");
        self
    }
    /// `[server] allow`: the client networks (CIDR) that are answered.
    pub fn allow(mut self, nets: &[&str]) -> Cfg {
        let nets: Vec<String> = nets.iter().map(|s| s.to_string()).collect();
        self.server.set("allow", nets.toml());
        self
    }
    setters!(server {
        workers: usize,
        max_udp_payload: u16,
        tcp_idle_timeout: Duration,
        tcp_read_timeout: Duration,
        tcp_max_connections: usize,
        tcp_max_connections_per_client: usize,
        tcp_max_in_flight: usize,
        query_timeout: Duration,
        client_rate_limit: u32,
        client_rate_burst: u32,
        max_misses_in_flight: usize,
        shutdown_grace: Duration,
    });

    /// `[cache] capacity` in KiB.
    pub fn capacity_kib(mut self, kib: u64) -> Cfg {
        self.cache.set("capacity", format!("{kib} KiB").toml());
        self
    }
    setters!(cache {
        servfail_ttl: Duration,
        stale_ttl: Duration,
        stale_max_age: Duration,
        stale_answer_timeout: Duration,
        stale_over_denial: bool,
        prefetch_min_hits: u32,
        prefetch_percent: u8,
        snapshot_file: &str,
        snapshot_interval: Duration,
    });

    /// `[metrics] listen`; "" turns the HTTP endpoint off.
    pub fn metrics_listen(mut self, addr: &str) -> Cfg {
        self.metrics.set("listen", addr.toml());
        self
    }
    /// `[metrics] KEY = VALUE` (`value` as TOML): `probe_listen`,
    /// `max_connections`, `header_timeout`.
    pub fn metrics_option(mut self, key: &'static str, value: &str) -> Cfg {
        self.metrics.set(key, value.to_string());
        self
    }
    /// `[log] level`.
    pub fn log_level(mut self, level: &str) -> Cfg {
        self.log.set("level", level.toml());
        self
    }

    /// `[server] KEY = VALUE` for a key without a setter (`value` as TOML).
    pub fn server_option(mut self, key: &'static str, value: &str) -> Cfg {
        self.server.set(key, value.to_string());
        self
    }

    /// TOML text appended as it is: sections this builder has no setters
    /// for (`[cluster]`, `[[cluster.cloud_suffix]]`).
    pub fn raw(mut self, toml_text: &str) -> Cfg {
        self.extra.push_str(toml_text);
        self.extra.push('\n');
        self
    }

    pub fn zone(mut self, zone: Zone) -> Cfg {
        self.zones.push(zone);
        self
    }

    /// The config file text.
    pub fn to_toml(&self) -> String {
        let mut s = String::new();
        for (section, table) in [
            ("server", &self.server),
            ("cache", &self.cache),
            ("metrics", &self.metrics),
            ("log", &self.log),
        ] {
            writeln!(s, "[{section}]\n{}", table.lines()).unwrap();
        }
        for z in &self.zones {
            writeln!(s, "[[zone]]\n{}", z.table.lines()).unwrap();
        }
        s.push_str(&self.extra);
        s
    }
}
