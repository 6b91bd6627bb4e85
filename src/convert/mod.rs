//! `nodens convert-corefile`: a NodeLocal DNSCache Corefile in, a nodens
//! configuration out, and the list of what had no translation.
//!
//! A cluster that moves from node-local-dns to nodens has its settings in a
//! Corefile (the node-local-dns ConfigMap). Reading it by hand invites two
//! mistakes: missing a plugin someone added (`rewrite`, `hosts`), and
//! carrying over a setting whose meaning differs. So the converter
//! translates only what has an equivalent, names the line of everything
//! else, and checks its output with the same rules as `check-config`.
//!
//! The steps, one module each: [`corefile`] reads the syntax, [`pillars`]
//! fills in the installer's template variables, [`translate`] maps the
//! plugins to nodens settings, [`emit`] writes the TOML.

pub(crate) mod corefile;
mod emit;
mod import;
mod pillars;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tls_tests;
mod token;
mod translate;
#[cfg(test)]
mod views_tests;

use std::fmt;
use std::path::PathBuf;

use crate::config::File;

/// What the Corefile does not say and the converter needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// `__PILLAR__LOCAL__DNS__`: the node-local address (169.254.20.10).
    pub local_dns: Option<String>,
    /// `__PILLAR__DNS__SERVER__`: the kube-dns Service IP; empty in IPVS mode.
    pub dns_server: Option<String>,
    /// `__PILLAR__DNS__DOMAIN__`: the cluster domain (cluster.local).
    pub domain: Option<String>,
    /// The Service `__PILLAR__CLUSTER__DNS__` stands for (node-cache's
    /// `-upstreamsvc`, `kube-dns-upstream` in the Kubernetes manifest).
    pub upstream_service: String,
    /// The resolv.conf `__PILLAR__UPSTREAM__SERVERS__` stands for.
    pub resolv_conf: PathBuf,
    /// `[server] handover_socket` to write: the converter cannot know it
    /// from a Corefile, and the Helm chart's upgrades need it.
    pub handover_socket: Option<PathBuf>,
    /// Also write what the Helm chart's pods expect of a `configOverride`:
    /// the handover socket, the probe server and the uid of the chart.
    pub for_chart: bool,
    /// Shown in the header of the output.
    pub source_name: String,
    /// Where `import PATH` reads files (the Corefile's directory);
    /// `None`: only snippets can be imported.
    pub import_dir: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            local_dns: None,
            dns_server: None,
            domain: None,
            upstream_service: "kube-dns-upstream".into(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            handover_socket: None,
            for_chart: false,
            source_name: "Corefile".into(),
            import_dir: None,
        }
    }
}

/// Something about the Corefile the user should read, with its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Every line it is about, in order (one finding for `reload` in four blocks).
    pub lines: Vec<usize>,
    pub message: String,
}

/// The result: the configuration text, what was left out, and notes on
/// what was translated but behaves differently.
#[derive(Debug, Clone)]
pub struct Conversion {
    pub toml: String,
    /// Plugins and options with no nodens equivalent: not in the output.
    pub untranslated: Vec<Finding>,
    /// Translated or deliberately dropped, but worth knowing.
    pub notes: Vec<Finding>,
}

/// Why there is no output: the input cannot be read as a Corefile, a
/// template variable has no value, or what it says cannot be expressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertError {
    pub line: Option<usize>,
    pub message: String,
    /// The converter's own output failed the configuration check: a bug in
    /// the converter, never something the Corefile can be blamed for.
    pub output_refused: bool,
}

