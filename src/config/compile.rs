//! From the file as written to the [`Config`] the rest of nodens reads:
//! durations turned into the units they are used in, defaults filled in,
//! each zone's upstream addresses read from resolv.conf where none are
//! listed. Done once per load (start, reload, `check-config`).

use std::time::Duration;

use super::check::Invalid;
use super::file::{File, ZoneConfig};
use super::{
    CacheSettings, Config, LogSettings, NodePlan, RateLimit, ServerSettings, TcpLimits,
    UpstreamSettings, ZonePlan, resolv_conf,
};
use crate::cache::TtlPolicy;
use crate::search::rules::SearchPlan;
use crate::search::{CloudSuffix, ClusterRules};
use crate::vocab::values::ZoneName;
use crate::wire::name;

/// The longest `[cluster] hold_past_ttl`: an answer held longer would rest
/// on a watch that may have missed a change for that long.
const MAX_HOLD_PAST_TTL: Duration = Duration::from_secs(3600);

/// The address Kubernetes gives a Service in a pod's environment:
/// `KUBE_DNS_UPSTREAM_SERVICE_HOST` and `..._SERVICE_PORT` for
/// `kube-dns-upstream` (port 53 when the port is not set). Read at each
/// load; Kubernetes fixes a pod's environment at its start, so following a
/// Service that changes needs the API (a later area, `kube/`).
fn service_address(service: &str) -> Result<std::net::SocketAddr, ServiceAddressError> {
    let service = service.to_string();
    let prefix = service.to_ascii_uppercase().replace(['-', '.'], "_");
    let var = format!("{prefix}_SERVICE_HOST");
    let Ok(host) = std::env::var(&var) else {
        return Err(ServiceAddressError::Unset { service, var });
    };
    let Ok(ip) = host.parse::<std::net::IpAddr>() else {
        return Err(ServiceAddressError::NotAnIp {
            service,
            var,
            value: host,
        });
    };
    let var = format!("{prefix}_SERVICE_PORT");
    let port = match std::env::var(&var) {
        Ok(value) => match value.parse() {
            Ok(port) => port,
            Err(_) => {
                return Err(ServiceAddressError::NotAPort {
                    service,
                    var,
                    value,
                });
            }
        },
        Err(_) => 53,
    };
    Ok(std::net::SocketAddr::new(ip, port))
}

/// Why a Service's environment variables give no address.
#[derive(Debug, thiserror::Error)]
enum ServiceAddressError {
    #[error("upstream_service `{service}`: {var} is not set")]
    Unset { service: String, var: String },
    #[error("upstream_service `{service}`: {var}=`{value}` is not an IP")]
    NotAnIp {
        service: String,
        var: String,
        value: String,
    },
    #[error("upstream_service `{service}`: {var}=`{value}` is not a port")]
    NotAPort {
        service: String,
        var: String,
        value: String,
    },
}

/// Whole seconds, saturating: TTLs are 32-bit on the wire.
/// Whether `zone` is `domain` or a zone below it (both lower-cased and
/// fully qualified, as ZoneName holds them). 0x20 is off by default there:
/// CoreDNS's `kubernetes` plugin compares the question with its zone in the
/// case asked, so a random-case question gets NODATA for the apex NS and
/// NXDOMAIN for `ns.dns` (tests/integration/cluster_schema.rs), as unbound exempts such
/// servers with `caps-exempt`.
pub(super) fn at_or_below(zone: &str, domain: &str) -> bool {
    zone == domain
        || zone
            .strip_suffix(domain)
            .is_some_and(|head| head.ends_with('.'))
}

/// The cache file's identity of `zones`: a hash (two CRC-32s, stable
/// across versions and processes) of each zone's name and configured
/// upstreams, sorted.
fn identity(zones: &[ZonePlan]) -> u64 {
    let mut lines: Vec<String> = zones
        .iter()
        .map(|z| {
            let mut upstreams: Vec<String> = z.upstreams.iter().map(ToString::to_string).collect();
            upstreams.sort();
            format!("{} {}\n", z.name, upstreams.join(","))
        })
        .collect();
    lines.sort();
    let text = lines.concat();
    let high = crc32fast::hash(text.as_bytes());
    let low = crc32fast::hash(format!("nodens {text}").as_bytes());
    (u64::from(high) << 32) | u64::from(low)
}

fn secs(d: Duration) -> u32 {
    d.as_secs().min(u32::MAX.into()) as u32
}

