//! `hosts`, `template`, `local` and `whoami`: a block's local answers, written as
//! its zones' `[zone.hosts]`, `[[zone.template]]` and `local = true`
//! (docs/migration.md), and `whoami`, `whoami = true`.

use std::fmt::Write as _;
use std::path::Path;

use super::super::corefile::{Directive, go_duration};
use super::block_out::{BlockOut, describe};
use super::{Plan, Upstream};
use crate::records::hosts::HostsData;
use crate::records::template::RecordText;

/// A TOML string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn quoted_list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| quote(i)).collect();
    format!("[{}]", items.join(", "))
}

/// `fallthrough [ZONES...]` as nodens writes it.
fn fallthrough(args: &[&str]) -> String {
    if args.is_empty() {
        "true".into()
    } else {
        quoted_list(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }
}

/// The first of `zones` the configuration would refuse as a zone name
/// (a label over 63 characters, say): such a directive is left out, never
/// written into a file that `check-config` refuses.
fn not_a_name<'a>(mut zones: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    zones.find(|z| crate::wire::name::normalize_zone(z).is_err())
}

/// Whether every zone of `d` is a name nodens can serve; if not, the
/// directive is listed as left out.
fn zones_are_names<'a>(
    d: &Directive,
    zones: impl Iterator<Item = &'a str>,
    plan: &mut Plan,
) -> bool {
    let Some(bad) = not_a_name(zones) else {
        return true;
    };
    plan.untranslated.add(
        d.line(),
        format!(
            "{}: zone `{bad}` is not a name nodens can serve; left out",
            describe(d)
        ),
    );
    false
}

/// `local`: the RFC 6761 names, answered as CoreDNS does.
pub(super) fn local(d: &Directive, out: &mut BlockOut) {
    // Once per block is what CoreDNS allows; a second says nothing more.
    if !out.records.keys.contains("local = true") {
        let _ = writeln!(out.records.keys, "local = true   # line {}", d.line());
    }
}

/// `hosts [FILE [ZONES...]] { ENTRIES... ttl no_reverse reload fallthrough }`.
pub(super) fn hosts(d: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = d.line();
    let args = d.arg_texts();
    let file = args.first().copied().unwrap_or("/etc/hosts");
    if out.records.tables.contains("\n[zone.hosts]") {
        plan.untranslated.add(
            line,
            format!("{}: a second `hosts` in the block (CoreDNS refuses it: once per server block); left out", describe(d)),
        );
        return;
    }
    let zones: Vec<String> = args.iter().skip(1).map(|z| z.to_string()).collect();
    if !zones_are_names(d, zones.iter().map(String::as_str), plan) {
        return;
    }
    let mut entries = Vec::new();
    // An option given on several lines: CoreDNS keeps the last one; each
    // key is written once (a TOML table refuses a key twice).
    let mut options: Vec<(&'static str, String)> = Vec::new();
    let mut set =
        |key: &'static str, value: String| match options.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => options.push((key, value)),
        };
    for option in d.block.iter().flatten() {
        let oline = option.line();
        let oargs = option.arg_texts();
        match option.name.text.as_str() {
            "fallthrough" if not_a_name(oargs.iter().copied()).is_some() => plan.untranslated.add(
                oline,
                format!(
                    "{}: not a zone name nodens can serve; left out",
                    describe(option)
                ),
            ),
            "fallthrough" => set("fallthrough", fallthrough(&oargs)),
            "no_reverse" => set("reverse", "false".into()),
            "ttl" => match oargs.first().and_then(|t| t.parse::<u32>().ok()) {
                Some(ttl) if (1..=65535).contains(&ttl) => set("ttl", format!("\"{ttl}s\"")),
                _ => plan.untranslated.add(
                    oline,
                    format!("{}: not a TTL CoreDNS accepts", describe(option)),
                ),
            },
            "reload" => match oargs.first().and_then(|t| go_duration(t)) {
                Some(every) => set("reload", format!("\"{}ms\"", every.as_millis())),
                None => plan
                    .untranslated
                    .add(oline, format!("{}: not a duration", describe(option))),
            },
            _ => {
                let mut text = option.name.text.clone();
                for a in &oargs {
                    text.push(' ');
                    text.push_str(a);
                }
                if HostsData::parse(&text, &[Box::from(&[0u8][..])], true).is_ok() {
                    entries.push(text);
                } else {
                    plan.notes.add(
                        oline,
                        format!("hosts entry `{text}`: CoreDNS skips a line it cannot read, nodens refuses it, so it is left out (the answers are the same)"),
                    );
                }
            }
        }
    }
    let w = &mut out.records.tables;
    let _ = writeln!(w, "\n[zone.hosts]   # line {line}");
    let _ = writeln!(w, "files = {}", quoted_list(&[file.to_string()]));
    if !entries.is_empty() {
        let _ = writeln!(w, "entries = {}", quoted_list(&entries));
    }
    if !zones.is_empty() {
        let _ = writeln!(w, "zones = {}", quoted_list(&zones));
    }
    for (key, value) in &options {
        let _ = writeln!(w, "{key} = {value}");
    }
    plan.notes.add(
        line,
        format!("hosts: {file} is read at start and followed every reload interval; a line nodens cannot read is an error at start and keeps the last good records while running (CoreDNS skips it); the answers are not cached"),
    );
}

