//! What the request path hands the query log: a fixed-size [`Record`],
//! taken from the query and its reply at the point where the reply is
//! counted. Taking one copies bytes and nothing else: no allocation, no
//! formatting, no system call.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::answered::{Event, Source};
use crate::cache::key::NameBuf;
use crate::listen::Proto;
use crate::wire::{HEADER_LEN, rcode, read_u16};

/// One query log line, before it is formatted.
pub(crate) struct Record {
    /// The zone's name; `None` for a query that reached no zone.
    pub(crate) zone: Option<Arc<str>>,
    pub(crate) client: SocketAddr,
    /// When the query arrived (the writer turns it into wall-clock time).
    pub(crate) started: Instant,
    pub(crate) duration: Duration,
    /// The question name in wire form, in the client's case.
    pub(crate) name: NameBuf,
    pub(crate) name_len: u8,
    pub(crate) id: u16,
    pub(crate) qtype: u16,
    pub(crate) qclass: u16,
    pub(crate) proto: Proto,
    /// The query's size in bytes.
    pub(crate) size: u16,
    pub(crate) dnssec_ok: bool,
    /// The client's UDP payload size (CoreDNS's `bufsize`).
    pub(crate) bufsize: u16,
    pub(crate) rcode: u16,
    /// The reply's header flags (bytes 2 and 3).
    pub(crate) flags: u16,
    pub(crate) rsize: u32,
    pub(crate) source: Source,
}

impl Record {
    #[inline]
    pub(crate) fn take(zone: Option<Arc<str>>, event: &Event<'_>) -> Record {
        let Event {
            answered,
            proto,
            rcode,
            seconds,
        } = *event;
        let query = answered.query;
        let wire = query.name();
        let mut name: NameBuf = [0; 255];
        let name_len = wire.len().min(name.len());
        name[..name_len].copy_from_slice(&wire[..name_len]);
        let bufsize = match proto {
            Proto::Tcp => u16::MAX,
            Proto::Udp => query.edns.map_or(512, |e| e.udp_size),
        };
        let reply = answered.reply;
        Record {
            zone,
            client: answered.client,
            started: answered.started,
            duration: Duration::from_secs_f64(seconds.max(0.0)),
            name,
            name_len: name_len as u8,
            id: query.id,
            qtype: query.qtype,
            qclass: query.qclass,
            proto,
            size: query.packet.len().min(u16::MAX as usize) as u16,
            dnssec_ok: query.dnssec_ok(),
            bufsize,
            rcode,
            flags: if reply.len() >= HEADER_LEN {
                read_u16(reply, 2)
            } else {
                0
            },
            rsize: reply.len() as u32,
            source: answered.source,
        }
    }

    pub(crate) fn name(&self) -> &[u8] {
        &self.name[..usize::from(self.name_len)]
    }
}

/// CoreDNS's response class of a reply, as a bit of a zone's class mask:
/// success 1 (NOERROR with answers), denial 2 (NXDOMAIN, NODATA), error 4.
/// A referral (NOERROR, no answer, NS records) counts as denial here;
/// CoreDNS calls it success.
#[inline]
pub(crate) fn class_bit(code: u16, reply: &[u8]) -> u8 {
    match code {
        rcode::NOERROR => {
            let answers = reply.len() >= HEADER_LEN && read_u16(reply, 6) > 0;
            if answers { 1 } else { 2 }
        }
        rcode::NXDOMAIN => 2,
        _ => 4,
    }
}
