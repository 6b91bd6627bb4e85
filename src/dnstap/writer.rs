//! dnstap's writer: encodes each record its queue's thread takes
//! (`answered::queue`) as two dnstap messages and writes them to the reader
//! in batches. While no reader is connected it still empties the queue,
//! dropping and counting (`no_reader`), and tries to connect again with a
//! growing pause.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message as _;

use super::Counters;
use super::config::DnstapPlan;
use super::fstrm;
use super::proto::{self, Dnstap, Message, MessageType};
use super::record::{Carrier, Record, Side};
use crate::answered::queue::Writer;
use crate::search::Clients;

/// Bytes gathered before a write.
const BATCH: usize = 64 * 1024;
/// Each read and write to the reader, and the handshake, at most: a reader
/// that stops reading for longer is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause after a failed connection, doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// dnstap's [`Writer`]: encodes each record as two messages into a batch
/// of frames for the reader.
pub(super) struct Frames {
    link: Link,
    clients: Arc<Clients>,
    clock: Clock,
    payload: Vec<u8>,
}

impl Frames {
    pub(super) fn new(plan: DnstapPlan, clients: Arc<Clients>, counters: Counters) -> Frames {
        Frames {
            link: Link {
                plan,
                writer: None,
                next_try: Instant::now(),
                pause: FIRST_PAUSE,
                connected_before: false,
                batch: Vec::with_capacity(BATCH * 2),
                pending: 0,
                counters,
            },
            clients,
            clock: Clock::now(),
            payload: Vec::with_capacity(1024),
        }
    }
}

impl Writer<Record> for Frames {
    fn take(&mut self, record: Record) -> bool {
        let link = &mut self.link;
        if !link.connected() {
            link.counters.dropped_no_reader.inc_by(2);
            return false;
        }
        let extra = self.clients.with_pod(record_client(&record), |pod| {
            pod.map(|(ns, name)| format!("pod={ns}/{name}").into_bytes())
        });
        for message in messages(&record, &self.clock) {
            let tap = Dnstap {
                identity: Some(link.plan.identity.clone().into_bytes()),
                version: Some(link.plan.version.clone().into_bytes()),
                extra: extra.clone(),
                message: Some(message),
                r#type: proto::MESSAGE,
            };
            self.payload.clear();
            tap.encode(&mut self.payload).expect("a Vec grows");
            fstrm::push_frame(&mut link.batch, &self.payload);
            link.pending += 1;
        }
        link.batch.len() >= BATCH
    }

    fn flush(&mut self) {
        self.link.flush();
        self.clock = Clock::now();
    }

    /// Ends the stream: STOP, then the reader's FINISH.
    fn finish(&mut self) {
        if let Some(writer) = self.link.writer.take() {
            writer.finish();
        }
    }
}

/// The connection to the reader, and the frames not yet written to it.
struct Link {
    plan: DnstapPlan,
    writer: Option<fstrm::Writer>,
    next_try: Instant,
    pause: Duration,
    connected_before: bool,
    batch: Vec<u8>,
    /// Messages in `batch`.
    pending: u64,
    counters: Counters,
}

impl Link {
    /// Whether a reader is connected, connecting if it is time to try.
    fn connected(&mut self) -> bool {
        if self.writer.is_some() {
            return true;
        }
        let now = Instant::now();
        if now < self.next_try {
            return false;
        }
        match fstrm::Writer::connect(&self.plan.socket, IO_TIMEOUT, self.plan.reader_uid) {
            Ok(writer) => {
                if self.connected_before {
                    self.counters.reconnects.inc();
                }
                tracing::info!(socket = %self.plan.socket, "dnstap: connected to the reader");
                self.connected_before = true;
                self.pause = FIRST_PAUSE;
                self.writer = Some(writer);
                true
            }
            Err(e) => {
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    // Someone listens who must not read the node's queries:
                    // said at each try (they back off to MAX_PAUSE).
                    tracing::warn!(socket = %self.plan.socket, "dnstap: reader refused: {e}");
                } else {
                    tracing::debug!(socket = %self.plan.socket, "dnstap: no reader: {e}");
                }
                self.next_try = Instant::now() + self.pause;
                self.pause = (self.pause * 2).min(MAX_PAUSE);
                false
            }
        }
    }

    /// Writes the batch; a failed write drops the connection and counts
    /// the batch's messages as dropped.
    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let written = match &mut self.writer {
            Some(writer) => match writer.write(&self.batch) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(socket = %self.plan.socket, "dnstap: reader lost: {e}");
                    false
                }
            },
            None => false,
        };
        if written {
            self.counters.sent.inc_by(self.pending);
        } else {
            self.writer = None;
            self.next_try = Instant::now() + self.pause;
            self.counters.dropped_no_reader.inc_by(self.pending);
        }
        self.batch.clear();
        self.pending = 0;
    }
}

