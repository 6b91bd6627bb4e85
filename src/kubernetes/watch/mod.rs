//! The loop every watch of nodens runs: a list, then a watch that resumes
//! from the last resource version it saw for as long as the API server
//! still has it, kept as a map of object id (its name, or a number where
//! memory counts) to what the feature needs of the object, handed to the
//! feature whole, or as unknown. A burst of changes is handed over once it
//! is over (20 ms quiet, 200 ms at most), not once per event.
//!
//! - **A list** only at the start and when the API server no longer has
//!   the watch's resource version (410 Gone): in pages from its watch
//!   cache, or streamed where asked and served (`source.rs`). The feature
//!   keeps what it had until the new list is whole.
//! - **A watch request** ends after 5 to 10 minutes (at random, as
//!   client-go's reflector does) and the next goes on from where it ended.
//!   Bookmarks keep the resource version fresh, so that a resume after a
//!   quiet hour still finds it in the server's window.
//! - **An error** (connection lost, timeout, the API server restarting)
//!   tells the feature at once that the list is unknown, and it falls
//!   back. The watch resumes after a jittered backoff (`backoff.rs`) from
//!   the resource version it had. Once the API server accepted the
//!   resumed watch, it sends every change since that version before any
//!   new one, at once; when that replay has gone quiet (250 ms, or 2 s
//!   after the watch was accepted if events keep coming) the list, with
//!   the replay applied, is handed over as current again. A bookmark,
//!   which the server sends only after the replay, makes it current at
//!   once. The quiet is a margin, not a proof: no event marks the
//!   replay's end (a resource that did not change gets no bookmark).

mod backoff;
mod protobuf;
mod source;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kube::api::WatchEvent;
use rand::Rng;

use super::metrics::{KubeMetrics, WatchLabels};
pub(super) use backoff::Backoff;
pub(crate) use protobuf::Protobuf;
use source::{Events, ListError};
pub(crate) use source::{Metadata, Objects, Query, Source};

/// Changes are handed over once the stream has been quiet this long...
const QUIET: Duration = Duration::from_millis(20);
/// ...or this long after the first change not yet handed over: a burst
/// (a Deployment scaled to hundreds of pods) is one new view, not one per
/// event, each rebuilt whole.
const COALESCE_MAX: Duration = Duration::from_millis(200);
/// A resumed watch is current again once it has been quiet this long
/// (the API server sends the replay of what changed meanwhile first, at
/// once; this is the margin for it to arrive)...
const RESUME_QUIET: Duration = Duration::from_millis(250);
/// ...or this long after the API server accepted it, if events keep
/// coming (then the replay is over: what comes is live).
const RESUME_MAX: Duration = Duration::from_secs(2);
/// A watch request lasts between this and twice this, in seconds.
const WATCH_SECONDS: u32 = 300;
/// A watch that ends sooner than this without an error came back too
/// fast to be trusted to stay: the next waits a backoff.
const SHORT_WATCH: Duration = Duration::from_secs(1);
/// A watch the API server has not ended this long after its time is on a
/// connection that is gone without a word (a peer or a load balancer
/// that vanished: nothing is sent on a watch, so nothing fails): it is
/// given up as an error. The HTTP client sets no read timeout or TCP
/// keepalive, so this bounds how long a watch can be blind.
const OVERDUE: Duration = Duration::from_secs(30);

/// Seconds since the Unix epoch.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn watch_seconds() -> u32 {
    rand::rng().random_range(WATCH_SECONDS..=2 * WATCH_SECONDS)
}

/// What a feature does with the list: `Some(map)` when complete and
/// current, `None` when not known. Returns false to end the watch.
pub(super) trait Follower<Id, V> {
    fn publish(&mut self, list: Option<&BTreeMap<Id, V>>) -> bool;
}

/// How a watch request ended.
enum End {
    /// Its time was up: the next goes on from its resource version.
    Timeout,
    /// 410 Gone: the server no longer has its resource version.
    Gone,
    Failed(String),
    /// The feature said stop.
    Stop,
}