impl ConvertError {
    fn at(line: usize, message: impl Into<String>) -> Self {
        ConvertError {
            line: Some(line),
            message: message.into(),
            output_refused: false,
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConvertError {}

/// Converts Corefile text. `env` answers the Corefile's `{$VAR}` references.
pub fn convert(
    text: &str,
    options: &Options,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Conversion, ConvertError> {
    let mut parsed = corefile::parse_importing(text, env, options.import_dir.as_deref())
        .map_err(|e| ConvertError::at(e.line, e.message))?;
    pillars::substitute(&mut parsed, options)?;
    let plan = translate::translate(&parsed, options)?;
    let toml = emit::emit(&plan, options);
    // The same parse and rules as `check-config`, short of what belongs to
    // the node that will run it (the Service's environment variables and
    // its resolv.conf): a conversion that fails them is a converter bug.
    File::parse(&toml).map_err(|e| ConvertError {
        line: None,
        output_refused: true,
        message: format!("the converted configuration does not pass the check ({e}):\n{toml}"),
    })?;
    Ok(Conversion {
        toml,
        untranslated: plan.untranslated.into_findings(),
        notes: plan.notes.into_findings(),
    })
}

#[cfg(test)]
mod tests {
    use super::testing::{listed, ok, run};
    use super::*;

    #[test]
    fn options_without_equivalent_are_listed() {
        let c = ok(".:53 {\n\
                    bind 127.0.0.1 except 127.0.0.2\n\
                    cache 30 example.org {\n\
                      denial 100 5 1\n\
                      serve_stale 1h immediate\n\
                      disable success\n\
                    }\n\
                    forward . 127.0.0.1:5300 {\n\
                      tls_servername dns.example\n\
                      max_fails 0\n\
                      policy round_robin\n\
                    }\n\
                    health {\n\
                      lameduck 5s\n\
                    }\n\
                  }\n");
        for (line, word) in [
            (2, "except"),
            (3, "ZONES"),
            (4, "MINTTL"),
            (9, "tls_servername"),
            (10, "max_fails 0"),
        ] {
            assert!(listed(&c, line, word), "line {line}: {:?}", c.untranslated);
        }
        // What CoreDNS 1.13 does with these, nodens does per zone.
        let t: toml::Table = c.toml.parse().unwrap();
        assert_eq!(t["server"]["lameduck"].as_str(), Some("5s"), "{}", c.toml);
        let zone = &t["zone"].as_array().unwrap()[0];
        assert_eq!(zone["policy"].as_str(), Some("round_robin"), "{}", c.toml);
        let cache = &zone["cache"];
        assert_eq!(cache["stale_max_age"].as_str(), Some("1h"), "{}", c.toml);
        assert_eq!(cache["stale_answer_timeout"].as_str(), Some("0s"));
        assert_eq!(cache["success"].as_bool(), Some(false));
        assert!(cache.get("denial").is_none());
    }

    #[test]
    fn minimal_is_written_for_the_zones_of_its_block() {
        let c = ok("example:53 {\n\
                      bind 127.0.0.1\n\
                      minimal\n\
                      forward . 127.0.0.1:5300\n\
                    }\n\
                    .:53 {\n\
                      bind 127.0.0.1\n\
                      forward . 127.0.0.1:5300\n\
                    }\n");
        assert!(c.untranslated.is_empty(), "{:?}", c.untranslated);
        let t: toml::Table = c.toml.parse().unwrap();
        let zones = t["zone"].as_array().unwrap();
        let minimal = |name: &str| {
            let zone = zones.iter().find(|z| z["name"].as_str() == Some(name));
            zone.and_then(|z| z.get("minimal"))
                .and_then(toml::Value::as_bool)
        };
        assert_eq!(minimal("example"), Some(true), "{}", c.toml);
        assert_eq!(minimal("."), None, "{}", c.toml);
    }

    #[test]
    fn each_blocks_cache_is_its_zones() {
        let c = ok("cluster.local:53 {\n\
                      bind 127.0.0.1\n\
                      cache {\n\
                        success 9984 30\n\
                        denial 9984 5\n\
                        prefetch 2 10s 25%\n\
                        servfail 2s\n\
                        disable denial\n\
                      }\n\
                      forward . 10.0.0.10\n\
                    }\n\
                    example.org:53 {\n\
                      bind 127.0.0.1\n\
                      forward . 10.0.0.11\n\
                    }\n\
                    .:53 {\n\
                      bind 127.0.0.1\n\
                      cache 30 {\n\
                        serve_stale 10m verify\n\
                      }\n\
                      forward . 10.0.0.12\n\
                    }\n");
        let t: toml::Table = c.toml.parse().unwrap();
        let zones = t["zone"].as_array().unwrap();
        let cache = |i: usize| zones[i].get("cache").cloned();
        let cluster = cache(0).unwrap();
        assert_eq!(cluster["prefetch_min_hits"].as_integer(), Some(2));
        assert_eq!(cluster["prefetch_percent"].as_integer(), Some(25));
        assert_eq!(cluster["servfail_ttl"].as_str(), Some("2s"));
        assert_eq!(cluster["denial"].as_bool(), Some(false));
        assert!(cluster.get("enabled").is_none());
        assert_eq!(cache(1).unwrap()["enabled"].as_bool(), Some(false));
        let root = cache(2).unwrap();
        assert_eq!(root["stale_max_age"].as_str(), Some("10m"));
        assert!(root.get("stale_answer_timeout").is_none(), "verify waits");
        // One capacity for all: the two caches' entries, summed.
        assert!(t["cache"]["capacity"].as_str().is_some());
        assert!(t["cache"].get("prefetch_min_hits").is_none());
        crate::config::Config::parse(&c.toml).unwrap();
    }

    #[test]
    fn values_nodens_would_refuse_are_listed_not_written() {
        let c = ok(".:53 {\n\
                    bind 127.0.0.1\n\
                    cache {\n\
                      success 100 10 60\n\
                    }\n\
                    forward . 127.0.0.1:5300 {\n\
                      expire 0s\n\
                      health_check 0s\n\
                      max_concurrent 0\n\
                    }\n\
                  }\n");
        assert!(listed(&c, 1, "MINTTL above"), "{:?}", c.untranslated);
        assert!(listed(&c, 7, "above 0"), "{:?}", c.untranslated);
        assert!(listed(&c, 8, "above 0"), "{:?}", c.untranslated);
        for absent in [
            "min_ttl",
            "idle_timeout",
            "health_check",
            "max_misses_in_flight",
        ] {
            assert!(!c.toml.contains(absent), "{absent} written:\n{}", c.toml);
        }
    }

    /// `forward ... max_concurrent`: each block's zone gets its bulkhead,
    /// the server the sum, and the result loads.
    #[test]
    fn max_concurrent_is_each_zones_bulkhead() {
        let c = ok(
            "corp.example:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:5300 {\n    max_concurrent 300\n  }\n}\n\
                    .:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:5301 {\n    max_concurrent 1000\n  }\n}\n",
        );
        let t: toml::Table = c.toml.parse().unwrap();
        assert_eq!(t["server"]["max_misses_in_flight"].as_integer(), Some(1300));
        let config = crate::config::Config::parse(&c.toml).unwrap();
        let bound = |name: &str| {
            config
                .zones
                .iter()
                .find(|z| z.name == name)
                .map(|z| z.max_misses_in_flight)
        };
        assert_eq!(bound("corp.example."), Some(300));
        assert_eq!(bound("."), Some(1000));
    }

    #[test]
    fn blocks_nodens_cannot_serve_are_listed() {
        let c = ok("tls://secure.example:853 {\n  forward . 127.0.0.1\n}\n\
                    hosts.example:53 {\n  hosts /etc/hosts\n}\n\
                    (common) {\n  errors\n}\n\
                    10.0.0.0/8:53 {\n  forward . 127.0.0.1:5300\n}\n\
                    10.0.0.0/8:53 {\n  forward . 127.0.0.1:5301\n}\n\
                    .:53 {\n  forward . tls://9.9.9.9 {\n    tls_servername dns.quad9.net\n  }\n}\n");
        assert!(listed(&c, 1, "tls://"), "{:?}", c.untranslated);
        assert!(listed(&c, 4, "no `forward`"), "{:?}", c.untranslated);
        // A snippet nothing imports is only a definition, as in CoreDNS.
        assert!(
            !c.untranslated.iter().any(|f| f.lines.contains(&7)),
            "{:?}",
            c.untranslated
        );
        assert!(
            listed(&c, 13, "10.in-addr.arpa again"),
            "{:?}",
            c.untranslated
        );
        // Forwarding over TLS is translated (tls_tests.rs); serving it is not.
        assert!(!c.untranslated.iter().any(|f| f.lines.contains(&17)));
        assert!(c.toml.contains("name = \"10.in-addr.arpa\""), "{}", c.toml);
        assert!(c.toml.contains("name = \".\""), "{}", c.toml);
        assert!(c.toml.contains("transport = \"tls\""), "{}", c.toml);
        assert!(
            c.toml.contains("server_name = \"dns.quad9.net\""),
            "{}",
            c.toml
        );
    }

    #[test]
    fn zones_sharing_a_server_share_its_pool() {
        let c = ok(
            "a.:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:5300 {\n    expire 5s\n  }\n}\n\
                    b.:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:5300 {\n    expire 20s\n  }\n}\n",
        );
        assert!(listed(&c, 7, "one pool per server"), "{:?}", c.untranslated);
        assert_eq!(
            c.toml.matches("idle_timeout = \"5s\"").count(),
            2,
            "{}",
            c.toml
        );
    }

    #[test]
    fn errors_name_the_line() {
        let cases: &[(&str, usize, &str)] = &[
            (
                ".:53 {\n  forward . 127.0.0.1 /etc/resolv.conf\n}\n",
                2,
                "mixes",
            ),
            (
                ".:53 {\n  forward . not-an-address\n}\n",
                2,
                "not an address",
            ),
            (".:53 {\n\n  forward\n}\n", 3, "without arguments"),
            (
                ".:53 {\n  bind __PILLAR__NEW__THING__\n}\n",
                2,
                "not a NodeLocal DNSCache variable",
            ),
            (".:53 {\n  bind {$NODE_IP}\n}\n", 2, "NODE_IP"),
            (
                ".:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1\n}\n",
                3,
                "forwarding loop",
            ),
            (
                ".:53 {\n  forward . 127.0.0.1:53\n}\n",
                2,
                "forwarding loop",
            ),
            (
                "a\u{7f}b:53 {\n  forward . 127.0.0.1:5300\n}\n",
                1,
                "not a zone name",
            ),
        ];
        for (text, line, words) in cases {
            let e = run(text).expect_err(text);
            assert_eq!(e.line, Some(*line), "{text:?}: {e}");
            assert!(e.message.contains(words), "{text:?}: {e}");
        }
        let e = run("a.:53 {\n  hosts\n}\n").unwrap_err();
        assert_eq!(e.line, None);
        assert!(e.message.contains("nothing nodens could serve"), "{e}");
    }

    /// What the converter takes for nodens' defaults is what the
    /// configuration gives a file that does not set them (read as
    /// `check-config` reads it): a copy of a default in `convert` that
    /// drifted from `config` fails here.
    #[test]
    fn defaults_are_the_configurations() {
        let file = File::parse("[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n").unwrap();
        let zone = &file.zones[0];
        let ms = |d: std::time::Duration| format!("{}ms", d.as_millis());
        // Zones sharing a server agree on its pool when one sets the
        // defaults and the other nothing; not when one differs.
        let pools = |expire: &str| {
            ok(&format!(
                "a.:53 {{\n  bind 127.0.0.1\n  forward . 127.0.0.1:5300 {{\n    expire {expire}\n    max_fails {}\n    health_check {}\n  }}\n}}\n\
                 b.:53 {{\n  bind 127.0.0.1\n  forward . 127.0.0.1:5300\n}}\n",
                zone.max_fails,
                ms(zone.health_check),
            ))
        };
        let idle = zone.pool.idle_timeout;
        let same = pools(&ms(idle));
        assert!(!listed(&same, 9, "one pool"), "{:?}", same.untranslated);
        let other = pools(&ms(idle + std::time::Duration::from_secs(1)));
        assert!(listed(&other, 9, "one pool"), "{:?}", other.untranslated);
        // `min_ttl` without a TTL is checked against the default max_ttl.
        let min_ttl = |secs: u64| {
            ok(&format!(
                ".:53 {{\n  bind 127.0.0.1\n  cache {{\n    success 100 - {secs}\n  }}\n  forward . 127.0.0.1:5300\n}}\n"
            ))
        };
        let max = zone.max_ttl.as_secs();
        assert!(!listed(&min_ttl(max), 1, "MINTTL"), "{max}");
        assert!(listed(&min_ttl(max + 1), 1, "MINTTL"), "{max}");
        // The default cluster domain is not written; the default metrics
        // address is the one named.
        let domain = file.cluster.domain.get_ref().0.trim_end_matches('.');
        let options = Options {
            domain: Some(domain.to_string()),
            ..Options::default()
        };
        let c = convert(".:53 {\n  forward . 127.0.0.1:5300\n}\n", &options, &|_| {
            None
        })
        .unwrap();
        assert!(!c.toml.contains("[cluster]"), "{}", c.toml);
        let listen = file.metrics.listen.0.unwrap().to_string();
        assert!(c.toml.contains(&format!("listen, {listen}.")), "{}", c.toml);
    }

    #[test]
    fn no_prefix_of_a_fixture_panics() {
        let text = include_str!("../../tests/fixtures/corefile/custom-plugins.Corefile");
        for end in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
            let _ = run(&text[..end]);
        }
    }

    #[test]
    fn every_fixture_converts_to_a_valid_file() {
        let options = Options {
            local_dns: Some("169.254.20.10".into()),
            dns_server: Some("10.96.0.10".into()),
            domain: Some("cluster.local".into()),
            ..Options::default()
        };
        for text in [
            include_str!("../../tests/fixtures/corefile/nodelocaldns-template.Corefile"),
            include_str!("../../tests/fixtures/corefile/nodelocaldns-substituted.Corefile"),
            include_str!("../../tests/fixtures/corefile/gke.Corefile"),
            include_str!("../../tests/fixtures/corefile/custom-plugins.Corefile"),
        ] {
            let c = convert(text, &options, &|_| None).unwrap_or_else(|e| panic!("{e}"));
            File::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
        }
    }
}
