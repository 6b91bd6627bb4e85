//! `nodens_node_*`: whether the interface and the rules are in place, and
//! how often they had to be repaired, and claims held by something that
//! was not serving.

use prometheus::{IntCounter, IntGauge};

use crate::metrics::{Counters, Gauges, Registry, label_set};

label_set! {
    pub struct BackendLabels { backend = "backend" }
    pub struct WhatLabels { what = "what" }
}

pub struct NodeMetrics {
    pub interface_present: IntGauge,
    pub rules_present: Gauges<BackendLabels<'static>>,
    pub repairs: Counters<WhatLabels<'static>>,
    pub claims_overruled: IntCounter,
}

impl NodeMetrics {
    pub fn register(r: &Registry) -> NodeMetrics {
        NodeMetrics {
            interface_present: r.gauge(
                "nodens_node_interface_present",
                "1 while the node interface exists, is up and holds every listen address.",
            ),
            rules_present: r.gauges(
                "nodens_node_rules_present",
                "1 while nodens's NOTRACK and ACCEPT rules are all in place, by backend.",
            ),
            repairs: r.counters(
                "nodens_node_repairs_total",
                "Times the interface or the rules were found missing or changed and restored.",
            ),
            claims_overruled: r.counter(
                "nodens_node_claims_overruled_total",
                "Times this server found the claim on the node setup held by a process that nothing answered for, and took it over.",
            ),
        }
    }
}