/// `template CLASS TYPE [ZONES...] { match answer additional authority rcode fallthrough ederror }`.
pub(super) fn template(d: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = d.line();
    let args = d.arg_texts();
    let (Some(class), Some(qtype)) = (args.first(), args.get(1)) else {
        plan.untranslated
            .add(line, format!("{}: CLASS and TYPE missing", describe(d)));
        return;
    };
    if !zones_are_names(d, args.iter().skip(2).copied(), plan) {
        return;
    }
    let mut t = String::new();
    let _ = writeln!(t, "\n[[zone.template]]   # line {line}");
    let _ = writeln!(t, "class = {}\ntype = {}", quote(class), quote(qtype));
    if args.len() > 2 {
        let zones: Vec<String> = args[2..].iter().map(|z| z.to_string()).collect();
        let _ = writeln!(t, "zones = {}", quoted_list(&zones));
    }
    let mut authority = false;
    // A key given on several lines: CoreDNS appends the lists (`match`,
    // `answer`, `additional`, `authority`) and keeps the last `rcode` and
    // `fallthrough`; each is written once, in the order first seen.
    let mut keys: Vec<(&str, String)> = Vec::new();
    let mut set = |key: &'static str, value: String, append: bool| match keys
        .iter_mut()
        .find(|(k, _)| *k == key)
    {
        Some((_, v)) if append => {
            let (old, new) = (v.trim_end_matches(']'), value.trim_start_matches('['));
            *v = if old.ends_with('[') || new.starts_with(']') {
                format!("{old}{new}")
            } else {
                format!("{old}, {new}")
            };
        }
        Some((_, v)) => *v = value,
        None => keys.push((key, value)),
    };
    for option in d.block.iter().flatten() {
        let oline = option.line();
        let oargs: Vec<String> = option.arg_texts().iter().map(|a| a.to_string()).collect();
        let key = option.name.text.as_str();
        match key {
            "match" => {
                if let Some(bad) = oargs.iter().find(|r| regex::Regex::new(r).is_err()) {
                    plan.untranslated.add(
                        oline,
                        format!("template match `{bad}`: not a regular expression nodens reads; the template is left out"),
                    );
                    return;
                }
                set("match", quoted_list(&oargs), true);
            }
            "answer" | "additional" | "authority" => {
                if let Some(bad) = oargs.iter().find(|r| RecordText::compile(r).is_err()) {
                    plan.untranslated.add(
                        oline,
                        format!("template {key} `{bad}`: uses a template function nodens does not fill in; the template is left out"),
                    );
                    return;
                }
                if key == "answer" && oargs.iter().any(|a| a.to_ascii_uppercase().contains(" CNAME ")) {
                    plan.untranslated.add(
                        oline,
                        "template answer CNAME: CoreDNS also resolves the target for A/AAAA questions; nodens answers the CNAME alone",
                    );
                }
                authority |= key == "authority";
                let key = match key {
                    "answer" => "answer",
                    "additional" => "additional",
                    _ => "authority",
                };
                set(key, quoted_list(&oargs), true);
            }
            "rcode" => {
                set("rcode", quote(oargs.first().map_or("NOERROR", String::as_str)), false);
            }
            "fallthrough" if not_a_name(oargs.iter().map(String::as_str)).is_some() => {
                plan.untranslated.add(
                    oline,
                    format!("{}: not a zone name nodens can serve; left out", describe(option)),
                );
            }
            "fallthrough" => {
                let refs: Vec<&str> = oargs.iter().map(String::as_str).collect();
                set("fallthrough", fallthrough(&refs), false);
            }
            "upstream" => {}
            _ => plan.untranslated.add(
                oline,
                format!("template `{key}`: not translated (nodens adds no EDNS error to a template's answer)"),
            ),
        }
    }
    for (key, value) in keys {
        let _ = writeln!(t, "{key} = {value}");
    }
    if !authority {
        t.push_str("authority = []   # none, as CoreDNS (unset: nodens adds an SOA)\n");
    }
    out.records.tables.push_str(&t);
}

