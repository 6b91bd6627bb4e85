//! The one queue of the observers that write off the request path (the
//! query log, dnstap). The request path offers a record with `try_send`: no
//! system call, no wait; a full queue drops the record and counts it. One
//! writer thread per queue takes the records, batches them and writes. It
//! polls the queue and naps for [`NAP`] when it is empty, instead of
//! sleeping on it, so that no query ever has a sleeper to wake. It ends
//! when the last sender is gone, or at shutdown ([`Queue::finish`]) once
//! what is queued is written.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::IntCounter;

/// How long a writer naps when its queue is empty: the latency of an
/// output, and, with the queue's length, the burst it absorbs without a
/// drop.
pub(crate) const NAP: Duration = Duration::from_millis(10);

/// What a writer thread does with the records it takes.
pub(crate) trait Writer<T>: Send + 'static {
    /// Adds one record to the batch; `true` when the batch should be
    /// written now.
    fn take(&mut self, record: T) -> bool;
    /// Writes the batch: when it is full, before each nap and at the end.
    fn flush(&mut self);
    /// Ends the output once the queue is closed and written (a stream's
    /// last frame).
    fn finish(&mut self) {}
}

/// A bounded queue and its writer thread.
pub(crate) struct Queue<T> {
    sender: SyncSender<T>,
    dropped: IntCounter,
    /// What one dropped record counts for (dnstap: its two messages).
    weight: u64,
    /// Set at shutdown: the writer ends once the queue is empty.
    stop: Arc<AtomicBool>,
    /// Disconnected when the writer thread has ended.
    ended: Mutex<Receiver<()>>,
}

impl<T: Send + 'static> Queue<T> {
    /// A queue of `capacity` records and a thread `name` that hands them
    /// to `writer`; a dropped record adds `weight` to `dropped`.
    pub(crate) fn start(
        name: &str,
        capacity: usize,
        dropped: IntCounter,
        weight: u64,
        writer: impl Writer<T>,
    ) -> std::io::Result<Queue<T>> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(capacity);
        let (ending, ended) = std::sync::mpsc::sync_channel(0);
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                drain(&receiver, writer, &stopping);
                drop(ending);
            })?;
        Ok(Queue {
            sender,
            dropped,
            weight,
            stop,
            ended: Mutex::new(ended),
        })
    }

    /// Offers a record; a full queue (or an ended writer) drops and counts it.
    #[inline]
    pub(crate) fn offer(&self, record: T) {
        if self.sender.try_send(record).is_err() {
            self.dropped.inc_by(self.weight);
        }
    }

    /// Lets the writer write what is queued and end, while senders may
    /// still be held; waits `within` at most. `false` when the writer had
    /// not ended by then.
    pub(crate) fn finish(&self, within: Duration) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        match crate::lock::lock(&self.ended).recv_timeout(within) {
            Err(RecvTimeoutError::Timeout) => false,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
        }
    }
}

/// The writer thread's loop.
fn drain<T>(queue: &Receiver<T>, mut writer: impl Writer<T>, stop: &AtomicBool) {
    loop {
        match queue.try_recv() {
            Ok(record) => {
                if writer.take(record) {
                    writer.flush();
                }
            }
            Err(TryRecvError::Empty) if !stop.load(Ordering::Relaxed) => {
                writer.flush();
                std::thread::sleep(NAP);
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                writer.flush();
                writer.finish();
                return;
            }
        }
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
