//! `dnstap`: CoreDNS's dnstap output becomes nodens's one `[dnstap]`
//! section. CoreDNS sends CLIENT_QUERY and CLIENT_RESPONSE, and its
//! `forward` sends FORWARDER_QUERY and FORWARDER_RESPONSE to the same
//! reader, so both are on; `full` (the DNS messages in each frame) is
//! carried over. nodens has one dnstap output per process: a second
//! `dnstap` with another endpoint is left out and listed.

use super::super::corefile::Directive;
use super::Plan;
use super::block_out::describe;
use crate::config::DnstapSocket;

/// `[dnstap]` as the Corefile says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::convert) struct DnstapOut {
    pub(in crate::convert) socket: String,
    pub(in crate::convert) full: bool,
    pub(in crate::convert) identity: Option<String>,
    pub(in crate::convert) version: Option<String>,
    pub(in crate::convert) line: usize,
}

/// `dnstap ENDPOINT [full] [WRITEBUFFER] [QUEUE] { identity ID; version V;
/// extra E; skipverify }`.
pub(super) fn dnstap(d: &Directive, plan: &mut Plan) {
    let line = d.line();
    let args = d.arg_texts();
    let Some(endpoint) = args.first() else {
        plan.untranslated
            .add(line, "dnstap without an endpoint: left out");
        return;
    };
    if endpoint.starts_with("tls://") {
        plan.untranslated.add(
            line,
            format!(
                "{}: nodens sends dnstap over a Unix socket or plain TCP, not TLS; left out",
                describe(d)
            ),
        );
        return;
    }
    // CoreDNS takes a bare path as a Unix socket.
    let socket = match DnstapSocket::parse(endpoint) {
        Ok(s) => s.to_string(),
        Err(_) => {
            plan.untranslated.add(
                line,
                format!("dnstap endpoint `{endpoint}`: nodens needs unix:///path or tcp://IP:port (an address, not a name); left out"),
            );
            return;
        }
    };
    let full = args.get(1).is_some_and(|a| *a == "full");
    if args.len() > 2 || (args.len() == 2 && !full) {
        plan.notes.add(
            line,
            "dnstap's write buffer and queue sizes: nodens's is [dnstap] queue (records waiting, 4096 by default)",
        );
    }
    let mut out = DnstapOut {
        socket,
        full,
        identity: None,
        version: None,
        line,
    };
    for option in d.block.iter().flatten() {
        let value = option.arg_texts().first().cloned();
        match (option.name.text.as_str(), value) {
            ("identity", Some(v)) => out.identity = Some(v.to_string()),
            ("version", Some(v)) => out.version = Some(v.to_string()),
            ("extra", _) => plan.untranslated.add(
                option.line(),
                "dnstap extra: nodens puts the client's pod there (pod=namespace/name); left out",
            ),
            (other, _) => plan.untranslated.add(
                option.line(),
                format!("dnstap `{other}`: no equivalent; left out"),
            ),
        }
    }
    match &plan.dnstap {
        None => {
            plan.notes.add(
                line,
                "dnstap: nodens sends client and forwarder messages, as CoreDNS with forward does, off the request path; when its queue is full or no reader listens a message is dropped and counted in nodens_dnstap_dropped_total, the query is answered",
            );
            plan.dnstap = Some(out);
        }
        Some(first) if first.socket == out.socket && first.full == out.full => {}
        Some(first) => plan.untranslated.add(
            line,
            format!(
                "{}: nodens has one dnstap output, the one of line {}; left out",
                describe(d),
                first.line
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::convert::{Conversion, Options, convert};

    fn run(text: &str) -> Conversion {
        convert(text, &Options::default(), &|_| None).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn endpoint_full_and_identity_carry_over() {
        let c = run(
            ".:53 {\n  bind 127.0.0.1\n  dnstap unix:///run/tap.sock full {\n    \
                     identity node-a\n    extra x\n  }\n  forward . 127.0.0.1:5300\n}\n\
                     cluster.local:53 {\n  bind 127.0.0.1\n  dnstap tcp://10.0.0.9:6000\n  \
                     forward . 127.0.0.1:5301\n}\n",
        );
        assert!(
            c.toml.contains(
                "\n[dnstap]   # dnstap, line 3\nsocket = \"unix:/run/tap.sock\"\nforwarder = true\nidentity = \"node-a\"\n"
            ),
            "{}",
            c.toml
        );
        assert!(!c.toml.contains("full = false"), "{}", c.toml);
        let listed = |line: usize, words: &str| {
            c.untranslated
                .iter()
                .any(|f| f.lines.contains(&line) && f.message.contains(words))
        };
        assert!(listed(5, "extra"), "{:?}", c.untranslated);
        assert!(listed(11, "one dnstap output"), "{:?}", c.untranslated);
        crate::config::File::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
    }

    #[test]
    fn without_full_no_messages_and_bad_endpoints_are_listed() {
        let c = run(".:53 {\n  dnstap /run/tap.sock\n  forward . 127.0.0.1:5300\n}\n");
        assert!(c.toml.contains("full = false"), "{}", c.toml);
        assert!(
            c.toml.contains("socket = \"unix:/run/tap.sock\""),
            "{}",
            c.toml
        );
        for bad in ["tls://10.0.0.1:6000", "tcp://collector:6000"] {
            let c = run(&format!(
                ".:53 {{\n  dnstap {bad}\n  forward . 127.0.0.1:5300\n}}\n"
            ));
            assert!(!c.toml.contains("[dnstap]"), "{}", c.toml);
            assert!(
                c.untranslated.iter().any(|f| f.lines == [2]),
                "{bad}: {:?}",
                c.untranslated
            );
        }
    }
}