/// What the watch knows and has told its feature.
struct State<'a, Id, V, F> {
    labels: WatchLabels<'a>,
    metrics: &'a KubeMetrics,
    follower: &'a mut F,
    objects: BTreeMap<Id, V>,
    /// Whether the feature holds the list as current.
    current: bool,
    /// When the first change not yet handed over came.
    unpublished: Option<tokio::time::Instant>,
    /// Whether what is unpublished is a resumed watch's replay.
    resuming: bool,
}

impl<Id: Ord, V: PartialEq, F: Follower<Id, V>> State<'_, Id, V, F> {
    /// Hands the list over as current; false to stop.
    fn publish(&mut self) -> bool {
        self.unpublished = None;
        self.resuming = false;
        self.current = true;
        let m = self.metrics;
        m.synced.get(&self.labels).set(1);
        m.current_at.get(&self.labels).set(unix_now());
        m.objects.get(&self.labels).set(self.objects.len() as i64);
        self.follower.publish(Some(&self.objects))
    }

    /// The list is no longer known current; false to stop.
    fn lost(&mut self, why: &str, retry: Duration) -> bool {
        let m = self.metrics;
        m.errors.get(&self.labels).inc();
        if std::mem::take(&mut self.current) {
            m.current_at.get(&self.labels).set(unix_now());
        }
        self.unpublished = None;
        self.resuming = false;
        m.synced.get(&self.labels).set(0);
        tracing::warn!(
            watch = self.labels.watch,
            "{} watch: {why}; falling back, asking again in {retry:?}",
            self.labels.resource
        );
        self.follower.publish(None)
    }

    fn changed(&mut self) {
        self.unpublished
            .get_or_insert_with(tokio::time::Instant::now);
    }

    /// Reads one watch request's events until it ends, keeping `version`.
    async fn consume<S: Source>(
        &mut self,
        mut events: Events<S::Object>,
        overdue: tokio::time::Instant,
        version: &mut String,
        id_of: &impl Fn(&S::Object) -> Option<Id>,
        extract: &mut impl FnMut(&S::Object) -> V,
    ) -> End {
        loop {
            let (quiet, max) = if self.resuming {
                (RESUME_QUIET, RESUME_MAX)
            } else {
                (QUIET, COALESCE_MAX)
            };
            let until = match self.unpublished {
                None => overdue,
                Some(first) => (tokio::time::Instant::now() + quiet)
                    .min(first + max)
                    .min(overdue),
            };
            let next = match tokio::time::timeout_at(until, events.next()).await {
                Ok(next) => next,
                Err(_) if tokio::time::Instant::now() >= overdue => {
                    return End::Failed(
                        "the API server did not end the watch at its time: the connection is gone"
                            .into(),
                    );
                }
                Err(_) => {
                    if !self.publish() {
                        return End::Stop;
                    }
                    continue;
                }
            };
            let event = match next {
                None => return End::Timeout,
                Some(Err(e)) => return End::Failed(e.to_string()),
                Some(Ok(event)) => event,
            };
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    if let Some(v) = S::version_of(&o) {
                        v.clone_into(version);
                    }
                    let Some(id) = id_of(&o) else { continue };
                    let new = extract(&o);
                    // Most changes to an object (a pod's container states)
                    // change nothing the feature keeps: nothing to publish.
                    if self.objects.get(&id) != Some(&new) {
                        self.objects.insert(id, new);
                        self.changed();
                    }
                }
                WatchEvent::Deleted(o) => {
                    if let Some(v) = S::version_of(&o) {
                        v.clone_into(version);
                    }
                    if let Some(id) = id_of(&o)
                        && self.objects.remove(&id).is_some()
                    {
                        self.changed();
                    }
                }
                WatchEvent::Bookmark(b) => {
                    *version = b.metadata.resource_version;
                    if !self.current && !self.publish() {
                        return End::Stop;
                    }
                }
                WatchEvent::Error(status) if status.code == 410 => return End::Gone,
                WatchEvent::Error(status) => {
                    return End::Failed(format!("{} ({})", status.message, status.code));
                }
            }
        }
    }
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 410)
}