/// `whoami`: answered once the block is read ([`settle_whoami`]).
pub(super) fn whoami(d: &Directive, out: &mut BlockOut) {
    out.records.whoami = Some(d.line());
}

/// `whoami` comes after `forward` in CoreDNS's plugin order: in a block
/// that forwards it answers nothing; in one that does not, it answers every
/// name, which nodens does with a zone whose upstreams are never asked.
pub(super) fn settle_whoami(out: &mut BlockOut, resolv_conf: &Path, plan: &mut Plan) {
    let Some(line) = out.records.whoami else {
        return;
    };
    if out.forward.is_some() {
        plan.notes.add(
            line,
            "whoami: after `forward`, which answers every name of the block, it answers nothing; left out",
        );
        return;
    }
    let _ = writeln!(out.records.keys, "whoami = true   # line {line}");
    out.forward = Some((Upstream::ResolvConf(resolv_conf.to_owned(), false), line));
    out.cached = true;
    plan.notes.add(
        line,
        "whoami: the block does not forward, so nodens's zone answers every name with whoami (its resolv_conf is read, never asked)",
    );
}

#[cfg(test)]
mod tests {
    use crate::convert::{Conversion, Options, convert};

    fn ok(text: &str) -> Conversion {
        convert(text, &Options::default(), &|_| None).unwrap_or_else(|e| panic!("{e}"))
    }

    fn zone(c: &Conversion) -> toml::Table {
        let t: toml::Table = c.toml.parse().unwrap();
        t["zone"][0].as_table().unwrap().clone()
    }

    fn listed(c: &Conversion, line: usize, words: &str) -> bool {
        c.untranslated
            .iter()
            .any(|f| f.lines.contains(&line) && f.message.contains(words))
    }

    #[test]
    fn hosts_options_become_the_zones_table() {
        let c = ok(
            ".:53 {\n  bind 127.0.0.1\n  hosts /etc/hosts.d/x example.org {\n    10.0.0.1 a.example.org\n    ttl 60\n    no_reverse\n    reload 10s\n    fallthrough in-addr.arpa\n  }\n  forward . 10.0.0.10\n  cache\n}\n",
        );
        let h = &zone(&c)["hosts"];
        assert_eq!(h["files"][0].as_str(), Some("/etc/hosts.d/x"));
        assert_eq!(h["zones"][0].as_str(), Some("example.org"));
        assert_eq!(h["entries"][0].as_str(), Some("10.0.0.1 a.example.org"));
        assert_eq!(h["ttl"].as_str(), Some("60s"));
        assert_eq!(h["reverse"].as_bool(), Some(false));
        assert_eq!(h["reload"].as_str(), Some("10000ms"));
        assert_eq!(h["fallthrough"][0].as_str(), Some("in-addr.arpa"));
        // A bare `hosts` is the node's /etc/hosts.
        let c = ok(".:53 {\n  bind 127.0.0.1\n  hosts\n  forward . 10.0.0.10\n  cache\n}\n");
        assert_eq!(zone(&c)["hosts"]["files"][0].as_str(), Some("/etc/hosts"));
    }

    #[test]
    fn a_hosts_option_on_two_lines_is_written_once_the_last_kept() {
        // Found by the corefile_convert fuzz target: two `fallthrough`
        // lines wrote the key twice, a file the check refuses.
        let c = ok(
            ".:53 {\n  bind 127.0.0.1\n  hosts {\n    fallthrough\n    ttl 60\n    no_reverse\n    no_reverse\n    ttl 30\n    fallthrough in-addr.arpa\n  }\n  forward . 10.0.0.10\n  cache\n}\n",
        );
        let h = &zone(&c)["hosts"];
        assert_eq!(h["ttl"].as_str(), Some("30s"));
        assert_eq!(h["reverse"].as_bool(), Some(false));
        assert_eq!(h["fallthrough"][0].as_str(), Some("in-addr.arpa"));
    }

