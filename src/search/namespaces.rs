//! The namespaces that exist, as the Kubernetes API lists them: what
//! `[cluster] namespaces_from_api` answers `X.<ns>.svc.<zone>` from. The
//! watch (`kubernetes::namespaces`) writes it; the local-answer stage reads
//! it on a miss. Unknown (None) until the watch holds a complete list, and
//! again from a watch error until the next one: nothing is denied from a
//! list that may be out of date.

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

#[derive(Default)]
pub(crate) struct Namespaces(ArcSwapOption<HashSet<Box<[u8]>>>);

impl Namespaces {
    /// Whether namespace `label` (lower case) exists; None when not known.
    pub(crate) fn exists(&self, label: &[u8]) -> Option<bool> {
        self.0.load().as_ref().map(|all| all.contains(label))
    }

    /// Replaces the list (None: not known).
    pub(crate) fn set(&self, all: Option<HashSet<Box<[u8]>>>) {
        self.0.store(all.map(Arc::new));
    }
}
