//! The request path's side of `[cluster] follow_api`: a change of the API
//! drops the cached answers and the learned denials it may have changed.

use super::Shared;
use crate::cache::follow::Purge;

impl Shared {
    /// Drops what `purge` covers from the cache and from the denied nodes
    /// the local stage answers from; returns the cache entries dropped.
    pub(crate) fn purge_followed(&self, purge: &Purge) -> usize {
        let dropped = self.cache.purge(purge, std::time::Instant::now());
        self.search.learned.forget(purge);
        dropped
    }
}
