//! How a watch reads its resource from the API: whole objects or metadata
//! only, as JSON through kube (here) or as protobuf (`protobuf.rs`), with
//! its selectors, listed in pages or streamed.
//!
//! A list comes one of two ways. By default, in pages from the API
//! server's watch cache (`resourceVersion=0`, as kube-proxy's informers
//! ask), gzip-compressed; servers before 1.34 ignore the page size for
//! lists from their cache, 1.34 and later page them. With
//! `[kubernetes] streaming_lists`, a streaming list first
//! (`sendInitialEvents`, the API's WatchList): one watch request that
//! sends the objects as events and then a bookmark saying the list is
//! whole, never the whole list as one response, but uncompressed before
//! 1.37 (docs/scale.md measures both). Servers that do not serve it (the
//! `WatchList` feature gate off, as in 1.33 by default, or storage without
//! progress notifications) refuse it at once, and the watch lists in pages.

use std::fmt::Debug;

use futures_util::stream::{BoxStream, StreamExt};
use kube::Resource;
use kube::api::{ListParams, ObjectList, PartialObjectMeta, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;

/// The annotation of the bookmark that ends a streaming list's objects.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Selectors and page size of a watch.
#[derive(Clone, Debug, Default)]
pub(crate) struct Query {
    pub(crate) labels: Option<String>,
    pub(crate) fields: Option<String>,
    /// Objects per list page (0: the API's default).
    pub(crate) page: u32,
    /// Whether a list is asked as a streaming list first.
    pub(crate) streaming: bool,
}

impl Query {
    /// A watch's parameters: bookmarks on, ending after `timeout` seconds.
    pub(super) fn watch(&self, timeout: u32) -> WatchParams {
        let mut wp = WatchParams::default().timeout(timeout);
        wp.label_selector.clone_from(&self.labels);
        wp.field_selector.clone_from(&self.fields);
        wp
    }
}

/// The events of one watch request.
pub(super) type Events<O> = BoxStream<'static, kube::Result<WatchEvent<O>>>;

/// One page of a list.
pub(crate) struct Page<O> {
    pub(crate) items: Vec<O>,
    /// The token of the next page; none on the last.
    pub(crate) next: Option<String>,
    pub(crate) version: String,
}

/// One resource of the API, as a watch reads it.
pub(crate) trait Source: Send + Sync {
    type Object: Send + 'static;

    /// One page of a list (`token`: the one the last page gave).
    fn page(
        &self,
        query: &Query,
        token: Option<&str>,
    ) -> impl Future<Output = kube::Result<Page<Self::Object>>> + Send;

    fn watch(
        &self,
        wp: &WatchParams,
        version: &str,
    ) -> impl Future<Output = kube::Result<Events<Self::Object>>> + Send;

    /// An object's resource version.
    fn version_of(o: &Self::Object) -> Option<&str>;
}

/// Whole objects, as JSON.
pub(crate) struct Objects<K>(pub(crate) kube::Api<K>);

impl<K> Source for Objects<K>
where
    K: Resource + DeserializeOwned + Clone + Debug + Send + Sync + 'static,
{
    type Object = K;

    async fn page(&self, query: &Query, token: Option<&str>) -> kube::Result<Page<K>> {
        let req = list_request(self.0.resource_url(), false, query, token)?;
        json_page(&self.0.clone().into_client(), req).await
    }

    async fn watch(&self, wp: &WatchParams, version: &str) -> kube::Result<Events<K>> {
        Ok(self.0.watch(wp, version).await?.boxed())
    }

    fn version_of(o: &K) -> Option<&str> {
        o.meta().resource_version.as_deref()
    }
}

/// Metadata only: the API server sends names, labels and versions, not
/// whole objects.
pub(crate) struct Metadata<K>(pub(crate) kube::Api<K>);

impl<K> Source for Metadata<K>
where
    K: Resource + DeserializeOwned + Clone + Debug + Send + Sync + 'static,
{
    type Object = PartialObjectMeta<K>;

    async fn page(&self, query: &Query, token: Option<&str>) -> kube::Result<Page<Self::Object>> {
        let req = list_request(self.0.resource_url(), true, query, token)?;
        json_page(&self.0.clone().into_client(), req).await
    }

    async fn watch(&self, wp: &WatchParams, version: &str) -> kube::Result<Events<Self::Object>> {
        Ok(self.0.watch_metadata(wp, version).await?.boxed())
    }

    fn version_of(o: &Self::Object) -> Option<&str> {
        o.metadata.resource_version.as_deref()
    }
}

async fn json_page<O: DeserializeOwned + Clone>(
    client: &kube::Client,
    req: hyper::Request<Vec<u8>>,
) -> kube::Result<Page<O>> {
    let list: ObjectList<O> = client.request(req).await?;
    Ok(Page {
        items: list.items,
        next: list.metadata.continue_,
        version: list.metadata.resource_version.unwrap_or_default(),
    })
}

/// A whole list: its objects and the resource version to watch from.
pub(super) struct Listed<O> {
    pub(super) objects: Vec<O>,
    pub(super) version: String,
    /// The watch that streamed it, going on from the list's end.
    pub(super) events: Option<Events<O>>,
    /// Requests it took (pages, or the one stream).
    pub(super) requests: u32,
}

/// Why a list failed.
pub(super) enum ListError {
    /// The server does not serve streaming lists: take a paged one.
    NoStreaming(String),
    Failed(kube::Error),
}

/// The request for one page of a list from the API server's watch cache:
/// `resourceVersion=0` and the page size, as client-go's reflector (and so
/// kube-proxy) asks. (kube's `ListParams` leaves the version out when a
/// limit is set, which makes the list a quorum read from etcd.) A page
/// after the first goes on from the token the last one gave.
pub(super) fn list_request(
    url: &str,
    metadata: bool,
    query: &Query,
    token: Option<&str>,
) -> kube::Result<hyper::Request<Vec<u8>>> {
    let mut lp = ListParams::default();
    if query.page > 0 {
        lp = lp.limit(query.page);
    }
    lp.label_selector.clone_from(&query.labels);
    lp.field_selector.clone_from(&query.fields);
    lp.continue_token = token.map(str::to_string);
    let request = kube::core::Request::new(url);
    let mut req = if metadata {
        request.list_metadata(&lp)
    } else {
        request.list(&lp)
    }
    .map_err(kube::Error::BuildRequest)?;
    if token.is_none() {
        let sep = if req.uri().query().is_some() {
            '&'
        } else {
            '?'
        };
        let uri = format!("{}{sep}resourceVersion=0", req.uri());
        *req.uri_mut() = uri.parse().map_err(|e| kube::Error::Service(Box::new(e)))?;
    }
    Ok(req)
}

/// A paged list from the API server's watch cache.
pub(super) async fn paged<S: Source>(source: &S, query: &Query) -> kube::Result<Listed<S::Object>> {
    let mut objects = Vec::new();
    let mut token: Option<String> = None;
    let mut requests = 0;
    loop {
        let page = source.page(query, token.as_deref()).await?;
        requests += 1;
        objects.extend(page.items);
        token = page.next.filter(|c| !c.is_empty());
        if token.is_none() {
            return Ok(Listed {
                objects,
                version: page.version,
                events: None,
                requests,
            });
        }
    }
}

/// A streaming list, served from the watch cache (`resourceVersion=0`):
/// the objects up to the bookmark that ends them, and the watch going on.
pub(super) async fn streamed<S: Source>(
    source: &S,
    query: &Query,
    timeout: u32,
) -> Result<Listed<S::Object>, ListError> {
    let wp = query.watch(timeout).initial_events();
    let mut events = match source.watch(&wp, "0").await {
        Ok(events) => events,
        Err(kube::Error::Api(status)) if refuses_streaming(status.code) => {
            return Err(ListError::NoStreaming(status.message.clone()));
        }
        Err(e) => return Err(ListError::Failed(e)),
    };
    let mut objects = Vec::new();
    loop {
        match events.next().await {
            Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => objects.push(o),
            Some(Ok(WatchEvent::Deleted(_))) => {}
            Some(Ok(WatchEvent::Bookmark(b))) => {
                if b.metadata
                    .annotations
                    .get(INITIAL_EVENTS_END)
                    .map(String::as_str)
                    == Some("true")
                {
                    return Ok(Listed {
                        objects,
                        version: b.metadata.resource_version,
                        events: Some(events),
                        requests: 1,
                    });
                }
            }
            // A server whose storage cannot stream says so in the stream.
            Some(Ok(WatchEvent::Error(status))) if objects.is_empty() && status.code != 410 => {
                return Err(ListError::NoStreaming(status.message.clone()));
            }
            Some(Ok(WatchEvent::Error(status))) => {
                return Err(ListError::Failed(kube::Error::Api(status)));
            }
            Some(Err(e)) => return Err(ListError::Failed(e)),
            None => {
                return Err(ListError::Failed(kube::Error::Service(
                    "the streaming list ended before its end bookmark".into(),
                )));
            }
        }
    }
}

/// The codes a server that does not stream lists answers with: 422 (the
/// `WatchList` gate off) or 400 (an older server's validation).
fn refuses_streaming(code: u16) -> bool {
    matches!(code, 400 | 422)
}
