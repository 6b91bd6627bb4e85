//! `log`: CoreDNS's query log becomes the `[zone.query_log]` of each zone
//! of the block its name scopes cover, with its `class` filters. The
//! format is nodens's own (CoreDNS's common format followed by nodens's
//! fields), so a custom format is noted, not carried over; a name scope
//! narrower than a zone has no equivalent (nodens logs whole zones).

use super::super::corefile::Directive;
use super::Plan;
use super::block_out::{BlockOut, describe};
use super::keys::Keys;

/// The class bits of `[zone.query_log] classes` (as config::query_log).
const SUCCESS: u8 = 1;
const DENIAL: u8 = 2;
const ERROR: u8 = 4;
const ALL: u8 = SUCCESS | DENIAL | ERROR;

/// `log [NAMES...] [FORMAT] { class CLASSES... }`.
pub(super) fn log(d: &Directive, keys: &Keys, out: &mut BlockOut, plan: &mut Plan) {
    let line = d.line();
    let mut args = d.arg_texts();
    if args.len() > 1 && args.last().is_some_and(|a| a.contains('{')) {
        let format = args.pop().unwrap_or_default();
        if format != "{common}" {
            plan.notes.add(
                line,
                format!("log format `{format}`: nodens writes CoreDNS's common format followed by zone=, source= (and namespace=, pod= when the pod watch knows the client); [query_log] format = \"json\" is the other choice"),
            );
        }
    }
    let scopes: Vec<String> = if args.is_empty() {
        vec![".".into()]
    } else {
        args.iter().map(|a| scope(a)).collect()
    };
    let mut classes = 0;
    for option in d.block.iter().flatten() {
        match option.name.text.as_str() {
            "class" => {
                for class in option.arg_texts() {
                    match class.to_ascii_lowercase().as_str() {
                        "success" => classes |= SUCCESS,
                        "denial" => classes |= DENIAL,
                        "error" => classes |= ERROR,
                        "all" => classes |= ALL,
                        other => plan.untranslated.add(
                            option.line(),
                            format!("log class `{other}`: not a class (success, denial, error, all); left out"),
                        ),
                    }
                }
            }
            other => plan.untranslated.add(
                option.line(),
                format!("log `{other}`: no equivalent; left out"),
            ),
        }
    }
    if classes == 0 {
        classes = ALL;
    }
    for (zone, _) in &keys.zones {
        if scopes.iter().any(|s| covers(s, zone)) {
            match out.query_log.iter_mut().find(|(z, _)| z == zone) {
                Some((_, bits)) => *bits |= classes,
                None => out.query_log.push((zone.clone(), classes)),
            }
        }
    }
    for s in &scopes {
        // A scope inside another one of the same line logs nothing more
        // (`log . combined`: CoreDNS 1.13 reads `combined` as a second name).
        let inside_another = scopes.iter().any(|o| o != s && covers(o, s));
        if !inside_another && !keys.zones.iter().any(|(zone, _)| covers(s, zone)) {
            plan.untranslated.add(
                line,
                format!("{}: name scope `{s}` is narrower than the block's zones; nodens logs whole zones; left out", describe(d)),
            );
        }
    }
    plan.notes.add(
        line,
        "log: nodens writes the query log off the request path, to stdout by default ([query_log]); when its queue is full a line is dropped and counted in nodens_query_log_dropped_total, the query is answered",
    );
}

/// A name scope as the zones are written: lower case, no trailing dot (`.`
/// for the root).
fn scope(arg: &str) -> String {
    let lower = arg.to_ascii_lowercase();
    match lower.trim_end_matches('.') {
        "" => ".".into(),
        name => name.into(),
    }
}

/// Whether names at and below `scope` include all of `zone`.
fn covers(scope: &str, zone: &str) -> bool {
    scope == "." || zone == scope || zone.ends_with(&format!(".{scope}"))
}

/// The `classes` list of a zone's `[zone.query_log]`, if the block logs it.
pub(super) fn classes_of(out: &BlockOut, zone: &str) -> Option<Vec<&'static str>> {
    let (_, bits) = out.query_log.iter().find(|(z, _)| z == zone)?;
    if *bits == ALL {
        return Some(vec!["all"]);
    }
    Some(
        [(SUCCESS, "success"), (DENIAL, "denial"), (ERROR, "error")]
            .into_iter()
            .filter(|(bit, _)| bits & bit != 0)
            .map(|(_, name)| name)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use crate::convert::{Conversion, Options, convert};

    fn run(text: &str) -> Conversion {
        convert(text, &Options::default(), &|_| None).unwrap_or_else(|e| panic!("{e}"))
    }

    fn listed(c: &Conversion, line: usize, words: &str) -> bool {
        c.untranslated
            .iter()
            .any(|f| f.lines.contains(&line) && f.message.contains(words))
    }

    #[test]
    fn scopes_classes_and_formats() {
        let c = run("a.example:53 b.example:53 {\n\
                     bind 127.0.0.1\n\
                     log b.example {combined}\n\
                     log sub.a.example {\n\
                       class denial\n\
                       class bogus\n\
                       level 3\n\
                     }\n\
                     forward . 127.0.0.1:5300\n\
                   }\n");
        // b.example logged whole (all classes); a.example not at all.
        let zones: Vec<&str> = c.toml.split("[[zone]]").skip(1).collect();
        assert_eq!(zones.len(), 2, "{}", c.toml);
        assert!(!zones[0].contains("query_log"), "{}", zones[0]);
        assert!(
            zones[1].contains("[zone.query_log]   # log\nclasses = [\"all\"]"),
            "{}",
            zones[1]
        );
        assert!(listed(&c, 4, "narrower"), "{:?}", c.untranslated);
        assert!(listed(&c, 6, "bogus"), "{:?}", c.untranslated);
        assert!(listed(&c, 7, "level"), "{:?}", c.untranslated);
        assert!(c.notes.iter().any(|n| n.message.contains("{combined}")));
        crate::config::File::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
    }

    #[test]
    fn a_bare_log_logs_every_class_and_two_logs_add_up() {
        let c = run(".:53 {\n  bind 127.0.0.1\n  log\n  forward . 127.0.0.1:5300\n}\n");
        assert!(c.toml.contains("classes = [\"all\"]"), "{}", c.toml);
        let c = run(
            ".:53 {\n  bind 127.0.0.1\n  log . {\n    class error\n  }\n  \
                     log . {\n    class success\n  }\n  forward . 127.0.0.1:5300\n}\n",
        );
        assert!(
            c.toml.contains("classes = [\"success\", \"error\"]"),
            "{}",
            c.toml
        );
    }

    #[test]
    fn a_scope_inside_another_of_the_line_is_no_finding() {
        let c = run(".:53 {\n  log . combined\n  forward . 127.0.0.1:5300\n}\n");
        assert!(c.untranslated.is_empty(), "{:?}", c.untranslated);
        assert!(c.toml.contains("[zone.query_log]"), "{}", c.toml);
    }
}
