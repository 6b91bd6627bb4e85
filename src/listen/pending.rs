//! A UDP worker's misses in flight, and their replies' way to the send.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};

use super::batch::{Destination, SendBatch};

/// A reply, its client, and the address to send it from (wildcard sockets).
pub(super) type QueuedReply = (Vec<u8>, SocketAddr, Option<Destination>);

/// A miss being resolved, to its reply.
pub(super) type Resolving = Pin<Box<dyn Future<Output = QueuedReply> + Send>>;

/// The worker's misses in flight. They are futures its own event loop
/// polls, not tasks: a task per miss cost a spawn, a cache-line-aligned
/// allocation, its scheduling and a hand-off of the reply: about 1,000
/// instructions a miss (decision 50 has the counts). The shutdown drain waits for
/// them through the worker's own token (`Worker::alive`).
/// `take_ready` polls without a waker; every caller polls `next` again
/// before the loop sleeps, which registers it anew.
#[derive(Default)]
pub(super) struct Pending {
    misses: FuturesUnordered<Resolving>,
}

impl Pending {
    pub(super) fn push(&mut self, miss: Resolving) {
        self.misses.push(miss);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.misses.is_empty()
    }

    /// The next reply (`None` when no miss is left).
    pub(super) async fn next(&mut self) -> Option<QueuedReply> {
        self.misses.next().await
    }

    /// Moves `first` and every other reply ready now into `batch`, so the
    /// misses answered in one turn of the event loop go out in one call.
    pub(super) fn take_ready(&mut self, first: QueuedReply, batch: &mut SendBatch) {
        let mut reply = Some(first);
        while let Some((packet, to, from)) = reply {
            let buffer = batch.next_buffer();
            buffer.clear();
            buffer.extend_from_slice(&packet);
            batch.commit(to, from);
            reply = self.next().now_or_never().flatten();
        }
    }
}
