//! What one server block's directives say, before it becomes zones: the
//! accumulator each plugin's translation (`cache.rs`, `forward.rs`, ...)
//! fills and `block.rs` turns into zones, and the quote of a directive
//! their messages use.

use std::net::IpAddr;
use std::time::Duration;

use super::super::corefile::Directive;
use super::{Upstream, ZoneCacheOut};

/// What one block's directives say, before it becomes zones.
#[derive(Default)]
pub(super) struct BlockOut {
    pub(super) binds: Vec<IpAddr>,
    pub(super) forward: Option<(Upstream, usize)>,
    pub(super) force_tcp: bool,
    /// `forward`'s `tls` and `tls_servername`, until its destinations say
    /// whether they apply.
    pub(super) tls_options: super::tls::TlsOptions,
    /// The zones' TLS, when `forward`'s destinations are `tls://`.
    pub(super) tls: Option<super::tls::TlsOut>,
    pub(super) policy: Option<(&'static str, &'static str)>,
    pub(super) max_fails: Option<u32>,
    /// `forward ... max_concurrent`: the zone's bulkhead.
    pub(super) max_concurrent: Option<u32>,
    pub(super) health_check: Option<Duration>,
    pub(super) idle_timeout: Option<Duration>,
    pub(super) cached: bool,
    pub(super) min_ttl: Option<Duration>,
    pub(super) max_ttl: Option<Duration>,
    pub(super) negative_max_ttl: Option<Duration>,
    pub(super) cache: ZoneCacheOut,
    pub(super) records: super::RecordsOut,
    pub(super) rules: super::zone_rules::RulesOut,
    /// `minimal`: answers keep only their answer section.
    pub(super) minimal: bool,
    /// The zones `log` covers, with their class bits.
    pub(super) query_log: Vec<(String, u8)>,
}

/// A short quote of a directive for messages: `rewrite name a b`.
pub(super) fn describe(d: &Directive) -> String {
    let mut words = vec![d.name.text.as_str()];
    words.extend(d.args.iter().take(4).map(|t| t.text.as_str()));
    if d.args.len() > 4 {
        words.push("...");
    }
    format!("`{}`", words.join(" "))
}
