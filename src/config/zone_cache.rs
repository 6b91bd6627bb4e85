//! `[zone.cache]`: one zone's cache policy, each key falling back to
//! `[cache]`. node-local-dns Corefiles set `cache` per server block (other
//! TTLs, `serve_stale`, `prefetch`, `servfail`, or no cache at all), so the
//! policy is the zone's; the capacity stays one for the whole cache.
//!
//! Compiled into a [`CachePolicy`] that the zone carries
//! (`upstream::Zone::cache`): the request path reads it through the zone it
//! has already routed to, so a per-zone policy costs the hit path nothing
//! beyond the global one it replaces.

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::check::Invalid;
use super::file::CacheConfig;

/// `[zone.cache]` as written: every key optional.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ZoneCacheConfig {
    /// `false`: nothing of this zone is stored or served from the cache
    /// (CoreDNS without `cache` in the block); identical misses are still
    /// coalesced.
    pub enabled: Option<bool>,
    /// Store answers (`false`: CoreDNS `disable success`).
    pub success: Option<bool>,
    /// Store NXDOMAIN and NODATA (`false`: CoreDNS `disable denial`).
    pub denial: Option<bool>,
    #[serde(with = "humantime_serde")]
    pub servfail_ttl: Option<Duration>,
    #[serde(with = "humantime_serde")]
    pub stale_ttl: Option<Duration>,
    /// 0: no serve-stale for this zone.
    #[serde(with = "humantime_serde")]
    pub stale_max_age: Option<Duration>,
    /// 0: a stale answer at once (CoreDNS `serve_stale ... immediate`).
    #[serde(with = "humantime_serde")]
    pub stale_answer_timeout: Option<Duration>,
    /// 0: no prefetch for this zone.
    pub prefetch_min_hits: Option<u32>,
    pub prefetch_percent: Option<Spanned<u8>>,
}

/// One zone's cache policy, every value decided.
#[derive(Debug, Clone, PartialEq)]
pub struct CachePolicy {
    pub enabled: bool,
    pub store_success: bool,
    pub store_denial: bool,
    /// Seconds a failure is cached; 0: not cached.
    pub failure_ttl: u32,
    /// The TTL of a stale answer.
    pub stale_ttl: u32,
    /// How long past expiry an answer may be served stale; 0: never.
    pub stale_max_age: Duration,
    /// How long a miss with a stale answer waits on upstream first.
    pub stale_answer_timeout: Duration,
    /// Hits before a refresh ahead of expiry; 0: no prefetch.
    pub prefetch_min_hits: u32,
    pub prefetch_percent: u8,
}

impl CachePolicy {
    /// Whether an entry of `kind` may be stored for this zone.
    pub(crate) fn stores(&self, kind: crate::cache::Kind) -> bool {
        use crate::cache::Kind;
        self.enabled
            && match kind {
                Kind::Success => self.store_success,
                Kind::Denial => self.store_denial,
                Kind::Failure => self.failure_ttl > 0,
            }
    }

    /// How long past expiry an entry may be served (none when caching is off).
    pub(crate) fn stale_window(&self) -> Duration {
        if self.enabled {
            self.stale_max_age
        } else {
            Duration::ZERO
        }
    }
}

/// Whole seconds, saturating: TTLs are 32-bit on the wire.
fn secs(d: Duration) -> u32 {
    d.as_secs().min(u32::MAX.into()) as u32
}

impl ZoneCacheConfig {
    /// The policy: each key as written here, else as in `[cache]`.
    pub(super) fn compile(&self, global: &CacheConfig) -> Result<CachePolicy, Invalid> {
        let percent = match &self.prefetch_percent {
            Some(p) if *p.get_ref() > 100 => {
                return Err(Invalid::At(
                    p.span(),
                    "zone.cache.prefetch_percent: must be 0 to 100".into(),
                ));
            }
            Some(p) => *p.get_ref(),
            None => global.prefetch_percent,
        };
        Ok(CachePolicy {
            enabled: self.enabled.unwrap_or(true),
            store_success: self.success.unwrap_or(true),
            store_denial: self.denial.unwrap_or(true),
            failure_ttl: secs(self.servfail_ttl.unwrap_or(global.servfail_ttl)),
            stale_ttl: secs(self.stale_ttl.unwrap_or(global.stale_ttl)),
            stale_max_age: self.stale_max_age.unwrap_or(global.stale_max_age),
            stale_answer_timeout: self
                .stale_answer_timeout
                .unwrap_or(global.stale_answer_timeout),
            prefetch_min_hits: self.prefetch_min_hits.unwrap_or(global.prefetch_min_hits),
            prefetch_percent: percent,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::Config;

    fn zones(text: &str) -> Vec<crate::config::ZonePlan> {
        Config::parse(text).unwrap().zones
    }

    #[test]
    fn each_key_falls_back_to_the_global_cache() {
        let text = "[cache]\nservfail_ttl = \"7s\"\nstale_max_age = \"2h\"\nprefetch_min_hits = 4\nprefetch_percent = 20\n\
                    [[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n\
                    [zone.cache]\nstale_answer_timeout = \"0s\"\nprefetch_percent = 50\n\
                    [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.2\"]\n\
                    [zone.cache]\nenabled = false\nservfail_ttl = \"0s\"\nstale_max_age = \"0s\"\nsuccess = false\n\
                    [[zone]]\nname = \"c\"\nupstreams = [\"127.0.0.3\"]\n";
        let z = zones(text);
        let (a, b, c) = (&z[0].cache, &z[1].cache, &z[2].cache);
        assert!(a.enabled && a.store_success && a.store_denial);
        assert_eq!(a.stale_answer_timeout, Duration::ZERO);
        assert_eq!(a.stale_max_age, Duration::from_secs(7200));
        assert_eq!((a.prefetch_min_hits, a.prefetch_percent), (4, 50));
        assert_eq!(a.failure_ttl, 7);
        assert!(!b.enabled && !b.store_success && b.store_denial);
        assert_eq!(b.failure_ttl, 0);
        assert_eq!(b.stale_max_age, Duration::ZERO);
        assert_eq!(b.stale_window(), Duration::ZERO);
        assert_eq!(c.stale_answer_timeout, Duration::from_secs(1));
        assert_eq!((c.prefetch_min_hits, c.prefetch_percent), (4, 20));
        // The failure TTL of a SERVFAIL from upstream follows the zone's too.
        assert_eq!(z[1].ttl.failure_ttl, 0);
        assert_eq!(z[2].ttl.failure_ttl, 7);
    }

    #[test]
    fn errors_name_the_line() {
        let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n[zone.cache]\n\nprefetch_percent = 101\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 6, "{e}");
        assert!(e.message.contains("prefetch_percent"), "{e}");
        let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n[zone.cache]\nenabled = false\nserve_stale = true\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 6, "{e}");
        let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n[zone.cache]\nstale_max_age = \"forever\"\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 5, "{e}");
    }
}
