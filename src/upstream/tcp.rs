//! One query to one upstream over TCP (RFC 7766 framing), used when a UDP
//! answer came back truncated. One connection per query for now; connection
//! reuse with a bounded pool is the job of the pool layer.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use super::ExchangeError;
use crate::wire::response::check_answers;

pub async fn exchange(server: SocketAddr, query: &[u8], id: u16, question: &[u8], deadline: Instant) -> Result<Vec<u8>, ExchangeError> {
    timeout_at(deadline, exchange_inner(server, query, id, question)).await.map_err(|_| ExchangeError::Timeout)?
}

async fn exchange_inner(server: SocketAddr, query: &[u8], id: u16, question: &[u8]) -> Result<Vec<u8>, ExchangeError> {
    let mut stream = TcpStream::connect(server).await?;
    stream.set_nodelay(true)?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend((query.len() as u16).to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed).await?;
    loop {
        let mut len = [0u8; 2];
        read_exact_or_closed(&mut stream, &mut len).await?;
        let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
        read_exact_or_closed(&mut stream, &mut msg).await?;
        if check_answers(&msg, id, question).is_ok() {
            return Ok(msg);
        }
    }
}

async fn read_exact_or_closed(stream: &mut TcpStream, buf: &mut [u8]) -> Result<(), ExchangeError> {
    match stream.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(ExchangeError::Closed),
        Err(e) => Err(e.into()),
    }
}
