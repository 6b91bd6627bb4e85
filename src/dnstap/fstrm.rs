//! Frame Streams, the writer's side of the bidirectional handshake (as
//! CoreDNS, unbound and dnsdist speak it to a dnstap reader): READY with
//! the content type, the reader's ACCEPT, START; then data frames (a
//! 4-byte big-endian length and the payload); STOP and the reader's FINISH
//! at the end. Small enough to write here: no Rust crate for it is kept
//! up.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::config::DnstapSocket;

/// dnstap's content type.
pub(super) const CONTENT_TYPE: &[u8] = b"protobuf:dnstap.Dnstap";

const ACCEPT: u32 = 1;
const START: u32 = 2;
const STOP: u32 = 3;
const READY: u32 = 4;
const FINISH: u32 = 5;
const FIELD_CONTENT_TYPE: u32 = 1;
/// A control frame longer than this is not one we asked for.
const MAX_CONTROL: u32 = 512;

/// A stream to a reader that accepted dnstap.
pub(super) struct Writer {
    stream: Stream,
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn connect(
        socket: &DnstapSocket,
        timeout: Duration,
        reader_uid: Option<u32>,
    ) -> io::Result<Stream> {
        let stream = match socket {
            DnstapSocket::Unix(path) => Stream::Unix(connect_unix(path, timeout, reader_uid)?),
            DnstapSocket::Tcp(addr) => {
                let s = TcpStream::connect_timeout(addr, timeout)?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
        };
        match &stream {
            Stream::Unix(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
            }
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
            }
        }
        Ok(stream)
    }

    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Unix(s) => s,
            Stream::Tcp(s) => s,
        }
    }
}

/// Connects to the Unix socket at `path` within `timeout` (a listener
/// that never accepts fills its backlog, and a blocking connect would then
/// wedge the writer), and checks who listens: root, nodens's uid or
/// `reader_uid`, no one else.
fn connect_unix(
    path: &std::path::Path,
    timeout: Duration,
    reader_uid: Option<u32>,
) -> io::Result<UnixStream> {
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.connect_timeout(&socket2::SockAddr::unix(path)?, timeout)?;
    let stream: UnixStream = socket.into();
    let creds = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(io::Error::from)?;
    let own = crate::trust::own_uid();
    if creds.uid() != 0 && creds.uid() != own && Some(creds.uid()) != reader_uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the reader at {} (pid {}) runs as uid {}, not root, nodens's uid {own} or dnstap.reader_uid",
                path.display(),
                creds.pid(),
                creds.uid()
            ),
        ));
    }
    Ok(stream)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

impl Writer {
    /// Connects and shakes hands. `timeout` bounds each read and write,
    /// here and after: a reader that stops reading for that long is
    /// dropped (and reconnected to later).
    pub(super) fn connect(
        socket: &DnstapSocket,
        timeout: Duration,
        reader_uid: Option<u32>,
    ) -> io::Result<Writer> {
        let mut stream = Stream::connect(socket, timeout, reader_uid)?;
        let io = stream.io();
        io.write_all(&control(READY, true))?;
        let (kind, types) = read_control(io)?;
        if kind != ACCEPT {
            return Err(bad(format!("control frame {kind} where ACCEPT was due")));
        }
        // A reader lists the types it accepts; none listed: any.
        if !types.is_empty() && !types.iter().any(|t| t == CONTENT_TYPE) {
            return Err(bad(
                "the reader does not accept protobuf:dnstap.Dnstap".into()
            ));
        }
        io.write_all(&control(START, true))?;
        Ok(Writer { stream })
    }

    /// Writes `frames`: data frames, each already with its length.
    pub(super) fn write(&mut self, frames: &[u8]) -> io::Result<()> {
        self.stream.io().write_all(frames)
    }

    /// STOP, and whether the reader answered FINISH within the timeout.
    pub(super) fn finish(mut self) -> bool {
        let io = self.stream.io();
        io.write_all(&control(STOP, false)).is_ok() && matches!(read_control(io), Ok((FINISH, _)))
    }
}

/// Appends one data frame: the length, then the payload.
pub(super) fn push_frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

/// A control frame: the escape (a zero length), its length, its type and,
/// with `content_type`, dnstap's content type field.
fn control(kind: u32, content_type: bool) -> Vec<u8> {
    let mut body = kind.to_be_bytes().to_vec();
    if content_type {
        body.extend_from_slice(&FIELD_CONTENT_TYPE.to_be_bytes());
        body.extend_from_slice(&(CONTENT_TYPE.len() as u32).to_be_bytes());
        body.extend_from_slice(CONTENT_TYPE);
    }
    let mut frame = 0u32.to_be_bytes().to_vec();
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Reads one control frame: its type and the content types it names.
fn read_control(io: &mut dyn ReadWrite) -> io::Result<(u32, Vec<Vec<u8>>)> {
    let escape = read_u32(io)?;
    if escape != 0 {
        return Err(bad("a data frame where a control frame was due".into()));
    }
    let len = read_u32(io)?;
    if !(4..=MAX_CONTROL).contains(&len) {
        return Err(bad(format!("a control frame of {len} bytes")));
    }
    let mut body = vec![0; len as usize];
    io.read_exact(&mut body)?;
    let kind = u32::from_be_bytes(body[..4].try_into().expect("4 bytes"));
    let mut types = Vec::new();
    let mut rest = &body[4..];
    while rest.len() >= 8 {
        let field = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes"));
        let flen = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes")) as usize;
        let value = rest
            .get(8..8 + flen)
            .ok_or_else(|| bad("a short field".into()))?;
        if field == FIELD_CONTENT_TYPE {
            types.push(value.to_vec());
        }
        rest = &rest[8 + flen..];
    }
    Ok((kind, types))
}

fn read_u32(io: &mut dyn ReadWrite) -> io::Result<u32> {
    let mut b = [0; 4];
    io.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("frame streams: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_frames_have_the_escape_length_and_field() {
        let f = control(READY, true);
        assert_eq!(&f[..4], &[0, 0, 0, 0]);
        assert_eq!(
            u32::from_be_bytes(f[4..8].try_into().unwrap()) as usize,
            f.len() - 8
        );
        assert_eq!(&f[8..12], &READY.to_be_bytes());
        assert_eq!(&f[12..16], &FIELD_CONTENT_TYPE.to_be_bytes());
        assert_eq!(&f[20..], CONTENT_TYPE);
        assert_eq!(control(STOP, false), [0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 3]);
        let mut io = io::Cursor::new(control(ACCEPT, true));
        let (kind, types) = read_control(&mut io).unwrap();
        assert_eq!((kind, types), (ACCEPT, vec![CONTENT_TYPE.to_vec()]));
    }
}