/// Watches `source` (selected by `query`) until `follower` says stop,
/// keeping `extract(object)` per `id_of(object)`.
pub(super) async fn follow<S: Source, Id: Ord, V: PartialEq>(
    source: S,
    query: Query,
    id_of: impl Fn(&S::Object) -> Option<Id>,
    mut extract: impl FnMut(&S::Object) -> V,
    labels: WatchLabels<'_>,
    metrics: &KubeMetrics,
    follower: &mut impl Follower<Id, V>,
) {
    metrics.synced.get(&labels).set(0);
    let mut state = State {
        labels,
        metrics,
        follower,
        objects: BTreeMap::new(),
        current: false,
        unpublished: None,
        resuming: false,
    };
    let mut backoff = Backoff::default();
    let mut streaming = query.streaming;
    // The resource version to go on from; none: list first.
    let mut version: Option<String> = None;
    // A streaming list's watch, going on, and when it is overdue.
    let mut listed_events: Option<(Events<S::Object>, tokio::time::Instant)> = None;
    loop {
        let Some(from) = version.as_mut() else {
            // A streaming list's watch goes on: it is overdue as any.
            let seconds = watch_seconds();
            let overdue =
                tokio::time::Instant::now() + Duration::from_secs(seconds.into()) + OVERDUE;
            let listed = if streaming {
                match source::streamed(&source, &query, seconds).await {
                    Err(ListError::NoStreaming(why)) => {
                        tracing::info!(
                            watch = labels.watch,
                            "{}: the API server does not stream lists ({why}); listing in pages",
                            labels.resource
                        );
                        streaming = false;
                        source::paged(&source, &query).await
                    }
                    Err(ListError::Failed(e)) => Err(e),
                    Ok(listed) => Ok(listed),
                }
            } else {
                source::paged(&source, &query).await
            };
            match listed {
                Ok(listed) => {
                    let m = metrics;
                    m.lists.get(&labels).inc();
                    m.list_requests
                        .get(&labels)
                        .inc_by(u64::from(listed.requests));
                    state.objects = listed
                        .objects
                        .iter()
                        .filter_map(|o| Some((id_of(o)?, extract(o))))
                        .collect();
                    if !state.publish() {
                        return;
                    }
                    version = Some(listed.version);
                    listed_events = listed.events.map(|events| (events, overdue));
                    backoff.reset();
                }
                Err(e) => {
                    let retry = backoff.next();
                    if !state.lost(&format!("list: {e}"), retry) {
                        return;
                    }
                    tokio::time::sleep(retry).await;
                }
            }
            continue;
        };
        let started = Instant::now();
        let seconds = watch_seconds();
        let overdue = tokio::time::Instant::now() + Duration::from_secs(seconds.into()) + OVERDUE;
        let (events, overdue) = match listed_events.take() {
            Some(streamed) => streamed,
            None => match source.watch(&query.watch(seconds), from).await {
                Ok(events) => {
                    if !state.current {
                        // Resumed: current again once the replay of what
                        // changed meanwhile has gone quiet.
                        metrics.resumes.get(&labels).inc();
                        state.changed();
                        state.resuming = true;
                    }
                    (events, overdue)
                }
                Err(e) if is_gone(&e) => {
                    tracing::info!(
                        watch = labels.watch,
                        "{} watch expired (410 Gone); listing again",
                        labels.resource
                    );
                    version = None;
                    continue;
                }
                Err(e) => {
                    let retry = backoff.next();
                    if !state.lost(&e.to_string(), retry) {
                        return;
                    }
                    tokio::time::sleep(retry).await;
                    continue;
                }
            },
        };
        match state
            .consume::<S>(events, overdue, from, &id_of, &mut extract)
            .await
        {
            End::Stop => return,
            End::Timeout if started.elapsed() >= SHORT_WATCH => backoff.reset(),
            End::Timeout => tokio::time::sleep(backoff.next()).await,
            End::Gone => {
                tracing::info!(
                    watch = labels.watch,
                    "{} watch expired (410 Gone); listing again",
                    labels.resource
                );
                version = None;
            }
            End::Failed(why) => {
                let retry = backoff.next();
                if !state.lost(&why, retry) {
                    return;
                }
                tokio::time::sleep(retry).await;
            }
        }
    }
}
