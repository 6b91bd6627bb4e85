//! What a stub resolver reads from resolv.conf besides its nameservers: the
//! search list and the options that decide which names it asks for.

/// The search and option lines of a resolv.conf, read as the C libraries
/// read them: the last `search` or `domain` line wins, unknown options and
/// malformed lines are ignored (a resolver never refuses its file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StubConfig {
    /// Domains appended to a name, in order, without trailing dots.
    pub search: Vec<String>,
    /// A name with at least this many dots is tried as written first.
    pub ndots: u8,
    /// glibc `no-aaaa` (2.36): getaddrinfo asks for A only.
    pub no_aaaa: bool,
    /// glibc `no-tld-query`: a name without dots is never asked as written.
    pub no_tld_query: bool,
    /// glibc `single-request`/`single-request-reopen`: A, then AAAA, one
    /// after the other instead of in parallel (the order on the wire is the same).
    pub single_request: bool,
    /// glibc `single-request-reopen`: also a new socket for the second query.
    pub single_request_reopen: bool,
    /// Seconds a query waits before the next try (glibc caps it at 30).
    pub timeout: u8,
    /// Tries per nameserver (glibc caps it at 5).
    pub attempts: u8,
    /// glibc `rotate`: start at another nameserver each lookup.
    pub rotate: bool,
    /// glibc `use-vc` (`tcp` since 2.34): every query over TCP.
    pub use_vc: bool,
}

/// resolv.conf's default and the libraries' cap (RES_MAXNDOTS).
const DEFAULT_NDOTS: u8 = 1;
const MAX_NDOTS: u8 = 15;
const DEFAULT_TIMEOUT: u8 = 5;
const MAX_TIMEOUT: u8 = 30;
const DEFAULT_ATTEMPTS: u8 = 2;
const MAX_ATTEMPTS: u8 = 5;

impl Default for StubConfig {
    fn default() -> Self {
        StubConfig {
            search: Vec::new(),
            ndots: DEFAULT_NDOTS,
            no_aaaa: false,
            no_tld_query: false,
            single_request: false,
            single_request_reopen: false,
            timeout: DEFAULT_TIMEOUT,
            attempts: DEFAULT_ATTEMPTS,
            rotate: false,
            use_vc: false,
        }
    }
}

impl StubConfig {
    pub fn parse(text: &str) -> StubConfig {
        let mut config = StubConfig::default();
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut words = line.split_whitespace();
            match words.next() {
                Some("search") => config.search = words.map(without_dot).collect(),
                Some("domain") => {
                    config.search = words.next().map(without_dot).into_iter().collect()
                }
                Some("options") => words.for_each(|o| config.option(o)),
                _ => {}
            }
        }
        // "." or "" on the list means the root: the name as written.
        config
    }

    fn option(&mut self, option: &str) {
        match option.split_once(':') {
            Some(("ndots", n)) => {
                if let Ok(n) = n.parse::<u32>() {
                    self.ndots = n.min(u32::from(MAX_NDOTS)) as u8;
                }
            }
            Some(("timeout", n)) => {
                if let Ok(n) = n.parse::<u32>() {
                    self.timeout = n.clamp(1, u32::from(MAX_TIMEOUT)) as u8;
                }
            }
            Some(("attempts", n)) => {
                if let Ok(n) = n.parse::<u32>() {
                    self.attempts = n.clamp(1, u32::from(MAX_ATTEMPTS)) as u8;
                }
            }
            None if option == "no-aaaa" => self.no_aaaa = true,
            None if option == "no-tld-query" => self.no_tld_query = true,
            None if option == "single-request" => self.single_request = true,
            None if option == "single-request-reopen" => {
                self.single_request = true;
                self.single_request_reopen = true;
            }
            None if option == "rotate" => self.rotate = true,
            None if option == "use-vc" || option == "tcp" => self.use_vc = true,
            _ => {}
        }
    }
}

fn without_dot(domain: &str) -> String {
    domain.strip_suffix('.').unwrap_or(domain).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_kubernetes_pod_resolv_conf() {
        let c = StubConfig::parse(
            "search team-a.svc.cluster.local svc.cluster.local cluster.local c.proj.internal.\n\
             nameserver 169.254.20.10\n\
             options ndots:5 single-request-reopen timeout:2\n",
        );
        assert_eq!(
            c.search,
            [
                "team-a.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "c.proj.internal"
            ]
        );
        assert_eq!(c.ndots, 5);
        assert!(c.single_request && c.single_request_reopen);
        assert!(!c.no_aaaa);
        assert_eq!((c.timeout, c.attempts), (2, 2));
    }

    #[test]
    fn the_last_search_or_domain_line_wins_and_bad_lines_are_ignored() {
        let c = StubConfig::parse("search a b\ndomain c.example\noptions ndots:x ndots:99 bogus\n");
        assert_eq!(c.search, ["c.example"]);
        assert_eq!(c.ndots, 15);
        let c = StubConfig::parse("domain c.example\nsearch a b # comment\n");
        assert_eq!(c.search, ["a", "b"]);
        assert_eq!(StubConfig::parse("").ndots, 1);
        let c = StubConfig::parse("options timeout:0 attempts:9 rotate use-vc\n");
        assert_eq!(
            (c.timeout, c.attempts, c.rotate, c.use_vc),
            (1, 5, true, true)
        );
    }
}
