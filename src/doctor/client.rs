//! The queries doctor and trace send: one question, a fresh ID and source
//! port each, over UDP or TCP, with a deadline; the reply read as far as a
//! report needs (code, flags, counts, addresses, the SOA's TTL, TXT text).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::wire::build;
pub(crate) use crate::wire::rcode_name;
use crate::wire::{self, HEADER_LEN, name, read_u16, read_u32, rtype};

/// How a query is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Udp,
    Tcp,
}

/// One question.
#[derive(Debug, Clone)]
pub(crate) struct Question {
    /// Wire form of the name.
    pub name: Vec<u8>,
    pub qtype: u16,
    pub qclass: u16,
    /// Send an OPT record advertising [`build::ADVERTISED_UDP_SIZE`]; false for
    /// a plain query (replies over 512 bytes must then be truncated).
    pub edns: bool,
}

impl Question {
    pub(crate) fn new(name: &str, qtype: u16) -> Result<Question, name::BadName> {
        Ok(Question {
            name: name::from_text(name)?,
            qtype,
            qclass: wire::class::IN,
            edns: true,
        })
    }

    /// The query as nodens writes its own upstream ([`build`]): RD set,
    /// no DO or CD bit.
    fn packet(&self, id: u16) -> Vec<u8> {
        let (name, qtype, qclass) = (&self.name, self.qtype, self.qclass);
        if self.edns {
            build::query_for(id, name, qtype, qclass, false, false)
        } else {
            build::plain_query_for(id, name, qtype, qclass)
        }
    }
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub rcode: u16,
    pub truncated: bool,
    pub answers: u16,
    /// A and AAAA addresses of the answer section.
    pub addresses: Vec<IpAddr>,
    /// Targets of the answer section's CNAMEs, in text form.
    pub cnames: Vec<String>,
    /// TTL of the authority section's SOA (a negative answer's lifetime).
    pub soa_ttl: Option<u32>,
    /// The strings of the answer section's TXT records (CHAOS identity).
    pub texts: Vec<String>,
    pub size: usize,
    pub latency: Duration,
}

impl Reply {
    pub(crate) fn rcode_name(&self) -> &'static str {
        rcode_name(self.rcode)
    }

    /// The answer code, with NOERROR without records shown as NODATA.
    pub(crate) fn result_name(&self) -> &'static str {
        if self.rcode == 0 && self.answers == 0 {
            "NODATA"
        } else {
            self.rcode_name()
        }
    }
}

/// The single-threaded runtime doctor's and trace's queries run on.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

/// Why no reply was read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QueryError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Io(String),
    #[error("unreadable reply")]
    Malformed,
}

/// Sends `question` to `server` and reads its reply, within `deadline`.
pub(crate) async fn ask(
    server: SocketAddr,
    question: &Question,
    transport: Transport,
    deadline: Duration,
) -> Result<Reply, QueryError> {
    let id: u16 = rand::random();
    let packet = question.packet(id);
    let started = Instant::now();
    let exchange = async {
        match transport {
            Transport::Udp => udp(server, &packet, id).await,
            Transport::Tcp => {
                let mut stream = TcpStream::connect(server).await.map_err(io)?;
                tcp_on(&mut stream, &packet, id).await
            }
        }
    };
    let bytes = tokio::time::timeout(deadline, exchange)
        .await
        .map_err(|_| QueryError::Timeout(deadline))??;
    read_reply(&bytes, started.elapsed())
}

/// Sends `question` on an open TCP connection and reads its reply.
pub(crate) async fn ask_on(
    stream: &mut TcpStream,
    question: &Question,
    deadline: Duration,
) -> Result<Reply, QueryError> {
    let id: u16 = rand::random();
    let packet = question.packet(id);
    let started = Instant::now();
    let bytes = tokio::time::timeout(deadline, tcp_on(stream, &packet, id))
        .await
        .map_err(|_| QueryError::Timeout(deadline))??;
    read_reply(&bytes, started.elapsed())
}

fn io(e: std::io::Error) -> QueryError {
    QueryError::Io(e.to_string())
}

