//! What goes over the control socket: one request line of JSON from the
//! client, then reply lines of JSON from nodens until it closes. Lines, not
//! one document, so a dump of a full cache streams and the client prints
//! as it reads; JSON, so a script can read `--json` output as it is.

use serde::{Deserialize, Serialize};

/// The longest request line accepted (a name is at most 253 characters).
pub(crate) const MAX_REQUEST: usize = 4096;

/// One request, the first and only line a client sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// The cached entries of one name (every type, view and DO/CD flag), or
    /// of one type of it.
    CacheShow {
        name: String,
        #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
        qtype: Option<String>,
    },
    /// Drops cached entries: of one name, of a zone (the name and every
    /// name below it), or all.
    CacheFlush { scope: FlushScope },
    /// Every cached entry.
    CacheDump,
    /// The busiest workloads of the node, as counted since the last
    /// `top` request of the same client (or since nodens started).
    Top {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// The kubelet's probes (`nodens probe`): whether every serving thread
    /// runs (`/health`), or whether nodens serves and is not draining
    /// (`/ready`). Over the socket, no TCP port anyone could take or fill.
    Probe { what: ProbeKind },
    /// What a running nodens would otherwise say only in its metrics and
    /// logs, for `nodens doctor`: its startup taint, the denials it
    /// answered with a last-known-good answer, its configuration's
    /// deprecated keys.
    Status,
}

/// What a probe asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeKind {
    Health,
    Ready,
}

/// What a flush drops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum FlushScope {
    Name(String),
    Zone(String),
    All,
}

impl FlushScope {
    /// The `scope` label of `nodens_cache_flushes_total`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            FlushScope::Name(_) => "name",
            FlushScope::Zone(_) => "zone",
            FlushScope::All => "all",
        }
    }
}

/// One reply line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reply {
    /// A cached entry (`cache show`, `cache dump`).
    Entry(CachedEntry),
    /// The last line of `cache show` and `cache dump`: how many entries.
    Done { entries: usize },
    /// The reply to a flush: the entries dropped.
    Flushed { scope: String, entries: usize },
    /// The reply to `top`.
    Top(crate::workloads::TopView),
    /// The reply to a probe: its verdict, and the page `/health` or
    /// `/ready` would show.
    Probe { ok: bool, page: String },
    /// The reply to `status`.
    Status(StatusView),
    /// The request was refused or failed; nothing was done.
    Error(String),
}

/// A running nodens's state for `nodens doctor` (`status`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    /// `[kubernetes] startup_taint`, when one is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_taint: Option<TaintView>,
    /// Denials and SERVFAILs from upstream answered with the name's last
    /// positive answer, since start: the API watch vouched (`cluster`), or
    /// `stale_over_denial` (`stale`).
    pub last_good_cluster: u64,
    pub last_good_stale: u64,
    /// Positive answers kept aside for a denial that may follow.
    pub kept_answers: u64,
    /// Each zone's bulkhead (`[[zone]] max_misses_in_flight`).
    #[serde(default)]
    pub zones: Vec<ZoneView>,
    /// Each DNS-over-TLS upstream's handshakes (`[zone.tls]`).
    #[serde(default)]
    pub tls: Vec<TlsView>,
    /// The deprecated keys the running configuration writes.
    #[serde(default)]
    pub deprecated_keys: Vec<DeprecatedKeyView>,
}

/// A deprecated key the running configuration writes, and what replaces it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeprecatedKeyView {
    /// The key with its table, as docs/configuration.md writes it:
    /// `[server] tcp_max_inflight`.
    pub key: String,
    pub replacement: String,
    /// Its line in the configuration file.
    pub line: usize,
    /// The first release that may remove it.
    pub removed_in: String,
}

/// How one DNS-over-TLS upstream's handshakes went since it was built.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsView {
    pub upstream: String,
    /// Sessions made: a full handshake, or a resumed one.
    pub full: u64,
    pub resumed: u64,
    /// Handshakes that failed: the server's certificate refused, none
    /// within `connect_timeout`, or another TLS or network failure.
    pub certificate: u64,
    pub timeout: u64,
    pub error: u64,
    pub last_error: Option<String>,
}

/// A zone's misses in flight against its bulkhead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneView {
    pub zone: String,
    /// Its listen addresses ("" for every listener).
    pub view: String,
    pub in_flight: u64,
    /// 0: no bound but the server's.
    pub max: u64,
    /// Misses turned away because the zone had `max` in flight.
    pub rejected: u64,
}

/// Where the startup taint's removal stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaintView {
    pub key: String,
    /// This node's name; none when nodens was given none.
    pub node: Option<String>,
    /// Removed (or found absent): pods may be scheduled on the node.
    pub removed: bool,
    /// Failed attempts so far, and the last one's error.
    pub errors: u64,
    pub last_error: Option<String>,
}

/// A cached entry as an operator reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedEntry {
    /// The question name, as the upstream echoed it.
    pub name: String,
    #[serde(rename = "type")]
    pub qtype: String,
    pub class: String,
    /// The cache partition (`[[zone]] listen` views); 0 without views.
    pub view: u8,
    /// Asked with the DO bit (DNSSEC records kept) / the CD bit.
    pub dnssec_ok: bool,
    pub checking_disabled: bool,
    /// `answer`, `nxdomain`, `nodata` or `failure`.
    pub kind: String,
    pub rcode: String,
    /// `fresh`, `held` (past its TTL, kept while the API watch is
    /// current), `stale` (past its TTL, served only when the upstreams
    /// fail) or `expired` (waiting for eviction).
    pub state: String,
    /// Seconds of freshness left (0 once past its TTL).
    pub ttl_left: u64,
    /// Seconds since it was stored.
    pub age: u64,
    /// The answer and authority records, in presentation format, with the
    /// TTLs a client would get now.
    pub records: Vec<String>,
}
