//! The DNS client of the tests: queries built and answers read with
//! hickory-proto, sent over UDP or TCP (RFC 1035 framing) to loopback.

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, Record, RecordType};

pub use hickory_proto::rr::RecordType as Rt;

use hickory_proto::rr::rdata::opt::EdnsOption;

use super::raw::question_bytes;
use super::tools::random_u64;

/// A query to build: name (case kept as given), type, ID, EDNS.
#[derive(Clone, Debug)]
pub struct Q {
    pub id: u16,
    pub name: String,
    pub qtype: RecordType,
    /// EDNS UDP size; None sends no OPT record.
    pub edns: Option<u16>,
    pub dnssec_ok: bool,
    pub checking_disabled: bool,
}

impl Q {
    /// A query with a random ID, RD set and EDNS 1232.
    pub fn new(name: &str, qtype: RecordType) -> Q {
        Q {
            id: random_u64() as u16,
            name: name.to_string(),
            qtype,
            edns: Some(1232),
            dnssec_ok: false,
            checking_disabled: false,
        }
    }
    pub fn id(mut self, id: u16) -> Q {
        self.id = id;
        self
    }
    pub fn no_edns(mut self) -> Q {
        self.edns = None;
        self
    }
    pub fn edns(mut self, size: u16) -> Q {
        self.edns = Some(size);
        self
    }
    pub fn dnssec_ok(mut self) -> Q {
        self.dnssec_ok = true;
        self
    }
    pub fn cd(mut self) -> Q {
        self.checking_disabled = true;
        self
    }

    /// The query in class CH (CHAOS), as `dig CH TXT id.server` sends it.
    pub fn chaos_bytes(&self) -> Vec<u8> {
        let mut bytes = self.to_bytes();
        // A plain name's wire form is its text form (with the final dot) plus one.
        let fqdn = self.name.trim_end_matches('.').len() + 1;
        let name_end = 12 + fqdn + 1;
        bytes[name_end + 2..name_end + 4].copy_from_slice(&3u16.to_be_bytes());
        bytes
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(self.id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .set_checking_disabled(self.checking_disabled);
        m.add_query(Query::query(
            Name::from_ascii(&self.name).expect("query name"),
            self.qtype,
        ));
        if let Some(size) = self.edns {
            let mut e = Edns::new();
            e.set_max_payload(size);
            e.set_dnssec_ok(self.dnssec_ok);
            m.set_edns(e);
        }
        m.to_vec().expect("encode query")
    }
}

/// A parsed answer with its raw bytes (for what the parser would hide: exact
/// question bytes, the OPT record, sizes).
#[derive(Clone, Debug)]
pub struct Reply {
    pub raw: Vec<u8>,
    pub msg: Message,
    pub elapsed: Duration,
}

impl Reply {
    pub fn parse(raw: Vec<u8>, elapsed: Duration) -> Reply {
        let msg = Message::from_vec(&raw)
            .unwrap_or_else(|e| panic!("unparsable reply ({e}): {raw:02x?}"));
        Reply { raw, msg, elapsed }
    }
    pub fn id(&self) -> u16 {
        self.msg.id()
    }
    /// The full RCODE (extended bits from the OPT record included).
    pub fn rcode(&self) -> u16 {
        u16::from(self.msg.response_code())
    }
    pub fn tc(&self) -> bool {
        self.msg.truncated()
    }
    /// The OPT record (EDNS), if the answer has one.
    pub fn opt(&self) -> Option<&Edns> {
        self.msg.extensions().as_ref()
    }
    /// The IPv4 addresses in the answer section.
    pub fn a(&self) -> Vec<Ipv4Addr> {
        self.msg
            .answers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect()
    }
    pub fn answers_of(&self, t: RecordType) -> Vec<&Record> {
        self.msg
            .answers()
            .iter()
            .filter(|r| r.record_type() == t)
            .collect()
    }
    pub fn ttls(&self) -> Vec<u32> {
        self.msg.answers().iter().map(|r| r.ttl()).collect()
    }
    /// The answer section as comparable text, TTLs left out.
    pub fn answer_set(&self) -> BTreeSet<String> {
        rrset_text(self.msg.answers())
    }
    pub fn authority_set(&self) -> BTreeSet<String> {
        rrset_text(self.msg.name_servers())
    }
    /// The question section exactly as sent on the wire.
    pub fn question_bytes(&self) -> Vec<u8> {
        question_bytes(&self.raw)
    }
}

fn rrset_text(records: &[Record]) -> BTreeSet<String> {
    records
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r.name().to_ascii().to_ascii_lowercase(),
                r.dns_class(),
                r.record_type(),
                r.data()
            )
        })
        .collect()
}

/// The INFO-CODEs of the Extended DNS Error options (RFC 8914, option code
/// 15) of an OPT record.
pub trait EdeCodes {
    fn ede_codes(&self) -> Vec<u16>;
}

impl EdeCodes for Edns {
    fn ede_codes(&self) -> Vec<u16> {
        self.options()
            .as_ref()
            .iter()
            .filter_map(|(_, option)| match option {
                EdnsOption::Unknown(15, data) if data.len() >= 2 => {
                    Some(u16::from_be_bytes([data[0], data[1]]))
                }
                _ => None,
            })
            .collect()
    }
}

/// The first question of a message as (lower-cased name, type), e.g. of a
/// query nodens sent to a silent upstream.
pub fn question_of(raw: &[u8]) -> Option<(String, RecordType)> {
    let m = Message::from_vec(raw).ok()?;
    let q = m.queries().first()?;
    Some((q.name().to_ascii().to_ascii_lowercase(), q.query_type()))
}