/// The client of a record's exchange, whose pod is named in `extra`.
fn record_client(record: &Record) -> IpAddr {
    match (record.side, record.asker) {
        (Side::Client, Some(addr)) => addr.ip(),
        // No pod is named for nodens's own queries.
        _ => IpAddr::from([0, 0, 0, 0]),
    }
}

/// The query and the response messages of a record.
fn messages(record: &Record, clock: &Clock) -> [Message; 2] {
    let (query_type, response_type) = match record.side {
        Side::Client => (MessageType::ClientQuery, MessageType::ClientResponse),
        Side::Forwarder => (MessageType::ForwarderQuery, MessageType::ForwarderResponse),
    };
    let (asked_sec, asked_nsec) = clock.wall(record.asked);
    let (answered_sec, answered_nsec) = clock.wall(record.answered);
    let family = if record.answerer.is_ipv4() {
        proto::INET
    } else {
        proto::INET6
    };
    let protocol = match record.proto {
        Carrier::Udp => proto::UDP,
        Carrier::Tcp => proto::TCP,
        Carrier::Dot => proto::DOT,
    };
    let base = Message {
        r#type: 0,
        socket_family: Some(family),
        socket_protocol: Some(protocol),
        query_address: record.asker.map(|a| address(a.ip())),
        response_address: Some(address(record.answerer.ip())),
        query_port: record.asker.map(|a| u32::from(a.port())),
        response_port: Some(u32::from(record.answerer.port())),
        query_time_sec: Some(asked_sec),
        query_time_nsec: Some(asked_nsec),
        ..Message::default()
    };
    let (query, reply) = record.messages().unzip();
    let query_message = Message {
        r#type: query_type as i32,
        query_message: query.map(<[u8]>::to_vec),
        ..base.clone()
    };
    let response_message = Message {
        r#type: response_type as i32,
        response_time_sec: Some(answered_sec),
        response_time_nsec: Some(answered_nsec),
        response_message: reply.map(<[u8]>::to_vec),
        ..base
    };
    [query_message, response_message]
}

/// An address as dnstap carries it: 4 or 16 bytes (an IPv4-mapped IPv6
/// client as its IPv4 address, as the socket family says).
fn address(ip: IpAddr) -> Vec<u8> {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// Wall-clock time for the records' monotonic instants, read once per
/// batch.
struct Clock {
    now: Instant,
    wall: SystemTime,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            now: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// Seconds and nanoseconds since the epoch of `at`.
    fn wall(&self, at: Instant) -> (u64, u32) {
        let wall = match at.checked_duration_since(self.now) {
            Some(after) => self.wall + after,
            None => self.wall - self.now.duration_since(at),
        };
        let since = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
        (since.as_secs(), since.subsec_nanos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn a_client_record_is_a_query_and_a_response() {
        let clock = Clock::now();
        let client: SocketAddr = "10.1.2.3:40000".parse().unwrap();
        let listener: SocketAddr = "169.254.20.10:53".parse().unwrap();
        let asked = clock.now;
        let answered = asked + Duration::from_micros(150);
        let record = Record::take(
            Side::Client,
            Carrier::Udp,
            Some(client),
            listener,
            asked,
            answered,
            Some((b"query", b"reply")),
        );
        let [q, r] = messages(&record, &clock);
        assert_eq!(q.r#type, MessageType::ClientQuery as i32);
        assert_eq!(r.r#type, MessageType::ClientResponse as i32);
        assert_eq!(q.query_address, Some(vec![10, 1, 2, 3]));
        assert_eq!(q.query_port, Some(40000));
        assert_eq!(r.response_address, Some(vec![169, 254, 20, 10]));
        assert_eq!(q.query_message.as_deref(), Some(&b"query"[..]));
        assert_eq!(q.response_message, None);
        assert_eq!(r.response_message.as_deref(), Some(&b"reply"[..]));
        let took = (r.response_time_sec.unwrap() * 1_000_000_000
            + u64::from(r.response_time_nsec.unwrap()))
            - (q.query_time_sec.unwrap() * 1_000_000_000 + u64::from(q.query_time_nsec.unwrap()));
        assert_eq!(took, 150_000);
        assert_eq!(r.socket_family, Some(proto::INET));
        assert_eq!(r.socket_protocol, Some(proto::UDP));
    }

    #[test]
    fn an_exchange_over_tls_is_marked_dot() {
        let clock = Clock::now();
        let upstream: SocketAddr = "[2001:db8::53]:853".parse().unwrap();
        let record = Record::take(
            Side::Forwarder,
            Carrier::Dot,
            None,
            upstream,
            clock.now,
            clock.now,
            None,
        );
        let [q, r] = messages(&record, &clock);
        assert_eq!(q.r#type, MessageType::ForwarderQuery as i32);
        assert_eq!(
            (q.socket_protocol, r.socket_protocol),
            (Some(proto::DOT), Some(proto::DOT))
        );
        assert_eq!(r.socket_family, Some(proto::INET6));
    }
}
