//! Whole objects as protobuf, the encoding kube-proxy's client asks for.
//!
//! The API server encodes an object in protobuf at a fraction of JSON's
//! cost and bytes (docs/scale.md measures both), and it encodes each
//! watch event once per encoding for all watchers: reading what
//! kube-proxy reads, in the encoding it reads it, adds no encoding. kube
//! decodes JSON only, so this reads the responses itself, with
//! [`k8s_pb`]'s generated types:
//!
//! - **A list** is the magic `k8s\0` and a `runtime.Unknown` holding the
//!   list (gzip-compressed in transit like a JSON list).
//! - **A watch** is a stream of frames, each a 4-byte big-endian length
//!   and a `meta.v1.WatchEvent`, whose object is enveloped as a list is.
//!   Asked uncompressed, as kube asks its JSON watches.
//! - **An error** is a `meta.v1.Status`, enveloped, or JSON or text from
//!   something in front of the API server.

use futures_util::{StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use hyper::header::{ACCEPT, ACCEPT_ENCODING, HeaderValue};
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::WatchParams;
use kube::core::watch::{Bookmark, BookmarkMeta};
use kube::core::{Status, TypeMeta, WatchEvent};
use prost::Message;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use tokio_util::io::StreamReader;

use super::source::{Events, Page, Query, Source, list_request};

/// What starts every enveloped protobuf object.
const MAGIC: &[u8] = b"k8s\0";
/// Protobuf first; JSON from whatever cannot (an error from a proxy).
const ACCEPTED: &str = "application/vnd.kubernetes.protobuf, application/json";
/// No watch event nodens reads is near this; a larger frame is an error,
/// not an allocation.
const MAX_FRAME: usize = 16 << 20;

/// A resource read as protobuf: its message and its list's.
pub(crate) trait Proto:
    Message + Default + k8s_pb::Resource + k8s_pb::Metadata<Ty = meta::ObjectMeta> + 'static
{
    type List: Message + Default;
    fn items(list: Self::List) -> (Vec<Self>, Option<meta::ListMeta>);
}

impl Proto for k8s_pb::api::core::v1::Service {
    type List = k8s_pb::api::core::v1::ServiceList;
    fn items(list: Self::List) -> (Vec<Self>, Option<meta::ListMeta>) {
        (list.items, list.metadata)
    }
}

impl Proto for k8s_pb::api::discovery::v1::EndpointSlice {
    type List = k8s_pb::api::discovery::v1::EndpointSliceList;
    fn items(list: Self::List) -> (Vec<Self>, Option<meta::ListMeta>) {
        (list.items, list.metadata)
    }
}

/// One resource in all namespaces, as protobuf.
pub(crate) struct Protobuf<K> {
    client: kube::Client,
    url: String,
    kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Proto> Protobuf<K> {
    pub(crate) fn all(client: kube::Client) -> Self {
        let url = match K::GROUP {
            "" => format!("/api/{}/{}", K::VERSION, K::URL_PATH_SEGMENT),
            group => format!("/apis/{group}/{}/{}", K::VERSION, K::URL_PATH_SEGMENT),
        };
        Self {
            client,
            url,
            kind: std::marker::PhantomData,
        }
    }

    /// Sends `req` asking for protobuf; an answer other than 2xx is
    /// `kube::Error::Api` with the server's status.
    async fn send(
        &self,
        mut req: hyper::Request<Vec<u8>>,
    ) -> kube::Result<hyper::Response<kube::client::Body>> {
        req.headers_mut()
            .insert(ACCEPT, HeaderValue::from_static(ACCEPTED));
        let res = self.client.send(req.map(Into::into)).await?;
        if res.status().is_success() {
            return Ok(res);
        }
        let code = res.status().as_u16();
        let body = res.into_body().collect_bytes().await?;
        Err(kube::Error::Api(status(code, &body).boxed()))
    }
}

impl<K: Proto + Send> Source for Protobuf<K> {
    type Object = K;

    async fn page(&self, query: &Query, token: Option<&str>) -> kube::Result<Page<K>> {
        let req = list_request(&self.url, false, query, token)?;
        let body = self.send(req).await?.into_body().collect_bytes().await?;
        let (items, meta) = K::items(decode(&unwrap(&body)?)?);
        let meta = meta.unwrap_or_default();
        Ok(Page {
            items,
            next: meta.r#continue,
            version: meta.resource_version.unwrap_or_default(),
        })
    }

    async fn watch(&self, wp: &WatchParams, version: &str) -> kube::Result<Events<K>> {
        let mut req = kube::core::Request::new(&self.url)
            .watch(wp, version)
            .map_err(kube::Error::BuildRequest)?;
        req.headers_mut()
            .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let body = self.send(req).await?.into_body().into_data_stream();
        let codec = LengthDelimitedCodec::builder()
            .big_endian()
            .length_field_length(4)
            .max_frame_length(MAX_FRAME)
            .new_codec();
        let frames = FramedRead::new(
            StreamReader::new(body.map_err(std::io::Error::other)),
            codec,
        );
        Ok(frames
            .map(|frame| match frame {
                Ok(frame) => event(&frame),
                Err(e) => Err(kube::Error::ReadEvents(e)),
            })
            .boxed())
    }

    fn version_of(o: &K) -> Option<&str> {
        o.metadata()?.resource_version.as_deref()
    }
}

fn decode<M: Message + Default>(bytes: &[u8]) -> kube::Result<M> {
    M::decode(bytes).map_err(|e| kube::Error::Service(format!("protobuf: {e}").into()))
}

/// The object inside an envelope: the magic, then `runtime.Unknown`.
fn unwrap(body: &[u8]) -> kube::Result<Vec<u8>> {
    let Some(envelope) = body.strip_prefix(MAGIC) else {
        return Err(kube::Error::Service(
            "protobuf: the answer does not start with k8s\\0".into(),
        ));
    };
    let unknown: k8s_pb::apimachinery::pkg::runtime::Unknown = decode(envelope)?;
    Ok(unknown.raw.unwrap_or_default())
}

/// One watch frame as kube's event.
fn event<K: Proto>(frame: &[u8]) -> kube::Result<WatchEvent<K>> {
    let event: meta::WatchEvent = decode(frame)?;
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    let kind = event.r#type.unwrap_or_default();
    if kind == "ERROR" {
        return Ok(WatchEvent::Error(status(500, &raw).boxed()));
    }
    let object: K = decode(&unwrap(&raw)?)?;
    Ok(match kind.as_str() {
        "ADDED" => WatchEvent::Added(object),
        "MODIFIED" => WatchEvent::Modified(object),
        "DELETED" => WatchEvent::Deleted(object),
        "BOOKMARK" => {
            let meta = object.metadata().cloned().unwrap_or_default();
            WatchEvent::Bookmark(Bookmark {
                types: TypeMeta {
                    api_version: K::API_VERSION.into(),
                    kind: K::KIND.into(),
                },
                metadata: BookmarkMeta {
                    resource_version: meta.resource_version.unwrap_or_default(),
                    annotations: meta.annotations,
                },
            })
        }
        other => {
            return Err(kube::Error::Service(
                format!("protobuf: a watch event of type {other:?}").into(),
            ));
        }
    })
}

/// The status an error answer carries: protobuf, JSON, or the text.
fn status(code: u16, body: &[u8]) -> Status {
    if let Some(s) = unwrap(body)
        .ok()
        .and_then(|raw| decode::<meta::Status>(&raw).ok())
    {
        return Status {
            code: s.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(code),
            message: s.message.unwrap_or_default(),
            reason: s.reason.unwrap_or_default(),
            ..Status::default()
        };
    }
    serde_json::from_slice(body).unwrap_or_else(|_| Status {
        code,
        message: String::from_utf8_lossy(body).into_owned(),
        ..Status::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::core::v1::Service;
    use k8s_pb::apimachinery::pkg::runtime::{RawExtension, Unknown};

    /// `m` as the API server envelopes it.
    fn envelope(m: &impl Message) -> Vec<u8> {
        let unknown = Unknown {
            raw: Some(m.encode_to_vec()),
            ..Unknown::default()
        };
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    fn frame(kind: &str, object: Vec<u8>) -> Vec<u8> {
        meta::WatchEvent {
            r#type: Some(kind.into()),
            object: Some(RawExtension { raw: Some(object) }),
        }
        .encode_to_vec()
    }

    fn service(version: &str, annotations: &[(&str, &str)]) -> Service {
        Service {
            metadata: Some(meta::ObjectMeta {
                name: Some("web".into()),
                resource_version: Some(version.into()),
                annotations: annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..meta::ObjectMeta::default()
            }),
            ..Service::default()
        }
    }

    #[test]
    fn watch_frames_become_events() {
        let added = event::<Service>(&frame("ADDED", envelope(&service("7", &[])))).unwrap();
        assert!(
            matches!(added, WatchEvent::Added(s) if Protobuf::<Service>::version_of(&s) == Some("7"))
        );
        let end = [("k8s.io/initial-events-end", "true")];
        let bookmark = event::<Service>(&frame("BOOKMARK", envelope(&service("9", &end)))).unwrap();
        let WatchEvent::Bookmark(b) = bookmark else {
            panic!("not a bookmark: {bookmark:?}")
        };
        assert_eq!(b.metadata.resource_version, "9");
        assert_eq!(b.metadata.annotations["k8s.io/initial-events-end"], "true");
        let gone = meta::Status {
            code: Some(410),
            message: Some("too old resource version".into()),
            ..meta::Status::default()
        };
        let error = event::<Service>(&frame("ERROR", envelope(&gone))).unwrap();
        assert!(matches!(error, WatchEvent::Error(s) if s.code == 410));
        assert!(
            event::<Service>(&frame("ADDED", b"{}".to_vec())).is_err(),
            "no envelope"
        );
        assert!(event::<Service>(b"\xff\xff").is_err(), "not protobuf");
    }

    #[test]
    fn an_error_answer_keeps_its_status_whatever_its_encoding() {
        let json = br#"{"kind":"Status","code":403,"message":"forbidden: nodens"}"#;
        assert_eq!(status(403, json).message, "forbidden: nodens");
        let text = status(502, b"Bad Gateway");
        assert_eq!((text.code, text.message.as_str()), (502, "Bad Gateway"));
    }
}