    #[test]
    fn a_hosts_line_coredns_skips_is_left_out_with_a_note() {
        let c = ok(
            ".:53 {\n  bind 127.0.0.1\n  hosts {\n    10.0.0.300 a\n    10.0.0.1 b\n  }\n  forward . 10.0.0.10\n  cache\n}\n",
        );
        assert_eq!(zone(&c)["hosts"]["entries"].as_array().unwrap().len(), 1);
        assert!(
            c.notes
                .iter()
                .any(|n| n.lines == [4] && n.message.contains("10.0.0.300"))
        );
    }

    /// Found by the corefile_convert fuzz target: a key on two lines of a
    /// template was written twice, a duplicate key the check refused.
    /// CoreDNS appends the lists and keeps the last `rcode`; so does this.
    #[test]
    fn a_template_key_on_two_lines_is_written_once() {
        let text = ".:53 {\n  bind 127.0.0.1\n  template IN A example.org {\n    match ^a\\.\n    match ^b\\.\n    answer \"{{ .Name }} 60 IN A 10.0.0.1\"\n    answer \"{{ .Name }} 60 IN A 10.0.0.2\"\n    rcode SERVFAIL\n    rcode NXDOMAIN\n  }\n  forward . 10.0.0.10\n}\n";
        let c = ok(text);
        let t = &zone(&c)["template"][0];
        assert_eq!(t["match"].as_array().map(Vec::len), Some(2));
        assert_eq!(t["answer"].as_array().map(Vec::len), Some(2));
        assert_eq!(t["rcode"].as_str(), Some("NXDOMAIN"));
    }

    #[test]
    fn templates_local_and_what_is_not_translated() {
        let text = ".:53 {\n  bind 127.0.0.1\n  local\n  whoami\n  template IN A example.org {\n    match ^ip-(\\d+)\\.example\\.org\\.$\n    answer \"{{ .Name }} 60 IN A 10.0.0.{{ index .Match 1 }}\"\n    ederror 15\n  }\n  template ANY ANY bad.example {\n    match \"(?<=x)\"\n  }\n  template IN AAAA . {\n    authority \"{{ .Zone }} 60 IN SOA ns. h. 1 2 3 4 5\"\n  }\n  forward . 10.0.0.10\n  cache\n}\n";
        let c = ok(text);
        let z = zone(&c);
        assert_eq!(z["local"].as_bool(), Some(true));
        let t = z["template"].as_array().unwrap();
        assert_eq!(t.len(), 2, "the template with a bad regex is left out");
        assert_eq!(t[0]["zones"][0].as_str(), Some("example.org"));
        assert_eq!(t[0]["authority"].as_array().map(Vec::len), Some(0));
        assert_eq!(t[1]["authority"].as_array().map(Vec::len), Some(1));
        assert!(
            c.notes
                .iter()
                .any(|n| n.lines == [4] && n.message.contains("whoami"))
        );
        assert!(
            z.get("whoami").is_none(),
            "after forward, whoami answers nothing"
        );
        assert!(listed(&c, 8, "ederror"));
        assert!(listed(&c, 11, "(?<=x)"));
        // A block with whoami alone answers every name with it.
        let c = ok(".:53 {\n  bind 127.0.0.1\n  whoami\n}\n");
        assert_eq!(zone(&c)["whoami"].as_bool(), Some(true));
    }

    #[test]
    fn a_zone_that_is_not_a_name_leaves_its_directive_out() {
        let long = "x".repeat(64);
        for directive in [
            format!("hosts /etc/hosts a.{long}.example"),
            format!("template IN AAAA blocked.{long}.example {{\n    rcode NXDOMAIN\n  }}"),
            format!("hosts {{\n    fallthrough {long}.example\n  }}"),
        ] {
            let text = format!(".:53 {{\n  {directive}\n  forward . 127.0.0.1:5300\n}}\n");
            let c = crate::convert::convert(&text, &Default::default(), &|_| None)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(
                c.untranslated.iter().any(|f| f.message.contains("not a")),
                "{directive}: {:?}",
                c.untranslated
            );
        }
    }

    #[test]
    fn a_second_hosts_or_local_in_a_block_gives_a_file_that_parses() {
        let text = ".:53 {\n  hosts {\n    fallthrough\n  }\n  local\n  local\n  hosts {\n    fallthrough\n  }\n  forward . 127.0.0.1:5300\n}\n";
        let c = crate::convert::convert(text, &Default::default(), &|_| None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            c.untranslated.iter().any(|f| f.lines == [7]),
            "{:?}",
            c.untranslated
        );
    }
}