async fn udp(server: SocketAddr, packet: &[u8], id: u16) -> Result<Vec<u8>, QueryError> {
    let bind: SocketAddr = match server {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().unwrap(),
        SocketAddr::V6(_) => "[::]:0".parse().unwrap(),
    };
    let socket = UdpSocket::bind(bind).await.map_err(io)?;
    socket.connect(server).await.map_err(io)?;
    socket.send(packet).await.map_err(io)?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await.map_err(io)?;
        // Another ID is not our reply (a late one, or a spoof): keep waiting.
        if n >= HEADER_LEN && read_u16(&buf, 0) == id {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

async fn tcp_on(stream: &mut TcpStream, packet: &[u8], id: u16) -> Result<Vec<u8>, QueryError> {
    let mut framed = Vec::with_capacity(packet.len() + 2);
    framed.extend((packet.len() as u16).to_be_bytes());
    framed.extend(packet);
    stream.write_all(&framed).await.map_err(io)?;
    loop {
        let len = stream.read_u16().await.map_err(io)?;
        let mut buf = vec![0u8; usize::from(len)];
        stream.read_exact(&mut buf).await.map_err(io)?;
        if buf.len() >= HEADER_LEN && read_u16(&buf, 0) == id {
            return Ok(buf);
        }
    }
}

fn read_reply(msg: &[u8], latency: Duration) -> Result<Reply, QueryError> {
    let bad = |_| QueryError::Malformed;
    if msg.len() < HEADER_LEN || read_u16(msg, 4) > 1 {
        return Err(QueryError::Malformed);
    }
    let flags = read_u16(msg, 2);
    let mut reply = Reply {
        rcode: flags & 0xf,
        truncated: flags & wire::flag::TC != 0,
        answers: read_u16(msg, 6),
        addresses: Vec::new(),
        cnames: Vec::new(),
        soa_ttl: None,
        texts: Vec::new(),
        size: msg.len(),
        latency,
    };
    let mut at = HEADER_LEN;
    if read_u16(msg, 4) == 1 {
        at = name::skip(msg, at).map_err(bad)? + 4;
    }
    let sections = [read_u16(msg, 6), read_u16(msg, 8), read_u16(msg, 10)];
    for (section, count) in sections.into_iter().enumerate() {
        for _ in 0..count {
            at = name::skip(msg, at).map_err(bad)?;
            if at + 10 > msg.len() {
                return Err(QueryError::Malformed);
            }
            let (rrtype, ttl) = (read_u16(msg, at), read_u32(msg, at + 4));
            let rdata = at + 10;
            let end = rdata + usize::from(read_u16(msg, at + 8));
            if end > msg.len() {
                return Err(QueryError::Malformed);
            }
            let data = &msg[rdata..end];
            match (section, rrtype) {
                (0, rtype::A) if data.len() == 4 => reply
                    .addresses
                    .push(IpAddr::from(<[u8; 4]>::try_from(data).unwrap())),
                (0, rtype::AAAA) if data.len() == 16 => reply
                    .addresses
                    .push(IpAddr::from(<[u8; 16]>::try_from(data).unwrap())),
                (0, rtype::CNAME) => {
                    let mut target = Vec::new();
                    name::read_into(msg, rdata, &mut target).map_err(bad)?;
                    reply.cnames.push(name::to_text(&target));
                }
                (0, rtype::TXT) => reply.texts.extend(character_strings(data)),
                (1, rtype::SOA) => reply.soa_ttl = reply.soa_ttl.or(Some(ttl)),
                (2, rtype::OPT) => reply.rcode |= ((ttl >> 24) as u16) << 4,
                _ => {}
            }
            at = end;
        }
    }
    Ok(reply)
}

fn character_strings(mut data: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = data.split_first() {
        let len = usize::from(len).min(rest.len());
        out.push(String::from_utf8_lossy(&rest[..len]).into_owned());
        data = &rest[len..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_reply_with_cname_address_and_soa() {
        let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 2, 0, 1, 0, 0];
        m.extend(b"\x03www\x01t\x00\x00\x01\x00\x01");
        m.extend(b"\xc0\x0c\x00\x05\x00\x01\x00\x00\x00\x3c\x00\x04\x01x\xc0\x10");
        m.extend(b"\xc0\x23\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x0a\x00\x00\x07");
        m.extend(b"\xc0\x10\x00\x06\x00\x01\x00\x00\x00\x1e\x00\x18\xc0\x10\xc0\x10");
        m.extend([0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5]);
        let r = read_reply(&m, Duration::ZERO).unwrap();
        assert_eq!(r.cnames, ["x.t."]);
        assert_eq!(r.addresses, [IpAddr::from([10, 0, 0, 7])]);
        assert_eq!(r.soa_ttl, Some(30));
        assert_eq!(r.rcode_name(), "NOERROR");
    }

    #[test]
    fn a_plain_query_has_no_opt_record() {
        let mut q = Question::new("example.com", rtype::TXT).unwrap();
        q.edns = false;
        let p = q.packet(7);
        assert_eq!(read_u16(&p, 10), 0);
        assert_eq!(p.len(), HEADER_LEN + 13 + 4);
    }

    #[test]
    fn a_query_is_the_one_nodens_sends_upstream() {
        let q = Question::new("example.com", rtype::A).unwrap();
        let p = q.packet(7);
        let mut expected = vec![0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1];
        expected.extend(b"\x07example\x03com\x00\x00\x01\x00\x01");
        expected.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(p, expected, "RD, one question, an OPT of 1232 bytes");
    }
}
