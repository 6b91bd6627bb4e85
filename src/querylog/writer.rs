//! The writer thread: takes records off the queue, formats them and writes
//! them out in batches. It polls the queue instead of sleeping on it, so
//! that a query never has a sleeper to wake (no system call on the request
//! path); when the queue is empty it flushes and naps for [`NAP`].

use std::io::Write;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use prometheus::IntCounter;

use super::format::{self, Clock, Pod};
use super::record::Record;
use crate::config::{QueryLogFormat, QueryLogOutput};
use crate::search::Clients;

/// How long the writer naps when the queue is empty: the latency of a line,
/// and, with the queue's length, the burst it absorbs without a drop.
const NAP: Duration = Duration::from_millis(10);

/// Bytes gathered before a write: several lines per system call. Under
/// the size of a pipe's atomic write, so a line never interleaves with
/// another writer's on the container log.
const BATCH: usize = 4096;

/// Where the lines go.
pub(super) enum Output {
    /// Through the process's stdout or stderr handle, whose lock keeps
    /// the server's own log lines whole beside ours.
    Stdout,
    Stderr,
    File(std::fs::File),
}

impl Output {
    pub(super) fn open(output: &QueryLogOutput) -> std::io::Result<Output> {
        Ok(match output {
            QueryLogOutput::Stdout => Output::Stdout,
            QueryLogOutput::Stderr => Output::Stderr,
            QueryLogOutput::File(path) => Output::File(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout => std::io::stdout().lock().write_all(bytes),
            Output::Stderr => std::io::stderr().lock().write_all(bytes),
            Output::File(f) => f.write_all(bytes),
        }
    }
}

/// The writer's counters.
pub(super) struct Counts {
    pub(super) written: IntCounter,
    pub(super) errors: IntCounter,
}

/// Runs until every sender is gone and the queue is empty.
pub(super) fn run(
    queue: Receiver<Record>,
    mut output: Output,
    format: QueryLogFormat,
    clients: Arc<Clients>,
    counts: Counts,
) {
    let mut batch = String::with_capacity(BATCH * 2);
    let mut lines = 0u64;
    let mut clock = Clock::now();
    loop {
        match queue.try_recv() {
            Ok(record) => {
                clients.with_pod(record.client.ip(), |pod| {
                    let pod = pod.map(|(namespace, name)| Pod { namespace, name });
                    format::line(format, &record, pod, &clock, &mut batch);
                });
                lines += 1;
                if batch.len() >= BATCH {
                    flush(&mut output, &mut batch, &mut lines, &counts);
                    clock = Clock::now();
                }
            }
            Err(TryRecvError::Empty) => {
                flush(&mut output, &mut batch, &mut lines, &counts);
                std::thread::sleep(NAP);
                clock = Clock::now();
            }
            Err(TryRecvError::Disconnected) => {
                flush(&mut output, &mut batch, &mut lines, &counts);
                return;
            }
        }
    }
}

fn flush(output: &mut Output, batch: &mut String, lines: &mut u64, counts: &Counts) {
    if batch.is_empty() {
        return;
    }
    match output.write(batch.as_bytes()) {
        Ok(()) => counts.written.inc_by(*lines),
        Err(_) => counts.errors.inc_by(*lines),
    }
    batch.clear();
    *lines = 0;
}