fn client_socket(server: SocketAddr) -> UdpSocket {
    let local: SocketAddr = if server.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    }
    .parse()
    .unwrap();
    UdpSocket::bind(local).unwrap()
}

/// Sends one datagram from a fresh socket and returns the first datagram
/// back, or None after `timeout`.
pub fn udp_exchange(server: SocketAddr, packet: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let sock = client_socket(server);
    sock.send_to(packet, server).ok()?;
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 65535];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match sock.recv_from(&mut buf) {
            Ok((n, from)) if from == server => return Some(buf[..n].to_vec()),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(_) => return None, // e.g. ECONNREFUSED from an ICMP error
        }
    }
}

/// [`udp_exchange`] from a socket bound to `source` (an address of the
/// namespace the caller is in): a client with an address of its own.
pub fn udp_exchange_from(
    source: IpAddr,
    server: SocketAddr,
    packet: &[u8],
    timeout: Duration,
) -> Option<Vec<u8>> {
    let sock = UdpSocket::bind(SocketAddr::new(source, 0)).unwrap();
    sock.connect(server).ok()?;
    sock.send(packet).ok()?;
    sock.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = vec![0u8; 65535];
    let n = sock.recv(&mut buf).ok()?;
    Some(buf[..n].to_vec())
}

/// A query over UDP; None on timeout.
pub fn udp_query_timeout(server: SocketAddr, q: &Q, timeout: Duration) -> Option<Reply> {
    let start = Instant::now();
    udp_exchange(server, &q.to_bytes(), timeout).map(|raw| Reply::parse(raw, start.elapsed()))
}

/// A query over UDP, answered within 5 s or the test fails.
pub fn udp_query(server: SocketAddr, q: &Q) -> Reply {
    udp_query_timeout(server, q, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no UDP answer from {server} to {q:?}"))
}

/// A single query over a fresh TCP connection.
pub fn tcp_query(server: SocketAddr, q: &Q) -> Reply {
    let start = Instant::now();
    let mut c = Tcp::connect(server);
    c.send(&q.to_bytes()).expect("TCP send");
    match c.recv(Duration::from_secs(5)) {
        TcpRead::Msg(raw) => Reply::parse(raw, start.elapsed()),
        other => panic!("no TCP answer from {server} to {q:?}: {other:?}"),
    }
}

/// A single query over a fresh TCP connection; None when the connection is
/// refused or closed, or no answer comes within `timeout`.
pub fn tcp_query_timeout(server: SocketAddr, q: &Q, timeout: Duration) -> Option<Reply> {
    let start = Instant::now();
    let stream = TcpStream::connect_timeout(&server, timeout).ok()?;
    stream.set_nodelay(true).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    let mut c = Tcp {
        stream,
        buf: Vec::new(),
    };
    c.send(&q.to_bytes()).ok()?;
    match c.recv(timeout) {
        TcpRead::Msg(raw) => Some(Reply::parse(raw, start.elapsed())),
        TcpRead::Closed | TcpRead::Timeout => None,
    }
}

/// Takes one RFC 1035 length-framed message off the front of `buf`, if a
/// whole one is there.
pub fn take_frame(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let len = usize::from(u16::from_be_bytes([*buf.first()?, *buf.get(1)?]));
    if buf.len() < 2 + len {
        return None;
    }
    Some(buf.drain(..2 + len).skip(2).collect())
}

/// What reading a TCP DNS connection gave.
#[derive(Debug)]
pub enum TcpRead {
    Msg(Vec<u8>),
    /// EOF or reset: the server closed the connection.
    Closed,
    Timeout,
}

/// A client TCP connection with RFC 1035 two-byte length framing.
pub struct Tcp {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Tcp {
    pub fn connect(server: SocketAddr) -> Tcp {
        let stream = TcpStream::connect_timeout(&server, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("connect {server}: {e}"));
        stream.set_nodelay(true).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Tcp {
            stream,
            buf: Vec::new(),
        }
    }

    /// A connection from `source` (an address of the test's own range), or
    /// None when the server refuses or does not accept within 2 s.
    pub fn connect_from(source: std::net::IpAddr, server: SocketAddr) -> Option<Tcp> {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::for_address(server), Type::STREAM, None).ok()?;
        socket.bind(&SocketAddr::new(source, 0).into()).ok()?;
        socket
            .connect_timeout(&server.into(), Duration::from_secs(2))
            .ok()?;
        let stream: TcpStream = socket.into();
        stream.set_nodelay(true).ok()?;
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .ok()?;
        Some(Tcp {
            stream,
            buf: Vec::new(),
        })
    }

    /// Sends one framed message.
    pub fn send(&mut self, msg: &[u8]) -> std::io::Result<()> {
        let mut framed = (msg.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(msg);
        self.stream.write_all(&framed)
    }

    /// Sends bytes as they are (several frames in one write, broken frames).
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// The next framed message, waiting up to `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> TcpRead {
        let deadline = Instant::now() + timeout;
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(msg) = take_frame(&mut self.buf) {
                return TcpRead::Msg(msg);
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return TcpRead::Timeout;
            };
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match self.stream.read(&mut chunk) {
                Ok(0) => return TcpRead::Closed,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return TcpRead::Timeout;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return TcpRead::Closed,
            }
        }
    }

    /// Waits for the server to close the connection; returns how long it took,
    /// or None if it is still open after `timeout`. Messages are discarded.
    pub fn wait_closed(&mut self, timeout: Duration) -> Option<Duration> {
        let start = Instant::now();
        loop {
            let left = timeout.checked_sub(start.elapsed())?;
            match self.recv(left) {
                TcpRead::Closed => return Some(start.elapsed()),
                TcpRead::Timeout => return None,
                TcpRead::Msg(_) => continue,
            }
        }
    }
}

pub fn ipv4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
