//! Every rule a configuration file must follow beyond its types, each
//! written once, each error pointing at the value it is about.
//!
//! The one rule that needs the zones' upstream addresses after resolv.conf
//! is read (zones sharing a server agree on its settings) is in `compile`.

use std::ops::Range;

use super::file::File;
use crate::vocab::position::Step::{self, Key};
pub(super) use crate::vocab::{Invalid, key};

/// An error at a value's span, or at its key when the value is a default.
fn at_or_key(span: Range<usize>, path: &[&'static str], message: &str) -> Invalid {
    match span_of(span) {
        Some(span) => Invalid::At(span, message.into()),
        None => key(path, message),
    }
}

/// A span from the schema, or none for a value that is not in the file.
fn span_of(span: Range<usize>) -> Option<Range<usize>> {
    (!span.is_empty()).then_some(span)
}

impl File {
    /// The first rule the file breaks, if any.
    pub(super) fn check(&self) -> Result<(), Invalid> {
        self.check_server()?;
        self.check_private_dirs()?;
        self.cache.check()?;
        self.node.check(&self.node_addresses())?;
        self.check_cluster()?;
        self.check_zones()
    }

    /// The directories nodens makes its own (owner, mode 0700): the
    /// sockets', the cache file's, the state directory. One that other
    /// programs share (`/run`, `/var/lib`) is refused, never taken over.
    fn check_private_dirs(&self) -> Result<(), Invalid> {
        let parent = |p: &std::path::Path| p.parent().map(std::path::Path::to_path_buf);
        let dirs: [(&[&'static str], Option<std::path::PathBuf>); 4] = [
            (
                &["server", "handover_socket"],
                self.server.handover_socket.as_deref().and_then(parent),
            ),
            (
                &["server", "control_socket"],
                self.server.control_socket.as_deref().and_then(parent),
            ),
            (
                &["cache", "snapshot_file"],
                self.cache.snapshot_file.as_deref().and_then(parent),
            ),
            (
                &["node", "state_dir"],
                self.node.setup.then(|| self.node.state_dir.clone()),
            ),
        ];
        for (path, dir) in dirs {
            if let Some(dir) = dir
                && let Some(why) = crate::trust::shared_dir(&dir)
            {
                return Err(key(path, format!("{}: {why}", path.join("."))));
            }
        }
        Ok(())
    }

    fn check_cluster(&self) -> Result<(), Invalid> {
        let c = &self.cluster;
        if c.domain.get_ref().0 == "." {
            return Err(at_or_key(
                c.domain.span(),
                &["cluster", "domain"],
                "cluster.domain: the root cannot be the cluster domain",
            ));
        }
        if let Some(from) = &c.search_domains_from
            && !c.search_domains.is_empty()
        {
            return Err(at_or_key(
                from.span(),
                &["cluster", "search_domains_from"],
                "cluster.search_domains_from: give the search domains or the file to read them from, not both",
            ));
        }
        for d in &c.search_domains {
            if d.get_ref().0 == "." {
                return Err(at_or_key(
                    d.span(),
                    &["cluster", "search_domains"],
                    "cluster.search_domains: the root is not a search domain",
                ));
            }
        }
        for s in &c.cloud_suffix {
            let text = s.suffix.get_ref();
            let labels: Vec<&str> = text.trim_end_matches('.').split('.').collect();
            let plain = text.replace('*', "x");
            if text.trim_end_matches('.').is_empty()
                || labels.iter().any(|l| l.contains('*') && *l != "*")
                || crate::wire::name::from_text(&plain).is_err()
            {
                return Err(Invalid::At(
                    s.suffix.span(),
                    format!(
                        "cluster.cloud_suffix: `{text}` is not a suffix (labels, `*` for any one label)"
                    ),
                ));
            }
            if *s.max_labels.get_ref() == 0 {
                return Err(Invalid::At(
                    s.max_labels.span(),
                    "cluster.cloud_suffix.max_labels: must be at least 1".into(),
                ));
            }
        }
        Ok(())
    }

    fn check_server(&self) -> Result<(), Invalid> {
        let s = &self.server;
        if s.listen.is_empty() {
            return Err(key(
                &["server", "listen"],
                "server.listen: at least one address is needed",
            ));
        }
        for (i, a) in s.listen.iter().enumerate() {
            if s.listen[..i].iter().any(|b| b.get_ref() == a.get_ref()) {
                let message = format!("listen address {} is listed twice", a.get_ref().0);
                return Err(match span_of(a.span()) {
                    Some(span) => Invalid::At(span, message),
                    None => key(&["server", "listen"], message),
                });
            }
        }
        if s.max_udp_payload < 512 {
            return Err(key(
                &["server", "max_udp_payload"],
                "server.max_udp_payload: must be at least 512",
            ));
        }
        let at_least_one = [
            ("tcp_max_connections", s.tcp_max_connections),
            (
                "tcp_max_connections_per_client",
                s.tcp_max_connections_per_client,
            ),
            ("tcp_max_in_flight", s.tcp_max_in_flight),
            ("max_misses_in_flight", s.max_misses_in_flight),
        ];
        if let Some((name, _)) = at_least_one.iter().find(|(_, v)| *v == 0) {
            return Err(key(
                &["server", name],
                format!("server.{name}: must be at least 1"),
            ));
        }
        let more_than_zero = [
            ("tcp_read_timeout", s.tcp_read_timeout),
            ("tcp_idle_timeout", s.tcp_idle_timeout),
            ("query_timeout", s.query_timeout),
        ];
        if let Some((name, _)) = more_than_zero.iter().find(|(_, v)| v.is_zero()) {
            return Err(key(
                &["server", name],
                format!("server.{name}: must be more than 0"),
            ));
        }
        if s.allow.as_ref().is_some_and(Vec::is_empty) {
            return Err(key(
                &["server", "allow"],
                "server.allow: an empty list would refuse every client; leave it out for the default ranges",
            ));
        }
        Ok(())
    }

    /// The listen addresses the node interface holds: not loopback, not unspecified.
    pub(super) fn node_addresses(&self) -> Vec<std::net::SocketAddr> {
        self.server
            .listen
            .iter()
            .map(|a| a.get_ref().0)
            .filter(|a| !a.ip().is_loopback() && !a.ip().is_unspecified())
            .collect()
    }

    fn check_zones(&self) -> Result<(), Invalid> {
        let own = super::views::OwnAddresses::read();
        let listen: Vec<_> = self.server.listen.iter().map(|l| l.get_ref().0).collect();
        for (i, zone) in self.zones.iter().enumerate() {
            let name = &zone.name.get_ref().0;
            let here = |field, message| self.zone_error(i, field, message);
            self.check_zone_views(i)?;
            let pool = &zone.pool;
            let rules = [
                (
                    "upstream_timeout",
                    zone.upstream_timeout.is_zero(),
                    "upstream_timeout must be more than 0",
                ),
                (
                    "pool",
                    pool.max_connections == 0 || pool.max_in_flight == 0,
                    "pool.max_connections and pool.max_in_flight must be at least 1",
                ),
                (
                    "pool",
                    pool.connect_timeout.is_zero() || pool.idle_timeout.is_zero(),
                    "pool timeouts must be more than 0",
                ),
                (
                    "health_check",
                    zone.health_check.is_zero(),
                    "health_check must be more than 0",
                ),
                (
                    "min_ttl",
                    zone.min_ttl > zone.max_ttl,
                    "min_ttl is above max_ttl",
                ),
            ];
            if let Some((field, _, what)) = rules.iter().find(|(_, broken, _)| *broken) {
                return Err(here(field, format!("zone {name}: {what}")));
            }
            if let Some(e) = &zone.endpoints {
                for (value, what) in [(&e.service, "service"), (&e.namespace, "namespace")] {
                    if !crate::vocab::is_dns_label(value.get_ref()) {
                        let message = format!(
                            "zone {name}: endpoints.{what} '{}' is not a Kubernetes name \
                             (lower-case letters, digits and '-', at most 63)",
                            value.get_ref()
                        );
                        return Err(match span_of(value.span()) {
                            Some(span) => Invalid::At(span, message),
                            None => here("endpoints", message),
                        });
                    }
                }
                if zone.upstreams.is_empty() && zone.upstream_service.is_none() {
                    return Err(here(
                        "endpoints",
                        format!(
                            "zone {name}: endpoints needs upstreams (the Service's ClusterIP), \
                             asked while the endpoints are not known"
                        ),
                    ));
                }
            }
            for up in &zone.upstreams {
                let addr = up.get_ref().0;
                if own.loops(&listen, addr) {
                    let message = format!(
                        "upstream {addr} is one of our own listen addresses: a forwarding loop"
                    );
                    return Err(match span_of(up.span()) {
                        Some(span) => Invalid::At(span, message),
                        None => here("upstreams", message),
                    });
                }
            }
        }
        Ok(())
    }

    /// An error about `field` of the `index`-th zone; no position for the
    /// zone nodens adds when the file has none.
    pub(super) fn zone_error(&self, index: usize, field: &'static str, message: String) -> Invalid {
        if self.zones[index].name.span().is_empty() {
            return Invalid::Key(Vec::new(), message);
        }
        Invalid::Key(vec![Key("zone"), Step::Index(index), Key(field)], message)
    }
}
