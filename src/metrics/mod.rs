//! The metrics registry and the pieces every area's metric set is built from.
//!
//! Each area declares its own metrics beside its code (`serve::metrics`,
//! `upstream::metrics`, `listen::metrics`, `cache::metrics`), with typed
//! labels ([`family`]); `server::Telemetry` registers them all in one
//! [`Registry`]. Where a metric means what a CoreDNS metric means, it has
//! CoreDNS's name, labels and buckets, so the dashboards and alerts people
//! already run for NodeLocal DNSCache keep working. Everything else is
//! `nodens_*`. The full list is in docs/metrics.md.

pub(crate) mod family;

use prometheus::core::Collector;
use prometheus::{Encoder, IntCounter, IntGauge, TextEncoder, exponential_buckets};

pub(crate) use family::label_set;
pub(crate) use family::{Counters, FloatGauges, Gauges, Histograms, LabelSet, LabelValue};

/// CoreDNS's `view` label; nodens has no views, so it is always empty.
pub(crate) const VIEW: &str = "";

/// One process's metrics, as scraped from /metrics.
pub struct Registry {
    registry: prometheus::Registry,
    /// Run before each gathering: what keeps counts outside the shared
    /// metrics adds them (`serve`'s worker ledgers).
    before_gather: std::sync::Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

label_set! {
    struct BuildLabels { version = "version" }
    /// A `reason` alone (why a query or connection was turned away).
    pub struct ReasonLabels { reason = "reason" }
    /// A `result` alone ("success", "failure").
    pub struct ResultLabels { result = "result" }
}

impl Registry {
    /// A registry holding `nodens_build_info`.
    pub fn new() -> Registry {
        let registry = Registry {
            registry: prometheus::Registry::new(),
            before_gather: Default::default(),
        };
        let info: Gauges<BuildLabels<'static>> =
            registry.gauges("nodens_build_info", "nodens version.");
        info.get(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
        registry
    }

    fn add(&self, collector: Box<dyn Collector>) {
        self.registry.register(collector).expect("unique metric");
    }

    pub fn counters<L: LabelSet>(&self, name: &str, help: &str) -> Counters<L> {
        let family = family::counters(name, help);
        self.add(family.collector());
        family
    }

    pub fn gauges<L: LabelSet>(&self, name: &str, help: &str) -> Gauges<L> {
        let family = family::gauges(name, help);
        self.add(family.collector());
        family
    }

    /// Gauges of fractional values (rates, ratios).
    pub fn float_gauges<L: LabelSet>(&self, name: &str, help: &str) -> FloatGauges<L> {
        let family = family::float_gauges(name, help);
        self.add(family.collector());
        family
    }

    pub fn histograms<L: LabelSet>(
        &self,
        name: &str,
        help: &str,
        buckets: Vec<f64>,
    ) -> Histograms<L> {
        let family = family::histograms(name, help, buckets);
        self.add(family.collector());
        family
    }

    /// A counter without labels.
    pub fn counter(&self, name: &str, help: &str) -> IntCounter {
        let c = IntCounter::new(name, help).expect("valid metric");
        self.add(Box::new(c.clone()));
        c
    }

    /// Registers a process-wide counter kept outside any registry (one
    /// a module bumps where no registry reaches).
    pub(crate) fn adopt(&self, counter: &IntCounter) {
        self.add(Box::new(counter.clone()));
    }

    /// Registers a process-wide gauge kept outside any registry.
    pub(crate) fn adopt_gauge(&self, gauge: &IntGauge) {
        self.add(Box::new(gauge.clone()));
    }

    /// A gauge without labels.
    pub fn gauge(&self, name: &str, help: &str) -> IntGauge {
        let g = IntGauge::new(name, help).expect("valid metric");
        self.add(Box::new(g.clone()));
        g
    }

    /// Runs `settle` before each gathering, so that what it adds is read.
    pub(crate) fn before_gather(&self, settle: impl Fn() + Send + Sync + 'static) {
        self.before_gather
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(settle));
    }

    /// The Prometheus text exposition of every registered metric.
    pub fn encode(&self) -> String {
        for settle in self
            .before_gather
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            settle();
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding");
        String::from_utf8(out).expect("prometheus text is UTF-8")
    }
}

/// CoreDNS's duration buckets: 0.25 ms doubling up to about 8 s.
pub(crate) fn duration_buckets() -> Vec<f64> {
    exponential_buckets(0.00025, 2.0, 16).expect("valid buckets")
}

/// CoreDNS's size buckets, in bytes.
pub(crate) fn size_buckets() -> Vec<f64> {
    vec![
        0.0, 100.0, 200.0, 300.0, 400.0, 511.0, 1023.0, 2047.0, 4095.0, 8291.0, 16e3, 32e3, 48e3,
        64e3,
    ]
}
