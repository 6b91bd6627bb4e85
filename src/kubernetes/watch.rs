//! The loop every watch of nodens runs: a kube-rs `watcher` kept as a map
//! of object id (its name, or a number where memory counts) to what the
//! feature needs of the object, handed to the feature whole, or as unknown.
//! A burst of changes is handed over once it is over (20 ms quiet, 200 ms
//! at most), not once per event.
//!
//! An error ends the watch: the feature is told the list is unknown at
//! once and falls back, and a new list is taken after a backoff (1 s,
//! doubling to 30 s). The watcher would resume from its last resource
//! version and, with nothing changed, say nothing: there would be no moment
//! to trust the old list again. A watch that expired (410 Gone) lists again
//! by itself, and the feature keeps what it had until the new list is whole.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use kube::runtime::watcher;

use super::metrics::{KubeMetrics, WatchLabels};

const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Changes are handed over once the stream has been quiet this long...
const QUIET: Duration = Duration::from_millis(20);
/// ...or this long after the first change not yet handed over: a burst
/// (a Deployment scaled to hundreds of pods) is one new view, not one per
/// event, each rebuilt whole.
const COALESCE_MAX: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Seconds since the Unix epoch.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// What a feature does with the list: `Some(map)` when complete and
/// current, `None` when not known. Returns false to end the watch.
pub(super) trait Follower<Id, V> {
    fn publish(&mut self, list: Option<&BTreeMap<Id, V>>) -> bool;
}

/// Runs `events()` (a new watcher each time) until `follower` says stop,
/// keeping `extract(object)` per `id_of(object)`.
pub(super) async fn follow<K, Id: Ord, V: PartialEq, S>(
    events: impl Fn() -> S,
    id_of: impl Fn(&K) -> Option<Id>,
    mut extract: impl FnMut(&K) -> V,
    labels: WatchLabels<'_>,
    metrics: &KubeMetrics,
    follower: &mut impl Follower<Id, V>,
) where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut retry = RETRY_FIRST;
    // Whether the last list handed over was current until now: only then
    // does an error move the moment the watch last knew it current.
    let mut current = false;
    loop {
        metrics.synced.get(&labels).set(0);
        let mut events = std::pin::pin!(events());
        let mut objects: BTreeMap<Id, V> = BTreeMap::new();
        let mut listing: Option<BTreeMap<Id, V>> = None;
        // When the first change not yet published came.
        let mut unpublished: Option<tokio::time::Instant> = None;
        let error = loop {
            let next = match unpublished {
                None => events.next().await,
                Some(first) => {
                    let until = (tokio::time::Instant::now() + QUIET).min(first + COALESCE_MAX);
                    match tokio::time::timeout_at(until, events.next()).await {
                        Ok(next) => next,
                        Err(_) => {
                            unpublished = None;
                            retry = RETRY_FIRST;
                            metrics.synced.get(&labels).set(1);
                            metrics.current_at.get(&labels).set(unix_now());
                            current = true;
                            metrics.objects.get(&labels).set(objects.len() as i64);
                            if !follower.publish(Some(&objects)) {
                                return;
                            }
                            continue;
                        }
                    }
                }
            };
            let Some(event) = next else {
                break None;
            };
            match event {
                Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
                Ok(watcher::Event::InitApply(o)) => {
                    if let (Some(l), Some(name)) = (listing.as_mut(), id_of(&o)) {
                        l.insert(name, extract(&o));
                    }
                }
                Ok(watcher::Event::InitDone) => objects = listing.take().unwrap_or_default(),
                Ok(watcher::Event::Apply(o)) => {
                    let Some(name) = id_of(&o) else { continue };
                    let new = extract(&o);
                    // Most changes to an object (a pod's container states)
                    // change nothing the feature keeps: nothing to publish.
                    if listing.is_none() && objects.get(&name) == Some(&new) {
                        continue;
                    }
                    objects.insert(name, new);
                }
                Ok(watcher::Event::Delete(o)) => {
                    let Some(name) = id_of(&o) else { continue };
                    if objects.remove(&name).is_none() && listing.is_none() {
                        continue;
                    }
                }
                Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                    tracing::info!(
                        watch = labels.watch,
                        "{} watch expired (410 Gone); listing again",
                        labels.resource
                    );
                    continue;
                }
                Err(e) => break Some(e),
            }
            if listing.is_some() {
                // Mid-list: what was published stands until the list is whole.
                continue;
            }
            unpublished.get_or_insert_with(tokio::time::Instant::now);
        };
        metrics.errors.get(&labels).inc();
        if std::mem::take(&mut current) {
            metrics.current_at.get(&labels).set(unix_now());
        }
        metrics.synced.get(&labels).set(0);
        let why = error.map_or_else(|| "ended".to_string(), |e| e.to_string());
        tracing::warn!(
            watch = labels.watch,
            "{} watch: {why}; falling back, listing again in {retry:?}",
            labels.resource
        );
        if !follower.publish(None) {
            return;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}
