//! Priming: the zone SOAs the local-answer stage answers with, learned at
//! start instead of from the first pod that asks. Until a zone's SOA is
//! known every impossible name goes upstream, so a freshly started nodens
//! (a new node, an upgrade, a restart) would pay the full search-list tax
//! on its first lookups (docs/lab/search-path.md measured 14 upstream
//! queries for a first external name, against 3 once primed).
//!
//! One query a zone, for a name the zone's own rule rules out (so its
//! answer is an NXDOMAIN carrying the SOA, learned as any other): the
//! cluster domain when a zone of its own forwards it (the cluster DNS), and
//! each of the node's search domains under a configured cloud suffix.
//! Retried with backoff while the upstream does not answer, a few times:
//! real traffic teaches the SOA later anyway.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Shared;
use crate::cache::Key;
use crate::search::Rule;
use crate::wire::{class, name, rtype};

/// The first label of every probe name.
const PROBE_LABEL: &[u8] = b"nodens-soa-probe";
const ATTEMPTS: u32 = 6;
const FIRST_RETRY: Duration = Duration::from_secs(1);

impl Shared {
    /// Starts learning the SOAs the rules need (see the module docs).
    pub fn prime(self: &Arc<Self>) {
        let settings = self.settings.load_full();
        let rules = &settings.cluster;
        let domain = rules.domain();
        let mut probes = Vec::new();
        // The cluster domain, when it has a zone of its own (the cluster
        // DNS): the "." zone goes to resolvers that do not serve it.
        let cluster = prepend(&[PROBE_LABEL], domain);
        if rules.cannot_exist(&cluster) == Some(Rule::ZoneChild)
            && let Some(zone) = settings.router.route_any(&cluster)
            && name::from_text(&zone.name).is_ok_and(|z| z == domain)
        {
            probes.push(cluster);
        }
        for search_domain in &rules.search().search_domains {
            // Labels enough for the cloud suffix's rule to rule it out.
            let probe = (1..=8)
                .map(|n| {
                    let mut labels = vec![PROBE_LABEL];
                    labels.extend(std::iter::repeat_n(&b"x"[..], n - 1));
                    prepend(&labels, search_domain)
                })
                .find(|p| rules.cannot_exist(p) == Some(Rule::CloudSuffix));
            probes.extend(probe);
        }
        for probe in probes {
            let this = self.clone();
            let settings = settings.clone();
            self.tasks.spawn_query_on_main(async move {
                let key = Key::from_parts(&probe, rtype::A, class::IN, 0);
                let mut retry = FIRST_RETRY;
                for _ in 0..ATTEMPTS {
                    if this.search.learned.closest_soa(&probe).is_some() {
                        return;
                    }
                    let Some(zone) = settings.router.route_any(&probe) else {
                        return;
                    };
                    let deadline = Instant::now() + settings.query_timeout;
                    this.fetch(&key, zone, &settings, deadline).await;
                    if this.search.learned.closest_soa(&probe).is_some() {
                        tracing::debug!(probe = %name::to_text(&probe), "learned the zone's SOA");
                        return;
                    }
                    tokio::time::sleep(retry).await;
                    retry *= 2;
                }
            });
        }
    }
}

/// `labels` (left to right) in front of the wire-form `name`.
fn prepend(labels: &[&[u8]], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 64);
    for label in labels {
        out.push(label.len() as u8);
        out.extend_from_slice(label);
    }
    out.extend_from_slice(name);
    out
}
