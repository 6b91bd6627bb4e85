//! Warm after a crash or a reboot: the cache is written to the node's disk
//! now and then (`[cache] snapshot_file`, every `snapshot_interval`, at
//! most `snapshot_max_size`) and once more at a clean shutdown, and read at
//! start when no handover brought a fresher one. Without it an OOM kill, a
//! crash or a node reboot starts cold and sends every name the node's pods
//! ask for to the cluster DNS within seconds.
//!
//! The write runs off the request path: an upkeep task on the main runtime
//! wakes every interval and hands the write to a blocking thread. It holds
//! no cache lock for longer than one entry's copy (the cache's iterator
//! takes each shard's read lock per item), and its I/O is bounded by the
//! size cap and the interval. The file's format, its atomic replacement and
//! its checks are `cache::snapshot_file`; every record is then checked as a
//! handover's is (`cache::snapshot`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prometheus::IntGauge;

use super::config::{CacheSettings, SnapshotPlan};
use super::{Cache, TtlPolicy, snapshot, snapshot_file};
use crate::metrics::{Counters, Histograms, Registry, ResultLabels, duration_buckets};
use crate::tasks::Upkeep;

/// The shortest `snapshot_interval`: a write is a pass over the whole cache
/// and up to `snapshot_max_size` bytes to disk.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(10);
/// The smallest `snapshot_max_size`.
pub(crate) const MIN_SIZE: u64 = 64 << 10;

/// The writes and the load of the cache file.
pub struct WarmMetrics {
    writes: Counters<ResultLabels<'static>>,
    write_seconds: Histograms<ResultLabels<'static>>,
    bytes: IntGauge,
    entries: IntGauge,
    written_at: IntGauge,
    loads: Counters<ResultLabels<'static>>,
}

impl WarmMetrics {
    pub fn register(r: &Registry) -> WarmMetrics {
        WarmMetrics {
            writes: r.counters(
                "nodens_cache_snapshot_writes_total",
                "Writes of the cache file (cache.snapshot_file), by result.",
            ),
            write_seconds: r.histograms(
                "nodens_cache_snapshot_write_duration_seconds",
                "How long a write of the cache file took, by result.",
                duration_buckets(),
            ),
            bytes: r.gauge(
                "nodens_cache_snapshot_file_bytes",
                "Size of the cache file last written.",
            ),
            entries: r.gauge(
                "nodens_cache_snapshot_file_entries",
                "Entries in the cache file last written.",
            ),
            written_at: r.gauge(
                "nodens_cache_snapshot_last_write_timestamp_seconds",
                "When the cache file was last written (Unix time).",
            ),
            loads: r.counters(
                "nodens_cache_snapshot_file_loads_total",
                "Cache files read at start, by result (success; failure: refused whole).",
            ),
        }
    }

    fn wrote(&self, result: &std::io::Result<snapshot::Written>, took: Duration) {
        let outcome = if result.is_ok() { "success" } else { "failure" };
        let labels = ResultLabels { result: outcome };
        self.writes.get(&labels).inc();
        self.write_seconds.get(&labels).observe(took.as_secs_f64());
        if let Ok(w) = result {
            self.bytes.set(w.bytes as i64);
            self.entries.set(w.records as i64);
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
            self.written_at.set(now.map_or(0, |d| d.as_secs()) as i64);
        }
    }
}

/// Writes the cache to `plan.file` now, on the calling thread; logged and
/// counted.
fn write_now(cache: &Cache, metrics: &WarmMetrics, plan: &SnapshotPlan, stale: Duration) {
    let started = Instant::now();
    let result = snapshot_file::write(&plan.file, cache, stale, plan.max_size, plan.identity);
    let took = started.elapsed();
    metrics.wrote(&result, took);
    match result {
        Ok(w) => {
            if w.cut {
                tracing::warn!(
                    file = %plan.file.display(),
                    entries = w.records,
                    "cache file: snapshot_max_size reached, the other entries left out"
                );
            }
            tracing::debug!(
                file = %plan.file.display(),
                entries = w.records,
                bytes = w.bytes,
                ?took,
                "cache file written"
            );
        }
        Err(e) => tracing::warn!(file = %plan.file.display(), "cache file not written: {e}"),
    }
}

/// What the running zones keep, for a read of the cache file.
pub(crate) struct Zones<'a> {
    /// The TTL policy of a name (wire form), by the zone that answers it.
    pub policy: &'a dyn Fn(&[u8]) -> Option<TtlPolicy>,
    /// The longest an entry of any zone lives: no record of an older file
    /// is of use.
    pub horizon: Duration,
}

/// The periodic writer: one task, replaced when its settings change.
#[derive(Default)]
pub(crate) struct Writer {
    running: Option<(SnapshotPlan, Duration, tokio::task::AbortHandle)>,
}

