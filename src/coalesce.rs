//! Coalescing of identical cache misses: the first query for a key asks
//! upstream, the ones that arrive while it is in flight wait for its result
//! instead of sending their own. A burst of pods asking for the same name
//! costs the cluster DNS one query.

use std::future::Future;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hashbrown::HashTable;
use tokio::sync::oneshot;

use crate::cache::{Entry, Key, KeyHashing};

/// The result every waiter gets: the entry, or `None` when nothing usable
/// came back (every upstream failed, or the leader was cancelled).
pub(crate) type Outcome = Option<Arc<Entry>>;

/// The fetches in flight, each with the queries waiting for it.
///
/// Keyed by query names clients choose, so hashed as the cache hashes
/// them (with a per-process random key, [`KeyHashing`]). A table rather
/// than a map: the key is hashed once per fetch, and that hash finds it
/// again when the fetch ends (a map hashes at each of the three).
#[derive(Default)]
pub(crate) struct Coalescer {
    waiting: Mutex<HashTable<(Key, Vec<oneshot::Sender<Outcome>>)>>,
    hasher: KeyHashing,
}

/// Whether this call asked upstream or waited for another one that did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Leader,
    Follower,
}

impl Coalescer {
    /// Runs `fetch` for `key` unless a fetch for it is already running, in
    /// which case waits for that one's outcome, until `deadline` at most
    /// (the one it joined may have a later one: a reload may have changed
    /// the timeout); `fetch` itself is bounded by its caller.
    pub(crate) async fn run<F>(&self, key: &Key, deadline: Instant, fetch: F) -> (Outcome, Role)
    where
        F: Future<Output = Outcome>,
    {
        let hash = self.hasher.hash_one(key);
        let follower = {
            let mut waiting = crate::lock::lock(&self.waiting);
            match waiting.find_mut(hash, |(k, _)| k == key) {
                Some((_, waiters)) => {
                    let (tx, rx) = oneshot::channel();
                    waiters.push(tx);
                    Some(rx)
                }
                None => {
                    waiting.insert_unique(hash, (key.clone(), Vec::new()), |(k, _)| {
                        self.hasher.hash_one(k)
                    });
                    None
                }
            }
        };
        if let Some(rx) = follower {
            let outcome = tokio::time::timeout_at(deadline.into(), rx).await;
            return (outcome.ok().and_then(Result::ok).flatten(), Role::Follower);
        }
        let mut guard = LeaderGuard {
            table: self,
            key,
            hash,
            outcome: None,
        };
        let outcome = fetch.await;
        guard.outcome = Some(outcome.clone());
        drop(guard);
        (outcome, Role::Leader)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        crate::lock::lock(&self.waiting).len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Removes the key and wakes the followers, also when the leader's future
/// is dropped half-way (then they get `None`).
struct LeaderGuard<'a> {
    table: &'a Coalescer,
    key: &'a Key,
    hash: u64,
    outcome: Option<Outcome>,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        let waiters = crate::lock::lock(&self.table.waiting)
            .find_entry(self.hash, |(k, _)| k == self.key)
            .map(|entry| entry.remove().0.1)
            .unwrap_or_default();
        let outcome = self.outcome.take().flatten();
        for w in waiters {
            let _ = w.send(outcome.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::KeyRef;
    use std::time::Duration;

    /// An IN A key for `name`.
    fn key(name: &[u8]) -> Key {
        KeyRef {
            name,
            qtype: 1,
            qclass: 1,
            flags: 0,
        }
        .to_owned()
    }

    /// A failure entry for `name`'s IN A question: any outcome will do.
    fn failure(name: &[u8]) -> Arc<Entry> {
        let question = [name, b"\x00\x01\x00\x01"].concat();
        Arc::new(Entry::failure(&question, 5, Instant::now()))
    }

    #[tokio::test]
    async fn followers_share_the_leaders_outcome() {
        let table = Arc::new(Coalescer::default());
        let key = key(b"\x01a\x00");
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut handles = Vec::new();
        for _ in 0..10 {
            let (table, key, calls) = (table.clone(), key.clone(), calls.clone());
            handles.push(tokio::spawn(async move {
                table
                    .run(&key, Instant::now() + Duration::from_secs(5), async {
                        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Some(failure(b"\x01a\x00"))
                    })
                    .await
            }));
        }
        let mut leaders = 0;
        for h in handles {
            let (outcome, role) = h.await.unwrap();
            assert!(outcome.is_some());
            leaders += usize::from(role == Role::Leader);
        }
        assert_eq!(leaders, 1);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(table.is_empty());
    }

    #[tokio::test]
    async fn a_follower_waits_no_longer_than_its_own_deadline() {
        let table = Arc::new(Coalescer::default());
        let key = key(b"\x01b\x00");
        let leader = {
            let (table, key) = (table.clone(), key.clone());
            tokio::spawn(async move {
                table
                    .run(&key, Instant::now() + Duration::from_secs(10), async {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        Some(failure(b"\x01b\x00"))
                    })
                    .await
            })
        };
        while table.is_empty() {
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        let deadline = started + Duration::from_millis(100);
        let (outcome, role) = table
            .run(&key, deadline, async {
                panic!("a follower does not fetch")
            })
            .await;
        assert_eq!(role, Role::Follower);
        assert!(outcome.is_none(), "nothing by its deadline");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "gave up at its deadline, not the leader's end"
        );
        let (outcome, role) = leader.await.unwrap();
        assert_eq!(role, Role::Leader);
        assert!(outcome.is_some(), "the leader's fetch went on");
    }
}
