//! The task that owns one upstream TCP connection (or TLS session over
//! one): dialling it, writing queries, matching answers by ID, and
//! deciding when it ends.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;

use rand::Rng;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until, timeout_at};

use super::{CloseReason, Conn, InFlight, Inner, Message};
use crate::upstream::ExchangeError;
use crate::wire::framing::{frame, take_frame};
use crate::wire::response::{Answers, Case, check_answers, with_question};
use crate::wire::{read_u16, write_u16};

impl Inner {
    pub(super) async fn dial(self: Arc<Self>) {
        self.m.dials.inc();
        let connected = self.connect().await;
        let mut st = self.lock();
        st.dialing -= 1;
        match connected {
            Ok(stream) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let id = st.next_id();
                st.conns.push(Conn {
                    id,
                    inflight: 0,
                    assigned: 0,
                    retiring: None,
                    messages: tx,
                });
                match stream {
                    Dialled::Tcp(s) => self
                        .upkeep
                        .spawn(self.clone().run_connection(id, s, None, rx)),
                    Dialled::Tls(s) => {
                        let fd = s.get_ref().0.as_raw_fd();
                        self.upkeep
                            .spawn(self.clone().run_connection(id, *s, Some(fd), rx))
                    }
                }
                self.pump(&mut st);
            }
            Err(e) => {
                self.m.dial_failures.inc();
                // Nothing open and nothing dialling: the upstream is not
                // taking connections. Fail the waiters now, not at their timeout.
                if st.conns.is_empty() && st.dialing == 0 {
                    for waiter in st.queue.drain(..) {
                        let _ = waiter.slot.send(Err(ExchangeError::Io(copy(&e))));
                    }
                }
            }
        }
        self.publish(&st);
    }

    /// A connection to the upstream, TLS-handshaken if the zone says so,
    /// within `connect_timeout` in all.
    async fn connect(&self) -> std::io::Result<Dialled> {
        let deadline = Instant::now() + self.config.connect_timeout;
        let tcp = match timeout_at(deadline, TcpStream::connect(self.addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ));
            }
        };
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => Ok(Dialled::Tcp(tcp)),
            Some((client, counts)) => client
                .handshake(self.addr, tcp, deadline, counts)
                .await
                .map(|s| Dialled::Tls(Box::new(s))),
        }
    }

    /// The task that owns one connection: writes queries, matches answers by
    /// ID, and decides when the connection ends. `quickack`: the socket of a
    /// TLS session, acknowledged at once after its first query is written
    /// (`tls::ack_tickets_at_once`).
    async fn run_connection<S>(
        self: Arc<Self>,
        id: u64,
        stream: S,
        mut quickack: Option<RawFd>,
        mut messages: mpsc::UnboundedReceiver<Message>,
    ) where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let mut pending: HashMap<u16, Pending> = HashMap::new();
        let mut received = Vec::with_capacity(1024);
        let mut framed = Vec::new();
        let mut idle_since = Instant::now();
        let reason = 'conn: loop {
            let next_deadline = pending.values().map(|p| p.deadline).min();
            let idle_at = idle_since + self.config.idle_timeout;
            tokio::select! {
                message = messages.recv() => {
                    let mut request = match message {
                        None => break CloseReason::Unused,
                        Some(Message::Wake) => {
                            if pending.is_empty() && let Some(reason) = self.remove_if_retired(id) {
                                break reason;
                            }
                            continue;
                        }
                        Some(Message::Query(request)) => request,
                    };
                    let mut qid = read_u16(&request.query, 0);
                    while pending.contains_key(&qid) {
                        qid = rand::rng().random();
                    }
                    write_u16(&mut request.query, 0, qid);
                    frame(&request.query, &mut framed);
                    let deadline = request.deadline;
                    pending.insert(qid, Pending { question: request.question, deadline, answer: request.answer, in_flight: request.in_flight });
                    // Flushed: a TLS session holds the record until then.
                    let sent = async {
                        writer.write_all(&framed).await?;
                        writer.flush().await
                    };
                    match timeout_at(deadline, sent).await {
                        Ok(Ok(())) => {
                            if let Some(fd) = quickack.take() {
                                // SAFETY: `fd` is the socket under `stream`,
                                // whose halves this task holds: open until it returns.
                                let socket = unsafe { BorrowedFd::borrow_raw(fd) };
                                crate::upstream::tls::ack_tickets_at_once(socket);
                            }
                        }
                        Ok(Err(_)) => break CloseReason::Error,
                        // The server stopped reading: our send buffer is full.
                        Err(_) => break CloseReason::Stuck,
                    }
                }
                read = reader.read_buf(&mut received) => {
                    match read {
                        Ok(0) => break CloseReason::PeerClosed,
                        Err(_) => break CloseReason::Error,
                        Ok(_) => {}
                    }
                    while let Some(answer) = take_frame(&mut received) {
                        let qid = if answer.len() >= 2 { read_u16(&answer, 0) } else { 0 };
                        let Some(p) = pending.remove(&qid) else {
                            self.m.mismatch.inc();
                            continue;
                        };
                        // Our ID on an answer to another question: the server is
                        // confused or someone is injecting; this query fails.
                        let result = match check_answers(&answer, qid, &p.question, Case::Ignore) {
                            Ok(Answers::Question) => Ok(answer),
                            Ok(Answers::ErrorWithoutQuestion) => Ok(with_question(&answer, &p.question)),
                            Err(_) => Err(ExchangeError::Mismatch),
                        };
                        // The slot is free before the asker hears: the reply
                        // it sends may bring the client's next query here
                        // before this task runs again, and that query must
                        // find this connection free, not dial another.
                        drop(p.in_flight);
                        self.release(id);
                        let _ = p.answer.send(result);
                        if pending.is_empty() {
                            idle_since = Instant::now();
                        }
                    }
                    if pending.is_empty() && let Some(reason) = self.remove_if_retired(id) {
                        break 'conn reason;
                    }
                }
                // A query got no answer in time: the server is not serving this
                // connection (stopped reading, or lost the query). Retire it.
                _ = sleep_until(next_deadline.unwrap_or(idle_at)), if next_deadline.is_some() => break CloseReason::Stuck,
                _ = sleep_until(idle_at), if pending.is_empty() => {
                    // Under the pool lock, so no query is handed this connection meanwhile.
                    if self.remove_if(id, |c| c.inflight == 0) {
                        break CloseReason::Idle;
                    }
                    // A slot was just handed out; its query is on its way.
                    idle_since = Instant::now();
                }
            }
        };
        self.remove_if(id, |_| true);
        self.m.closed(reason.label());
        messages.close();
        while let Ok(message) = messages.try_recv() {
            if let Message::Query(request) = message {
                let _ = request.answer.send(Err(ExchangeError::Closed));
            }
        }
        for (_, p) in pending.drain() {
            let _ = p.answer.send(Err(reason.error()));
        }
        let _ = writer.shutdown().await;
    }
}

/// A dialled connection: plain TCP or a TLS session over it.
enum Dialled {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// The dial's error for each waiter it fails (an `io::Error` is not
/// `Clone`): its kind, and the TLS error inside it kept as such.
fn copy(e: &std::io::Error) -> std::io::Error {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>())
    {
        Some(tls) => std::io::Error::new(e.kind(), tls.clone()),
        None => std::io::Error::new(e.kind(), e.to_string()),
    }
}

struct Pending {
    question: Vec<u8>,
    deadline: Instant,
    answer: oneshot::Sender<Result<Vec<u8>, ExchangeError>>,
    in_flight: InFlight,
}