impl File {
    /// Compiles a checked file (see [`File::check`]).
    pub(super) fn compile(&self) -> Result<Config, Invalid> {
        let s = &self.server;
        let mut zones = self
            .zones
            .iter()
            .enumerate()
            .map(|(i, z)| self.compile_zone(i, z))
            .collect::<Result<Vec<_>, _>>()?;
        self.check_shared_upstreams(&zones)?;
        let kube_dns = self.apply_kube_dns(&mut zones)?;
        let budget = self.budget.compile()?;
        let startup_taint = self.compile_startup_taint()?;
        Ok(Config {
            listen: s.listen.iter().map(|a| a.get_ref().0).collect(),
            skipped: self.inputs.take_skipped(),
            deprecated: self.deprecated.clone(),
            workers: s.workers,
            server: ServerSettings {
                max_udp_payload: s.max_udp_payload,
                tcp: TcpLimits {
                    idle_timeout: s.tcp_idle_timeout,
                    read_timeout: s.tcp_read_timeout,
                    max_connections: s.tcp_max_connections,
                    max_connections_per_client: s.tcp_max_connections_per_client,
                    max_in_flight: s.tcp_max_in_flight,
                },
                query_timeout: s.query_timeout,
                allow: match &s.allow {
                    Some(list) => list.iter().map(|n| *n.get_ref()).collect(),
                    None => crate::admission::acl::default_allow(),
                },
                rate_limit: (s.client_rate_limit > 0).then_some(RateLimit {
                    per_second: s.client_rate_limit,
                    burst: match s.client_rate_burst {
                        0 => s.client_rate_limit,
                        b => b,
                    },
                }),
                max_misses_in_flight: s.max_misses_in_flight,
                shutdown_grace: s.shutdown_grace,
                lameduck: s.lameduck,
                handover_socket: s.handover_socket.clone(),
                identity: s.identity,
                run_as: s
                    .run_as_user
                    .map(|uid| (uid, s.run_as_group.unwrap_or(uid))),
                control_socket: s.control_socket.clone(),
                workload_counters: s.workload_counters,
                workload_metrics: s.workload_metrics,
            },
            cache: CacheSettings {
                capacity: self.cache.capacity.as_u64(),
                failure_ttl: secs(self.cache.servfail_ttl),
                stale_ttl: secs(self.cache.stale_ttl),
                stale_max_age: self.cache.stale_max_age,
                stale_answer_timeout: self.cache.stale_answer_timeout,
                prefetch_min_hits: self.cache.prefetch_min_hits,
                prefetch_percent: self.cache.prefetch_percent,
                snapshot: self.cache.snapshot_file.clone().map(|file| {
                    crate::cache::config::SnapshotPlan {
                        file,
                        interval: self.cache.snapshot_interval,
                        max_size: self.cache.snapshot_max_size.as_u64(),
                        identity: identity(&zones),
                    }
                }),
            },
            http: self.metrics.compile(
                std::env::var(crate::http::config::METRICS_LISTEN_ENV)
                    .ok()
                    .as_deref(),
            )?,
            node: self.node.setup.then(|| NodePlan {
                interface: self.node.interface.clone(),
                link_kind: self.node.link_kind,
                backend: self.node.backend,
                reconcile_interval: self.node.reconcile_interval,
                keep_on_exit: self.node.keep_on_exit,
                fail_open: self.node.fail_open,
                state_dir: self.node.state_dir.clone(),
                addresses: self.node_addresses(),
            }),
            cluster: self.compile_cluster()?,
            log: LogSettings {
                level: self.log.level.clone(),
                format: self.log.format,
            },
            kubernetes: (zones.iter().any(|z| z.endpoints.is_some())
                || self.cluster.namespaces_from_api
                || self.cluster.autopath
                || zones.iter().any(|z| z.no_aaaa_for_ipv4_pods)
                || self.cluster.follow_api
                || ((budget.is_some() || s.workload_counters)
                    && self.kubernetes.node_name().is_some())
                || startup_taint.is_some())
            .then(|| super::KubernetesPlan {
                kubeconfig: self.kubernetes.kubeconfig.clone(),
                node_name: self.kubernetes.node_name(),
                streaming_lists: self.kubernetes.streaming_lists,
                startup_taint,
            }),
            zones,
            kube_dns,
            query_log: self.query_log.compile(),
            follow_api: self.compile_follow_api()?,
            budget,
            dnstap: (self.dnstap.as_ref()).map(|d| d.compile(self.kubernetes.node_name())),
        })
    }

