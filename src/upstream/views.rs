//! Which zones each listener routes to, when some zones serve only some
//! listen addresses (`[[zone]] listen`).
//!
//! Listeners that see the same zones share a view; each view has a table
//! of its own and is a partition of the cache (`cache::key`), so an answer
//! fetched for one view is never given to another. Without restricted
//! zones there is one table and no partition: routing is as it was.

use std::net::SocketAddr;

use super::MAX_VIEWS;
use super::config::ZonePlan;

/// The zone indexes of each table, and each listener's table.
pub(super) struct Views {
    pub(super) tables: Vec<Vec<usize>>,
    pub(super) listeners: Vec<(SocketAddr, u8)>,
}

impl Views {
    pub(super) fn of(zones: &[ZonePlan], listen: &[SocketAddr]) -> Views {
        if zones.iter().all(|z| z.listen.is_empty()) {
            return Views {
                tables: vec![(0..zones.len()).collect()],
                listeners: Vec::new(),
            };
        }
        // View 0 is "no view": nothing routes in it (a snapshot's records
        // written without views are not served to a view).
        let mut tables: Vec<Vec<usize>> = vec![Vec::new()];
        let mut listeners = Vec::new();
        for &addr in listen {
            let seen: Vec<usize> = zones
                .iter()
                .enumerate()
                .filter(|(_, z)| z.listen.is_empty() || z.listen.contains(&addr))
                .map(|(i, _)| i)
                .collect();
            let view = match tables[1..].iter().position(|t| *t == seen) {
                Some(i) => i + 1,
                None => {
                    tables.push(seen);
                    tables.len() - 1
                }
            };
            // The configuration allows at most MAX_VIEWS listen addresses
            // with views; past it a listener would share the last view.
            listeners.push((addr, view.min(MAX_VIEWS) as u8));
        }
        tables.truncate(MAX_VIEWS + 1);
        Views { tables, listeners }
    }
}

/// A zone's `view` label: its listen addresses, "" when it has none.
pub(super) fn label(listen: &[SocketAddr]) -> String {
    listen
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}
