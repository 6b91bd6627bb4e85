//! The names a stub resolver asks for, in order, for one lookup.
//!
//! glibc (`res_nsearch`), musl (`name_from_dns_search`) and Go's pure
//! resolver (`nameList`) agree on the common case: a name with fewer dots
//! than `ndots` walks the search list first and is asked as written last; a
//! name with enough dots, or a trailing dot, is asked as written first. They
//! differ at the edges, kept here: glibc skips the final as-written query
//! when the root is on the search list or (`no-tld-query`) the name has no
//! dot; musl and Go skip search entries that would make the name too long.

use super::resolv_conf::StubConfig;

/// Whose resolver: the walks differ at the edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Stub {
    Glibc,
    Musl,
    Go,
}

/// getaddrinfo's address family: which of A and AAAA a lookup asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Family {
    /// AF_UNSPEC: A and AAAA (sent together; A first).
    Unspec,
    /// AF_INET: A only.
    Inet,
    /// AF_INET6: AAAA only.
    Inet6,
}

/// Longest name in text form (without the trailing dot) a query can carry.
const MAX_NAME_TEXT: usize = 253;

/// The names `stub` asks for when it looks up `name`, in order, up to and
/// including the first that exists, where `exists` says which do (a name
/// that exists only as written walks the whole list: the tax an external
/// name pays). Names are returned without a trailing dot.
pub fn walk(
    stub: Stub,
    config: &StubConfig,
    name: &str,
    exists: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut tried = Vec::new();
    for candidate in candidates(stub, config, name) {
        let found = exists(&candidate);
        tried.push(candidate);
        if found {
            break;
        }
    }
    tried
}

/// Every name the walk may ask for, in order, if none exists.
fn candidates(stub: Stub, config: &StubConfig, name: &str) -> Vec<String> {
    if let Some(absolute) = name.strip_suffix('.') {
        return vec![absolute.to_string()];
    }
    let dots = name.matches('.').count();
    let enough_dots = dots >= usize::from(config.ndots);
    let mut names = Vec::new();
    if enough_dots {
        names.push(name.to_string());
    }
    let mut root_on_list = false;
    for domain in &config.search {
        if domain.is_empty() || domain == "." {
            // glibc asks for the name as written here; musl and Go build
            // "name.." and get nothing.
            if stub == Stub::Glibc && !enough_dots {
                root_on_list = true;
                names.push(name.to_string());
            }
            continue;
        }
        let expanded = format!("{name}.{domain}");
        if expanded.len() <= MAX_NAME_TEXT {
            names.push(expanded);
        }
    }
    let as_written_last = match stub {
        Stub::Glibc => !enough_dots && !root_on_list && (dots > 0 || !config.no_tld_query),
        Stub::Musl | Stub::Go => !enough_dots,
    };
    if as_written_last {
        names.push(name.to_string());
    }
    names
}

/// The address types a getaddrinfo lookup asks for, in the order sent.
pub(crate) fn address_types(
    stub: Stub,
    config: &StubConfig,
    family: Family,
) -> &'static [&'static str] {
    let no_aaaa = stub == Stub::Glibc && config.no_aaaa;
    match family {
        Family::Unspec if no_aaaa => &["A"],
        Family::Unspec => &["A", "AAAA"],
        Family::Inet => &["A"],
        Family::Inet6 if no_aaaa => &[],
        Family::Inet6 => &["AAAA"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> StubConfig {
        StubConfig::parse(
            "search team-a.svc.cluster.local svc.cluster.local cluster.local c.proj.internal google.internal\n\
             options ndots:5\n",
        )
    }

    fn none(_: &str) -> bool {
        false
    }

    #[test]
    fn an_external_name_walks_the_whole_search_list_first() {
        for stub in [Stub::Glibc, Stub::Musl, Stub::Go] {
            let names = walk(stub, &pod(), "api.example.com", |n| n == "api.example.com");
            assert_eq!(
                names,
                [
                    "api.example.com.team-a.svc.cluster.local",
                    "api.example.com.svc.cluster.local",
                    "api.example.com.cluster.local",
                    "api.example.com.c.proj.internal",
                    "api.example.com.google.internal",
                    "api.example.com",
                ],
                "{stub:?}"
            );
        }
    }

    #[test]
    fn a_short_service_name_stops_at_its_namespace() {
        let names = walk(Stub::Musl, &pod(), "web", |n| {
            n == "web.team-a.svc.cluster.local"
        });
        assert_eq!(names, ["web.team-a.svc.cluster.local"]);
        let names = walk(Stub::Glibc, &pod(), "web.team-b", |n| {
            n == "web.team-b.svc.cluster.local"
        });
        assert_eq!(
            names,
            [
                "web.team-b.team-a.svc.cluster.local",
                "web.team-b.svc.cluster.local"
            ]
        );
    }

    #[test]
    fn enough_dots_or_a_trailing_dot_asks_as_written_first() {
        let c = pod();
        let srv = "_http._tcp.web.team-a.svc.cluster.local";
        assert_eq!(walk(Stub::Go, &c, srv, |n| n == srv), [srv]);
        // Four dots are not five: a full service name walks the list first.
        let fqdn = "kubernetes.default.svc.cluster.local";
        assert_eq!(walk(Stub::Go, &c, fqdn, |n| n == fqdn).len(), 6);
        assert_eq!(
            walk(Stub::Glibc, &c, "api.example.com.", none),
            ["api.example.com"]
        );
        // ndots:1: as written first, the search list after it when it fails.
        let c = StubConfig::parse("search a.example\n");
        assert_eq!(walk(Stub::Glibc, &c, "x.y", none), ["x.y", "x.y.a.example"]);
    }

    #[test]
    fn glibc_edges() {
        let c = StubConfig::parse("search a.example .\noptions ndots:2 no-tld-query no-aaaa\n");
        // The root on the list is the as-written query; none is added at the end.
        assert_eq!(walk(Stub::Glibc, &c, "x.y", none), ["x.y.a.example", "x.y"]);
        assert_eq!(walk(Stub::Musl, &c, "x.y", none), ["x.y.a.example", "x.y"]);
        let c = StubConfig::parse("search a.example\noptions ndots:2 no-tld-query no-aaaa\n");
        // no-tld-query: a single label is never asked as written.
        assert_eq!(walk(Stub::Glibc, &c, "x", none), ["x.a.example"]);
        assert_eq!(walk(Stub::Musl, &c, "x", none), ["x.a.example", "x"]);
        assert_eq!(address_types(Stub::Glibc, &c, Family::Unspec), ["A"]);
        assert_eq!(address_types(Stub::Musl, &c, Family::Unspec), ["A", "AAAA"]);
    }

    #[test]
    fn expansions_too_long_to_ask_are_skipped() {
        let long = format!("{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63));
        let c = StubConfig::parse(&format!(
            "search {} short\noptions ndots:5\n",
            "d".repeat(63)
        ));
        assert_eq!(
            walk(Stub::Musl, &c, &long, none),
            [format!("{long}.short"), long.clone()]
        );
    }
}