impl Writer {
    /// Starts, restarts or stops the writer as `cache` asks (at start and
    /// on reload), writing the cache that `holder` holds.
    pub(crate) fn apply<C: AsRef<Cache> + Send + Sync + 'static>(
        &mut self,
        cache: &CacheSettings,
        holder: &Arc<C>,
        metrics: &Arc<WarmMetrics>,
        upkeep: &Upkeep,
    ) {
        let wanted = cache.snapshot.clone().map(|p| (p, cache.stale_max_age));
        let same = match (&self.running, &wanted) {
            (Some((p, s, _)), Some((q, t))) => p == q && s == t,
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        if let Some((_, _, task)) = self.running.take() {
            task.abort();
        }
        let Some((plan, stale)) = wanted else {
            return;
        };
        let (holder, metrics, task_plan) = (holder.clone(), metrics.clone(), plan.clone());
        let task = upkeep.spawn_stoppable(async move {
            let mut next = tokio::time::Instant::now() + task_plan.interval;
            loop {
                tokio::time::sleep_until(next).await;
                let (holder, metrics, plan) = (holder.clone(), metrics.clone(), task_plan.clone());
                let _ = tokio::task::spawn_blocking(move || {
                    write_now((*holder).as_ref(), &metrics, &plan, stale);
                })
                .await;
                // Never more often than the interval, however long a write took.
                next = tokio::time::Instant::now() + task_plan.interval;
            }
        });
        self.running = Some((plan, stale, task));
    }

    /// At a clean shutdown: stops the timer and writes once more, so a
    /// reboot's drain leaves a file as fresh as it can be.
    pub(crate) async fn last_write<C: AsRef<Cache> + Send + Sync + 'static>(
        &mut self,
        holder: &Arc<C>,
        metrics: &Arc<WarmMetrics>,
    ) {
        let Some((plan, stale, task)) = self.running.take() else {
            return;
        };
        task.abort();
        let (holder, metrics) = (holder.clone(), metrics.clone());
        let _ = tokio::task::spawn_blocking(move || {
            write_now((*holder).as_ref(), &metrics, &plan, stale)
        })
        .await;
    }

    /// Stops writing (the cache went to a new process, which writes its own).
    pub(crate) fn stop(&mut self) {
        if let Some((_, _, task)) = self.running.take() {
            task.abort();
        }
    }
}

/// Reads the cache file into the cache at start, every record checked
/// against this process's settings as a handover's are; the wall-clock time
/// since the write is added to every age. A file refused whole is logged
/// and counted, and the process starts cold.
///
/// `zones` says what the running zones keep: each name's TTL policy, and
/// the longest an entry of any zone lives (its largest TTL plus its stale
/// window), past which a file is too old to read.
pub(crate) fn load_at_start(
    into: &Cache,
    zones: &Zones<'_>,
    metrics: &WarmMetrics,
    gauges: &super::metrics::CacheGauges,
    cache: &CacheSettings,
) {
    let Some(plan) = &cache.snapshot else {
        return;
    };
    let file = plan.file.display();
    let horizon = zones.horizon;
    // No bigger than the cache it fills: a snapshot of a cache of this
    // capacity is smaller (an entry weighs more than its bytes).
    let max_size = plan.max_size.min(cache.capacity.saturating_add(64 << 10));
    let opened = snapshot_file::open(&plan.file, max_size, plan.identity).and_then(|o| {
        o.map(|o| match o.age(SystemTime::now(), horizon) {
            Ok(age) => Ok((o, age)),
            Err(e) => {
                o.finish();
                Err(e)
            }
        })
        .transpose()
    });
    let (mut opened, age) = match opened {
        Ok(Some(found)) => found,
        Ok(None) => {
            tracing::info!(%file, "cache file: none yet; starting cold");
            return;
        }
        Err(e) => {
            metrics.loads.get(&ResultLabels { result: "failure" }).inc();
            tracing::warn!(%file, "cache file refused: {e}; starting cold");
            return;
        }
    };
    let now = Instant::now();
    let rules = snapshot::Rules {
        policy: zones.policy,
        stale_max_age: cache.stale_max_age,
        max_records: snapshot::max_records(cache.capacity),
        deadline: now + snapshot::LOAD_TIME,
    };
    let loaded = match opened.stream() {
        Ok(mut stream) => snapshot::read_aged(into, now, age, &rules, &mut stream),
        Err(e) => {
            tracing::warn!(%file, "cache file: cannot read it: {e}; starting cold");
            snapshot::Loaded::default()
        }
    };
    opened.finish();
    gauges.snapshot_read(&loaded);
    metrics.loads.get(&ResultLabels { result: "success" }).inc();
    tracing::info!(
        %file,
        loaded = loaded.loaded,
        refused = loaded.refused,
        ?age,
        "cache file read: starting warm"
    );
    if let Some(why) = loaded.first_refusal {
        tracing::info!(%file, "cache file: records dropped (the first: {why})");
    }
    if let Some(cut) = &loaded.cut {
        tracing::warn!(%file, "cache file: {cut}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::Config;

    #[test]
    fn the_options_are_checked_and_an_error_names_its_line() {
        assert!(Config::parse("").unwrap().cache.snapshot.is_none());
        let c = Config::parse("[cache]\nsnapshot_file = \"/var/lib/nodens/cache.snap\"\n").unwrap();
        let plan = c.cache.snapshot.unwrap();
        assert_eq!(plan.interval, Duration::from_secs(60));
        assert_eq!(plan.max_size, 64 << 20);
        for (text, line, says) in [
            ("[cache]\nsnapshot_file = \"cache.snap\"\n", 2, "absolute"),
            (
                "[cache]\nsnapshot_file = \"/x/c\"\n\nsnapshot_interval = \"5s\"\n",
                4,
                "at least 10s",
            ),
            (
                "[cache]\nsnapshot_max_size = \"1 KiB\"\n",
                2,
                "at least 65536",
            ),
        ] {
            let e = Config::parse(text).unwrap_err();
            assert_eq!(e.position.map(|p| p.0), Some(line), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
