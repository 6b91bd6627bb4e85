//! The cache's configuration: `[cache]` (the capacity, the cache file,
//! each zone's defaults) and `[zone.cache]`, one zone's cache policy, each
//! key falling back to `[cache]`. node-local-dns Corefiles set `cache` per server block (other
//! TTLs, `serve_stale`, `prefetch`, `servfail`, or no cache at all), so the
//! policy is the zone's; the capacity stays one for the whole cache.
//!
//! Compiled into a [`CachePolicy`] that the zone carries
//! (`upstream::Zone::cache`): the request path reads it through the zone it
//! has already routed to, so a per-zone policy costs the hit path nothing
//! beyond the global one it replaces.

use std::path::PathBuf;
use std::time::Duration;

use bytesize::ByteSize;
use serde::Deserialize;
use toml::Spanned;

use crate::vocab::{Invalid, key};

/// `[cache]`: the cache of the whole process, and each zone's defaults.
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
    /// How long a query for an expired name waits on upstream before its
    /// stale answer is sent, the refresh going on behind (RFC 8767's client
    /// response timer); 0: at once (CoreDNS `serve_stale immediate`).
    #[serde(with = "humantime_serde")]
    pub stale_answer_timeout: Duration,
    /// A positive answer within `stale_max_age` is served over a denial
    /// (NXDOMAIN, NODATA) or a SERVFAIL its refresh brings, and the denial
    /// is not stored: a name that had addresses a moment ago keeps them
    /// through an upstream's transient NXDOMAIN (CoreDNS's `serve_stale`
    /// serves stale only when upstream is unreachable). Off by default: a
    /// name really deleted is then answered until `stale_max_age` runs out.
    pub stale_over_denial: bool,
    /// Hits an entry needs before it is refreshed ahead of expiry; 0 disables prefetch.
    pub prefetch_min_hits: u32,
    /// Refresh when this percentage of the original TTL or less remains.
    pub prefetch_percent: u8,
    /// The cache written to this file now and then and read at start, so a
    /// crash or a reboot starts warm (`warm`); unset: off.
    pub snapshot_file: Option<PathBuf>,
    /// How often the file is written (at least 10 s).
    #[serde(with = "humantime_serde")]
    pub snapshot_interval: Duration,
    /// The largest file written (and read): the entries past it are left out.
    pub snapshot_max_size: ByteSize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity: ByteSize::mib(64),
            servfail_ttl: Duration::from_secs(5),
            stale_ttl: Duration::from_secs(30),
            stale_max_age: Duration::from_secs(3600),
            stale_answer_timeout: Duration::from_secs(1),
            stale_over_denial: false,
            prefetch_min_hits: 3,
            prefetch_percent: 10,
            snapshot_file: None,
            snapshot_interval: Duration::from_secs(60),
            snapshot_max_size: ByteSize::mib(64),
        }
    }
}

impl CacheConfig {
    /// The first rule the section breaks, if any.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        if self.prefetch_percent > 100 {
            return Err(key(
                &["cache", "prefetch_percent"],
                "cache.prefetch_percent: must be 0 to 100",
            ));
        }
        self.check_snapshot()
    }

    /// `[cache] snapshot_*`: an absolute file path, an interval that bounds
    /// the disk's writes, a size that holds at least a few entries.
    fn check_snapshot(&self) -> Result<(), Invalid> {
        let c = self;
        if let Some(file) = &c.snapshot_file
            && (!file.is_absolute() || file.file_name().is_none())
        {
            return Err(key(
                &["cache", "snapshot_file"],
                format!(
                    "cache.snapshot_file: `{}` is not an absolute path to a file",
                    file.display()
                ),
            ));
        }
        if c.snapshot_interval < super::warm::MIN_INTERVAL {
            return Err(key(
                &["cache", "snapshot_interval"],
                format!(
                    "cache.snapshot_interval: must be at least {:?}",
                    super::warm::MIN_INTERVAL
                ),
            ));
        }
        if c.snapshot_max_size.as_u64() < super::warm::MIN_SIZE {
            return Err(key(
                &["cache", "snapshot_max_size"],
                format!(
                    "cache.snapshot_max_size: must be at least {} bytes",
                    super::warm::MIN_SIZE
                ),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct CacheSettings {
    pub capacity: u64,
    /// Seconds a failure is cached; 0: not cached.
    pub failure_ttl: u32,
    /// The TTL of a stale answer.
    pub stale_ttl: u32,
    /// How long past expiry an answer may be served stale.
    pub stale_max_age: Duration,
    /// How long a miss with a stale answer waits on upstream before it
    /// gets the stale answer.
    pub stale_answer_timeout: Duration,
    pub prefetch_min_hits: u32,
    pub prefetch_percent: u8,
    /// The cache's file on the node's disk (`[cache] snapshot_file`).
    pub snapshot: Option<SnapshotPlan>,
}

/// Where and how often the cache is written to disk (`warm`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotPlan {
    pub file: PathBuf,
    pub interval: Duration,
    pub max_size: u64,
    /// What the cached answers were asked of: a hash of every zone's name
    /// and configured upstreams (the cluster domain among them). A file
    /// written for another is refused (`cache::snapshot_file`).
    pub identity: u64,
}

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
    pub stale_over_denial: Option<bool>,
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
    /// A positive answer within `stale_max_age` is served over a denial
    /// its refresh brings (`[cache] stale_over_denial`).
    pub stale_over_denial: bool,
    /// Hits before a refresh ahead of expiry; 0: no prefetch.
    pub prefetch_min_hits: u32,
    pub prefetch_percent: u8,
}

impl CachePolicy {
    /// Whether an entry of `kind` may be stored for this zone.
    pub(crate) fn stores(&self, kind: super::Kind) -> bool {
        use super::Kind;
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
    pub(crate) fn compile(&self, global: &CacheConfig) -> Result<CachePolicy, Invalid> {
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
            stale_over_denial: self.stale_over_denial.unwrap_or(global.stale_over_denial),
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
        let text = "[cache]\nservfail_ttl = \"7s\"\nstale_max_age = \"2h\"\nprefetch_min_hits = 4\nprefetch_percent = 20\nstale_over_denial = true\n\
                    [[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n\
                    [zone.cache]\nstale_answer_timeout = \"0s\"\nprefetch_percent = 50\n\
                    [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.2\"]\n\
                    [zone.cache]\nenabled = false\nservfail_ttl = \"0s\"\nstale_max_age = \"0s\"\nsuccess = false\nstale_over_denial = false\n\
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
        assert_eq!(
            (
                a.stale_over_denial,
                b.stale_over_denial,
                c.stale_over_denial
            ),
            (true, false, true)
        );
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
