//! Routing: the zone a name belongs to (longest suffix, in
//! `upstream::Router`); a name in no zone is REFUSED here.

use super::metrics::{PLUGIN_NONE, RequestLabels, ResponseLabels, ServeMetrics, ZONE_DROPPED};
use super::{Job, ListenerView};
use crate::listen::{Handled, Proto};
use crate::metrics::VIEW;
use crate::wire::query::Query;
use crate::wire::{build, qtype_label, rcode, rcode_name};

/// REFUSED for a name no zone covers, counted under CoreDNS's "dropped"
/// zone. Rare (the default zone is the root), so the series are resolved
/// on each call.
pub(super) fn refuse_unrouted(
    metrics: &ServeMetrics,
    query: &Query<'_>,
    listener: &ListenerView,
    proto: Proto,
    out: &mut Vec<u8>,
) -> Handled<Job> {
    metrics.rejected("no zone for the name");
    metrics
        .requests
        .get(&RequestLabels {
            server: &listener.server,
            zone: ZONE_DROPPED,
            view: VIEW,
            proto,
            family: listener.family,
            qtype: qtype_label(query.qtype),
        })
        .inc();
    build::reply_with_rcode(
        query.packet,
        rcode::REFUSED,
        Some(query.name_end + 4),
        query.edns,
        None,
        out,
    );
    metrics
        .responses
        .get(&ResponseLabels {
            server: &listener.server,
            zone: ZONE_DROPPED,
            view: VIEW,
            rcode: rcode_name(rcode::REFUSED),
            plugin: PLUGIN_NONE,
        })
        .inc();
    Handled::Reply
}
