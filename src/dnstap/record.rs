//! What the request path hands dnstap: a fixed-size [`Record`] of one
//! exchange (a query and its reply), taken where the reply is counted or
//! where an upstream answered. Taking one copies bytes and nothing else:
//! the two messages go in an inline buffer; only a pair longer than it
//! (rare: a large TCP answer) is boxed.

use std::net::SocketAddr;
use std::time::Instant;

use crate::listen::Proto;

/// Bytes of query and reply held inline. 1 KiB holds the usual cluster
/// exchange (a query of 50-100 bytes, a reply of a few hundred).
const INLINE: usize = 1024 - 32;

/// Whose exchange: a client's with nodens, or nodens's with an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Forwarder,
}

/// How an exchange travelled: dnstap's `SocketProtocol`. The listeners
/// speak UDP and TCP; an upstream may be asked over TLS as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carrier {
    Udp,
    Tcp,
    Dot,
}

impl From<Proto> for Carrier {
    fn from(proto: Proto) -> Carrier {
        match proto {
            Proto::Udp => Carrier::Udp,
            Proto::Tcp => Carrier::Tcp,
        }
    }
}

/// One exchange, before it is encoded as two dnstap messages.
pub(crate) struct Record {
    pub(crate) side: Side,
    pub(crate) proto: Carrier,
    /// The side that asked: the client (client side); none known for
    /// nodens's own socket (forwarder side).
    pub(crate) asker: Option<SocketAddr>,
    /// The side that answered: the listener (client side), the upstream
    /// (forwarder side).
    pub(crate) answerer: SocketAddr,
    pub(crate) asked: Instant,
    pub(crate) answered: Instant,
    messages: Messages,
}

// Inline on purpose: boxing the usual case is the allocation per query
// this record exists to avoid.
#[expect(clippy::large_enum_variant)]
enum Messages {
    /// Not sent (`full = false`).
    None,
    Inline {
        bytes: [u8; INLINE],
        query: u16,
        reply: u16,
    },
    Boxed {
        bytes: Box<[u8]>,
        query: usize,
    },
}

impl Record {
    /// `messages`: the query and the reply, when they are sent.
    #[inline]
    pub(crate) fn take(
        side: Side,
        proto: Carrier,
        asker: Option<SocketAddr>,
        answerer: SocketAddr,
        asked: Instant,
        answered: Instant,
        messages: Option<(&[u8], &[u8])>,
    ) -> Record {
        let messages = match messages {
            None => Messages::None,
            Some((query, reply)) if query.len() + reply.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..query.len()].copy_from_slice(query);
                bytes[query.len()..query.len() + reply.len()].copy_from_slice(reply);
                Messages::Inline {
                    bytes,
                    query: query.len() as u16,
                    reply: reply.len() as u16,
                }
            }
            Some((query, reply)) => Messages::Boxed {
                bytes: [query, reply].concat().into(),
                query: query.len(),
            },
        };
        Record {
            side,
            proto,
            asker,
            answerer,
            asked,
            answered,
            messages,
        }
    }

    /// The query and the reply, when they are sent.
    pub(crate) fn messages(&self) -> Option<(&[u8], &[u8])> {
        match &self.messages {
            Messages::None => None,
            Messages::Inline {
                bytes,
                query,
                reply,
            } => {
                let (q, r) = (usize::from(*query), usize::from(*reply));
                Some((&bytes[..q], &bytes[q..q + r]))
            }
            Messages::Boxed { bytes, query } => Some(bytes.split_at(*query)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_back_inline_or_boxed() {
        let at = Instant::now();
        let addr: SocketAddr = "10.0.0.1:53".parse().unwrap();
        let take = |m| Record::take(Side::Client, Carrier::Udp, None, addr, at, at, m);
        assert!(take(None).messages().is_none());
        let (q, r) = (vec![1u8; 40], vec![2u8; 300]);
        assert_eq!(take(Some((&q, &r))).messages(), Some((&q[..], &r[..])));
        let big = vec![3u8; 4000];
        let record = take(Some((&q, &big)));
        assert!(matches!(record.messages, Messages::Boxed { .. }));
        assert_eq!(record.messages(), Some((&q[..], &big[..])));
    }
}
