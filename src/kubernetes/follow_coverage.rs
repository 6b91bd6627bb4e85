//! What `follow_api`'s watch covers and vouches for, rebuilt after each
//! change of its lists: which names' answers may be held past their TTL,
//! and which Services exist for `cache::last_good`.

use std::collections::HashSet;
use std::time::Instant;

use super::{FollowState, Id, Inner, ServiceView};
use crate::cache::follow::Coverage;
use crate::kubernetes::config::FollowEndpoints;

impl FollowState {
    /// What the watches cover now, for marking answers holdable.
    pub(super) fn coverage(inner: &Inner, endpoints: FollowEndpoints) -> Coverage {
        // A headless Service is made of its slices. When only headless
        // Services' slices are read (by their label), one whose slices
        // carry no label (written by hand, not by the EndpointSlice
        // controller) is not seen: neither its name nor the names below it
        // are held. An ExternalName's answer is made outside the cluster.
        let with_slices: HashSet<(&str, &str)> = inner
            .slices
            .iter()
            .filter_map(|((ns, _), s)| Some((&**ns, s.service.as_deref()?)))
            .collect();
        let unseen = |(ns, name): &Id, s: &ServiceView| {
            endpoints == FollowEndpoints::Headless
                && s.addresses.is_empty()
                && !with_slices.contains(&(&**ns, &**name))
        };
        let uncovered = inner
            .services
            .iter()
            .filter(|(id, s)| s.external || unseen(id, s))
            .map(|((ns, name), _)| Self::service_node(&inner.svc_zone, ns, name))
            .collect();
        let addresses = inner
            .services
            .values()
            .flat_map(|s| s.addresses.iter())
            .chain(inner.slices.values().flat_map(|s| s.addresses.iter()))
            .copied()
            .collect();
        // A Service with a ClusterIP is not headless: its slices are not
        // read when only headless Services' are.
        let partial = match endpoints {
            FollowEndpoints::All => Default::default(),
            FollowEndpoints::Headless => inner
                .services
                .iter()
                .filter(|(_, s)| !s.addresses.is_empty())
                .map(|((ns, name), _)| Self::service_node(&inner.svc_zone, ns, name))
                .collect(),
        };
        let node = |(ns, name): &Id| Self::service_node(&inner.svc_zone, ns, name);
        let services = inner.services.keys().map(node).collect();
        let emptied = inner
            .emptied
            .iter()
            .map(|(id, at)| (node(id), *at))
            .collect();
        Coverage {
            svc_zone: inner.svc_zone.clone(),
            uncovered,
            addresses,
            partial,
            services,
            emptied,
        }
    }

    /// Which headless Services' slices list no endpoint now, and since
    /// when: a rollout's moment (`last_good` bridges it) or a Service
    /// scaled to zero (its NXDOMAIN is the truth once the moment is over).
    pub(super) fn note_emptied(inner: &mut Inner, now: Instant) {
        let with_endpoints: HashSet<(&str, &str)> = inner
            .slices
            .iter()
            .filter(|(_, s)| !s.addresses.is_empty())
            .filter_map(|((ns, _), s)| Some((&**ns, s.service.as_deref()?)))
            .collect();
        let empty: HashSet<Id> = inner
            .services
            .iter()
            .filter(|((ns, name), s)| {
                s.addresses.is_empty() && !with_endpoints.contains(&(&**ns, &**name))
            })
            .map(|(id, _)| id.clone())
            .collect();
        inner.emptied.retain(|id, _| empty.contains(id));
        for id in empty {
            inner.emptied.entry(id).or_insert(now);
        }
    }
}
