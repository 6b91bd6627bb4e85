//! The request path's side of `[cluster] follow_api`: a change of the API
//! drops the cached answers and the learned denials it may have changed.

use super::Shared;
use crate::cache::follow::Purge;

#[cfg(feature = "kubernetes")]
impl crate::kubernetes::follow::Followed for Shared {
    fn cache(&self) -> &crate::cache::Cache {
        &self.cache
    }

    /// Drops what `purge` covers from the cache and from the denied nodes
    /// the local stage answers from; returns the cache entries dropped.
    fn purge(&self, purge: &Purge) -> usize {
        let dropped = self.cache.purge(purge, std::time::Instant::now());
        self.search.learned.forget(purge);
        dropped
    }
}