    /// The node's search domains (lower-case wire form): as listed, or
    /// from the `search` line of `search_domains_from`.
    fn node_search_domains(&self) -> Result<Vec<Box<[u8]>>, Invalid> {
        let c = &self.cluster;
        let Some(from) = &c.search_domains_from else {
            return Ok(c
                .search_domains
                .iter()
                .map(|d| {
                    name::from_text(&d.get_ref().0)
                        .expect("a checked zone name")
                        .into()
                })
                .collect());
        };
        let path = from.get_ref();
        let fail = |why: String| {
            let message = format!("cluster.search_domains_from: {}: {why}", path.display());
            Invalid::At(from.span(), message)
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        crate::stub::StubConfig::parse(&text)
            .search
            .iter()
            // `search .` (systemd-resolved with no domains): none.
            .filter(|d| !d.is_empty())
            .map(|d| {
                let zone = name::normalize_zone(d).map_err(|e| fail(format!("`{d}`: {e}")))?;
                let wire = name::from_text(&zone).map_err(|e| fail(format!("`{d}`: {e}")))?;
                Ok(wire.to_ascii_lowercase().into_boxed_slice())
            })
            .filter(|d| !matches!(d, Ok(w) if w[..] == [0]))
            .collect()
    }

    /// `[cluster] follow_api` and `hold_past_ttl`, which needs it and is
    /// bounded: a held answer rests on the watch, not on its TTL.
    /// `[kubernetes] startup_taint`: a taint key. Its node's name may come
    /// from an environment the fail-open guard, which reads this file too,
    /// does not have: a missing one is the server's error, at its start.
    fn compile_startup_taint(&self) -> Result<Option<String>, Invalid> {
        let Some(key) = &self.kubernetes.startup_taint else {
            return Ok(None);
        };
        let here = |message: String| super::check::key(&["kubernetes", "startup_taint"], message);
        if let Err(why) = crate::kubernetes::config::check_taint_key(key) {
            return Err(here(format!("startup_taint '{key}': {why}")));
        }
        Ok(Some(key.clone()))
    }

    fn compile_follow_api(&self) -> Result<Option<super::FollowApiPlan>, Invalid> {
        let c = &self.cluster;
        let hold = c.hold_past_ttl;
        if hold > MAX_HOLD_PAST_TTL {
            return Err(super::check::key(
                &["cluster", "hold_past_ttl"],
                format!("hold_past_ttl: {hold:?} is more than the 1h allowed"),
            ));
        }
        if !c.follow_api {
            if c.follow_api_endpoints.is_some() {
                return Err(super::check::key(
                    &["cluster", "follow_api_endpoints"],
                    "follow_api_endpoints needs `follow_api = true`",
                ));
            }
            if c.keep_last_good.is_some() {
                return Err(super::check::key(
                    &["cluster", "keep_last_good"],
                    "keep_last_good needs `follow_api = true`: the watch says which Services exist",
                ));
            }
            if !hold.is_zero() {
                return Err(super::check::key(
                    &["cluster", "hold_past_ttl"],
                    "hold_past_ttl needs `follow_api = true`: answers are held only while the watch is current",
                ));
            }
            return Ok(None);
        }
        Ok(Some(super::FollowApiPlan {
            hold_past_ttl: hold,
            endpoints: c.follow_api_endpoints.unwrap_or_default(),
            keep_last_good: c.keep_last_good.unwrap_or(true),
        }))
    }

    fn compile_cluster(&self) -> Result<ClusterRules, Invalid> {
        let c = &self.cluster;
        let wire = |z: &ZoneName| name::from_text(&z.0).expect("a checked zone name");
        let search_domains = self.node_search_domains()?;
        Ok(ClusterRules::new(
            wire(c.domain.get_ref()),
            c.local_nxdomain,
            c.nxdomain_cut,
            &c.disable_rules
                .iter()
                .map(|r| *r.get_ref())
                .collect::<Vec<_>>(),
            c.exceptions.iter().map(|e| wire(e.get_ref())).collect(),
            c.cloud_suffix
                .iter()
                .map(|s| CloudSuffix::new(s.suffix.get_ref(), *s.max_labels.get_ref()))
                .collect(),
        )
        .with_search(SearchPlan {
            namespace_check: c.namespace_check,
            namespaces_from_api: c.namespaces_from_api,
            autopath: c.autopath,
            speculate: c.speculate,
            search_domains,
            max_speculations: c.max_speculations,
        }))
    }

    fn compile_zone(&self, index: usize, z: &ZoneConfig) -> Result<ZonePlan, Invalid> {
        let name = z.name.get_ref().0.clone();
        let randomize_case = z
            .randomize_case
            .unwrap_or_else(|| !at_or_below(&name, &self.cluster.domain.get_ref().0));
        let upstreams = if !z.upstreams.is_empty() {
            z.upstreams.iter().map(|u| u.get_ref().0).collect()
        } else if let Some(service) = &z.upstream_service {
            vec![service_address(service).map_err(|e| {
                self.zone_error(index, "upstream_service", format!("zone {name}: {e}"))
            })?]
        } else {
            resolv_conf::nameservers(&z.resolv_conf)
                .map_err(|e| self.zone_error(index, "resolv_conf", format!("zone {name}: {e}")))?
        };
        let cache = z.cache.compile(&self.cache)?;
        let tls = crate::upstream::tls::config::for_zone(z.transport, z.tls.as_ref(), &upstreams)
            .map_err(|e| self.zone_error(index, e.field(), format!("zone {name}: {e}")))?;
        Ok(ZonePlan {
            name,
            upstreams,
            policy: z.policy,
            transport: z.transport,
            randomize_case,
            upstream_timeout: z.upstream_timeout,
            ttl: TtlPolicy {
                min_ttl: secs(z.min_ttl),
                max_ttl: secs(z.max_ttl),
                negative_max_ttl: secs(z.negative_max_ttl),
                failure_ttl: cache.failure_ttl,
            },
            upstream: UpstreamSettings {
                pool: z.pool.clone(),
                max_fails: z.max_fails,
                health_check: z.health_check,
                probe_through_pool: matches!(
                    z.transport,
                    super::Transport::ForceTcp | super::Transport::Tls
                ),
                tls,
                probe_timeout: z.upstream_timeout,
                log_interval: self.log.upstream_error_interval,
            },
            endpoints: z.endpoints.as_ref().map(|e| super::EndpointsPlan {
                namespace: e.namespace.get_ref().clone(),
                service: e.service.get_ref().clone(),
                port: e.port.clone(),
                topology: e.topology,
            }),
            cache,
            records: crate::records::config::compile(
                index,
                crate::records::config::Zone {
                    name: z.name.get_ref(),
                    hosts: z.hosts.as_ref(),
                    templates: &z.template,
                    local: z.local,
                    whoami: z.whoami,
                },
                &self.inputs,
            )?,
            listen: z.listen.iter().map(|a| a.get_ref().0).collect(),
            rules: self.compile_zone_rules(z)?,
            query_log: z.query_log.as_ref().and_then(|q| q.compile()),
            no_aaaa_for_ipv4_pods: z.no_aaaa_for_ipv4_pods,
            minimal: z.minimal,
            max_misses_in_flight: self.zone_misses(z.max_misses_in_flight.as_ref())?,
            near: [0, 0],
        })
    }

    /// A zone's bulkhead (`max_misses_in_flight`): its own bound, else the
    /// server's per zone; never above the server's own bound.
    fn zone_misses(&self, own: Option<&toml::Spanned<usize>>) -> Result<usize, Invalid> {
        let total = self.server.max_misses_in_flight;
        if let Some(n) = self.server.max_misses_in_flight_per_zone
            && n > total
        {
            return Err(super::check::key(
                &["server", "max_misses_in_flight_per_zone"],
                format!(
                    "server.max_misses_in_flight_per_zone: {n} is more than max_misses_in_flight ({total})"
                ),
            ));
        }
        match own {
            Some(n) if *n.get_ref() > total => Err(Invalid::At(
                n.span(),
                format!(
                    "zone.max_misses_in_flight: {} is more than [server] max_misses_in_flight ({total})",
                    n.get_ref()
                ),
            )),
            Some(n) => Ok(*n.get_ref()),
            None => Ok(self.default_zone_misses()),
        }
    }

    /// The bulkhead of a zone that sets none.
    pub(super) fn default_zone_misses(&self) -> usize {
        let s = &self.server;
        s.max_misses_in_flight_per_zone
            .unwrap_or(s.max_misses_in_flight / 2)
    }

    /// One server gets one connection pool and one health state, so every
    /// zone that lists it (directly or through resolv.conf) must agree on
    /// their settings.
    fn check_shared_upstreams(&self, zones: &[ZonePlan]) -> Result<(), Invalid> {
        for (i, zone) in zones.iter().enumerate() {
            for (k, &addr) in zone.upstreams.iter().enumerate() {
                let earlier = zones[..i]
                    .iter()
                    .find(|z| z.upstreams.contains(&addr) && !z.upstream.agrees(&zone.upstream));
                if let Some(other) = earlier {
                    let message = format!(
                        "upstream {addr} is also listed by zone {} with different pool, max_fails, health_check or TLS settings; \
                         one server gets one connection pool, so they must agree",
                        other.name
                    );
                    let written = self.zones[i].upstreams.get(k).map(|u| u.span());
                    return Err(match written.filter(|s| !s.is_empty()) {
                        Some(span) => Invalid::At(span, message),
                        None => self.zone_error(i, "name", message),
                    });
                }
            }
        }
        Ok(())
    }
}

impl UpstreamSettings {
    /// Whether two zones listing the same server may share it.
    pub fn agrees(&self, other: &UpstreamSettings) -> bool {
        self.pool == other.pool
            && self.max_fails == other.max_fails
            && self.health_check == other.health_check
            && self.tls == other.tls
    }
}
