//! The zone table of one view: which zone a query name belongs to (the
//! longest zone name that is a suffix of it, label by label). On every
//! query's path, hits included.

use std::collections::HashMap;

use super::Zone;
use crate::wire::name;

/// The zones one view routes to.
#[derive(Default)]
pub(super) struct Table {
    /// Hashed with ahash: a lookup is on every query's path, hits included.
    by_name: HashMap<Vec<u8>, usize, ahash::RandomState>,
    /// The wire lengths of the zone names, so a suffix no zone has the
    /// length of is not looked up: most queries are routed with one lookup.
    lengths: NameLengths,
    /// The root zone, kept out of `by_name`: a name no other zone has is
    /// routed to it without hashing (the common case of a node cache, whose
    /// other zones are the cluster's).
    root: Option<usize>,
}

/// A set of wire name lengths (at most 255).
#[derive(Default)]
struct NameLengths([u64; 4]);

impl NameLengths {
    fn insert(&mut self, len: usize) {
        self.0[len / 64 % 4] |= 1 << (len % 64);
    }

    fn contains(&self, len: usize) -> bool {
        len < 256 && self.0[len / 64] & (1 << (len % 64)) != 0
    }
}

impl Table {
    pub(super) fn insert(&mut self, zone: &Zone) {
        let wire = name::from_text(&zone.name).expect("a checked zone name");
        if wire == [0] {
            self.root = Some(zone.index);
            return;
        }
        self.lengths.insert(wire.len());
        self.by_name.insert(wire, zone.index);
    }

    #[inline]
    pub(super) fn route(&self, folded_name: &[u8]) -> Option<usize> {
        if self.by_name.is_empty() {
            return self.root;
        }
        name::label_starts(folded_name)
            .filter(|&start| self.lengths.contains(folded_name.len() - start))
            .find_map(|start| self.by_name.get(&folded_name[start..]))
            .copied()
            .or(self.root)
    }
}
