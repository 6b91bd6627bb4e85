//! `nodens querygen`: names to dnsperf input, through a pod's resolv.conf,
//! so a load test carries the queries pods really send (every search
//! expansion, A and AAAA) instead of one query per name.

use std::fmt;

use super::resolv_conf::StubConfig;
use super::walk::{Family, Stub, address_types, walk};

/// How the names are expanded.
#[derive(Debug, Clone)]
pub struct Options {
    pub stub: Stub,
    pub family: Family,
    pub config: StubConfig,
}

/// An input line that is not `NAME [TYPE]`, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub source: String,
    pub line: usize,
    pub message: BadLine,
}

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadLine {
    #[error("the root is not a name to look up")]
    Root,
    #[error("name longer than 253 characters ({0})")]
    NameTooLong(usize),
    #[error("empty label in '{0}'")]
    EmptyLabel(String),
    #[error("label longer than 63 characters in '{0}'")]
    LongLabel(String),
    #[error("'{0}' has characters a resolver does not send")]
    Characters(String),
    #[error("unknown query type '{0}' (one of {types} or TYPEnnn)", types = TYPES.join(" "))]
    UnknownType(String),
    #[error("unexpected '{0}' after the type")]
    Unexpected(String),
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.source, self.line, self.message)
    }
}

impl std::error::Error for LineError {}

/// Query types a line may name (dnsperf's mnemonics); others as `TYPEnnn`.
const TYPES: &[&str] = &[
    "A", "AAAA", "ANY", "CAA", "CNAME", "DNSKEY", "DS", "HTTPS", "MX", "NAPTR", "NS", "PTR", "SOA",
    "SRV", "SVCB", "TLSA", "TXT",
];

/// dnsperf lines (`name TYPE`) for every line of `input` (`NAME [TYPE]`;
/// blank lines and `#` comments skipped), in the order the stub resolver
/// sends them, each name taken to exist only as written. A line with a type
/// is one `res_search` for it; a line without is a getaddrinfo lookup.
pub fn generate(input: &str, source: &str, options: &Options) -> Result<String, LineError> {
    let mut out = String::new();
    for (index, line) in input.lines().enumerate() {
        let error = |message: BadLine| LineError {
            source: source.to_string(),
            line: index + 1,
            message,
        };
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        check_name(name).map_err(error)?;
        let types: Vec<String> = match words.next() {
            Some(t) => vec![query_type(t).map_err(error)?],
            None => address_types(options.stub, &options.config, options.family)
                .iter()
                .map(|t| t.to_string())
                .collect(),
        };
        if let Some(extra) = words.next() {
            return Err(error(BadLine::Unexpected(extra.to_string())));
        }
        let as_written = name.strip_suffix('.').unwrap_or(name);
        for asked in walk(options.stub, &options.config, name, |n| n == as_written) {
            for t in &types {
                out.push_str(&asked);
                out.push(' ');
                out.push_str(t);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

/// A name a resolver could send: labels of 1 to 63 bytes, 253 in all.
fn check_name(name: &str) -> Result<(), BadLine> {
    let text = name.strip_suffix('.').unwrap_or(name);
    if text.is_empty() {
        return Err(BadLine::Root);
    }
    if text.len() > 253 {
        return Err(BadLine::NameTooLong(text.len()));
    }
    if let Some(label) = text.split('.').find(|l| l.is_empty() || l.len() > 63) {
        return Err(if label.is_empty() {
            BadLine::EmptyLabel(name.to_string())
        } else {
            BadLine::LongLabel(name.to_string())
        });
    }
    if !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(BadLine::Characters(name.to_string()));
    }
    Ok(())
}

fn query_type(word: &str) -> Result<String, BadLine> {
    let upper = word.to_ascii_uppercase();
    if TYPES.contains(&upper.as_str()) {
        return Ok(upper);
    }
    match upper.strip_prefix("TYPE").map(str::parse::<u16>) {
        Some(Ok(_)) => Ok(upper),
        _ => Err(BadLine::UnknownType(word.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(stub: Stub) -> Options {
        Options {
            stub,
            family: Family::Unspec,
            config: StubConfig::parse(
                "search ns.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
            ),
        }
    }

    #[test]
    fn one_name_becomes_the_queries_of_its_walk() {
        let out = generate(
            "# names\napi.example.com\n\nweb.ns.svc.cluster.local. srv\n",
            "names",
            &options(Stub::Glibc),
        )
        .unwrap();
        assert_eq!(
            out,
            "api.example.com.ns.svc.cluster.local A\n\
             api.example.com.ns.svc.cluster.local AAAA\n\
             api.example.com.svc.cluster.local A\n\
             api.example.com.svc.cluster.local AAAA\n\
             api.example.com.cluster.local A\n\
             api.example.com.cluster.local AAAA\n\
             api.example.com A\n\
             api.example.com AAAA\n\
             web.ns.svc.cluster.local SRV\n"
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let o = options(Stub::Musl);
        let e = generate("ok.example\nbad..example\n", "in.txt", &o).unwrap_err();
        assert_eq!(e.to_string(), "in.txt:2: empty label in 'bad..example'");
        let e = generate("x.example BOGUS\n", "in.txt", &o).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("in.txt:1: unknown query type 'BOGUS'")
        );
        let e = generate("x.example A extra\n", "-", &o).unwrap_err();
        assert_eq!(e.line, 1);
        assert!(generate(&format!("{}.example\n", "a".repeat(64)), "-", &o).is_err());
        assert!(generate(".\n", "-", &o).is_err());
        assert_eq!(
            generate("x.example type65\n", "-", &o)
                .unwrap()
                .lines()
                .last(),
            Some("x.example TYPE65")
        );
    }
}
