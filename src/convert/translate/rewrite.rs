//! `rewrite`: name rules (exact, prefix, suffix, substring, regex, with
//! `answer auto`, `answer name`, `answer value`, `stop`/`continue`) and
//! type and class rules become `[[zone.rewrite]]`; `edns0`, `ttl`,
//! `rcode` and `cname` rules are listed as untranslated, with what they
//! change. Each rule is checked as CoreDNS checks it (a regex nodens's
//! engine cannot read is untranslated too).

use std::fmt::Write as _;

use regex::Regex;

use super::super::corefile::Directive;
use super::Plan;
use super::block_out::{BlockOut, describe};

/// A TOML string, quoted and escaped.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The words of a rule: its arguments, then those of its block (CoreDNS
/// reads `rewrite stop { name ... \n answer ... }` as one line).
fn words(d: &Directive) -> Vec<String> {
    let mut words: Vec<String> = d.args.iter().map(|t| t.text.clone()).collect();
    for sub in d.block.iter().flatten() {
        words.push(sub.name.text.clone());
        words.extend(sub.args.iter().map(|t| t.text.clone()));
    }
    words
}

pub(super) fn rewrite(d: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = d.line();
    match rule(&words(d)).and_then(|toml| compiles(&toml).map(|()| toml)) {
        Ok(toml) => out.rules.rewrites.push((toml, line)),
        Err(why) => plan
            .untranslated
            .add(line, format!("{}: {why}; not translated", describe(d))),
    }
}

/// Why a rule has no nodens equivalent, in words for the operator (listed
/// among what was not translated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct NoEquivalent(String);

/// The `[[zone.rewrite]]` body of one rule, or why there is none.
fn rule(words: &[String]) -> Result<String, NoEquivalent> {
    let (next, rest) = match words.first().map(|w| w.to_ascii_lowercase()).as_deref() {
        Some("continue") => ("continue = true\n", &words[1..]),
        Some("stop") => ("", &words[1..]),
        _ => ("", words),
    };
    let Some((field, args)) = rest.split_first() else {
        return Err(NoEquivalent("no rule".into()));
    };
    let mut toml = String::new();
    match field.to_ascii_lowercase().as_str() {
        "name" => name_rule(args, &mut toml)?,
        kind @ ("type" | "class") => {
            let [from, to] = args else {
                return Err(NoEquivalent(format!("{kind} rules take two arguments")));
            };
            let _ = writeln!(toml, "field = \"{kind}\"\nfrom = {}\nto = {}", quote(from), quote(to));
        }
        "edns0" => return Err(NoEquivalent("sets an EDNS0 option of the query sent upstream; nodens has no equivalent".into())),
        "ttl" => return Err(NoEquivalent("sets the TTL of the matching answers; nodens clamps a zone's TTLs with min_ttl / max_ttl".into())),
        "rcode" => return Err(NoEquivalent("changes the response code of the matching answers; nodens has no equivalent".into())),
        "cname" => return Err(NoEquivalent("rewrites CNAME targets and asks for the new target; nodens has no equivalent".into())),
        other => return Err(NoEquivalent(format!("the `{other}` rule has no nodens equivalent"))),
    }
    toml.push_str(next);
    Ok(toml)
}

/// `name [MATCH] FROM TO [answer ...]`.
fn name_rule(args: &[String], toml: &mut String) -> Result<(), NoEquivalent> {
    let (matching, from, to, answers) = match args {
        [from, to] => ("exact", from, to, &[][..]),
        [kind, from, to, answers @ ..] => (kind.as_str(), from, to, answers),
        _ => return Err(NoEquivalent("too few arguments for a name rule".into())),
    };
    let matching = matching.to_ascii_lowercase();
    if !["exact", "prefix", "suffix", "substring", "regex"].contains(&matching.as_str()) {
        return Err(NoEquivalent(format!("unknown match type `{matching}`")));
    }
    if matching == "regex" {
        check_regex(from)?;
    }
    if matching != "exact" {
        let _ = writeln!(toml, "match = \"{matching}\"");
    }
    let _ = writeln!(toml, "from = {}\nto = {}", quote(from), quote(to));
    let (mut names, mut values) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < answers.len() {
        if answers[i] == "answer" {
            i += 1;
        } else if i == 0 {
            return Err(NoEquivalent("too many arguments for a name rule".into()));
        }
        match answers.get(i).map(String::as_str) {
            Some("auto") => {
                let _ = writeln!(toml, "answer_auto = true");
                i += 1;
            }
            Some(kind @ ("name" | "value")) => {
                let (Some(f), Some(t)) = (answers.get(i + 1), answers.get(i + 2)) else {
                    return Err(NoEquivalent(format!("answer {kind} takes two arguments")));
                };
                check_regex(f)?;
                let entry = format!("{{ from = {}, to = {} }}", quote(f), quote(t));
                if kind == "name" {
                    names.push(entry)
                } else {
                    values.push(entry)
                }
                i += 3;
            }
            other => {
                return Err(NoEquivalent(format!(
                    "unknown answer rule `{}`",
                    other.unwrap_or("")
                )));
            }
        }
    }
    for (key, list) in [("answer_name", names), ("answer_value", values)] {
        if !list.is_empty() {
            let _ = writeln!(toml, "{key} = [{}]", list.join(", "));
        }
    }
    Ok(())
}

/// Whether nodens compiles the rule (its types, classes, groups): a
/// rule it would refuse is listed, not written.
fn compiles(body: &str) -> Result<(), NoEquivalent> {
    let text =
        format!("[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:9\"]\n[[zone.rewrite]]\n{body}");
    crate::config::Config::parse(&text)
        .map(drop)
        .map_err(|e| NoEquivalent(e.message))
}

fn check_regex(text: &str) -> Result<(), NoEquivalent> {
    Regex::new(text)
        .map(drop)
        .map_err(|_| NoEquivalent(format!("`{text}` is not a regular expression nodens reads")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block with every construct: what is written compiles, what is
    /// not is listed with its line and what it changes.
    #[test]
    fn a_block_converts_to_a_configuration_that_compiles() {
        let corefile = ".:53 {\n\
                        bind 127.0.0.1\n\
                        rewrite stop {\n\
                          name regex (.*)\\.a\\.org\\. {1}.b.org.\n\
                          answer name (.*)\\.b\\.org\\. {1}.a.org.\n\
                        }\n\
                        rewrite continue name suffix .x.org .y.org answer auto\n\
                        rewrite edns0 local set 0xffee abc\n\
                        rewrite type HINFO A\n\
                        dns64 64:ff9b:1::/48\n\
                        forward . 127.0.0.1:5300 {\n\
                          except skip.org Other.ORG\n\
                        }\n\
                      }\n";
        let c = crate::convert::convert(corefile, &Default::default(), &|_| None).unwrap();
        let config =
            crate::config::Config::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
        let rules = config.zones[0].rules.as_ref().expect("rules");
        assert_eq!(rules.rewrites.0.len(), 2, "{}", c.toml);
        assert_eq!(rules.except.len(), 2);
        assert_eq!(rules.dns64.as_ref().unwrap().prefix_len, 48);
        let listed = |line: usize, words: &str| {
            c.untranslated
                .iter()
                .any(|f| f.lines.contains(&line) && f.message.contains(words))
        };
        assert!(listed(8, "EDNS0"), "{:?}", c.untranslated);
        assert!(listed(9, "HINFO"), "{:?}", c.untranslated);
        // Translated, with a note on the clients it synthesizes for.
        assert!(
            c.notes
                .iter()
                .any(|f| f.lines.contains(&10) && f.message.contains("allow_ipv4")),
            "{:?}",
            c.notes
        );
        assert!(
            c.toml.contains("except = [\"skip.org\", \"other.org\"]"),
            "{}",
            c.toml
        );
    }

    fn toml(rule_text: &str) -> Result<String, NoEquivalent> {
        let words: Vec<String> = rule_text.split_whitespace().map(String::from).collect();
        rule(&words)
    }

    #[test]
    fn name_rules_become_toml() {
        assert_eq!(
            toml("name a.org b.org").unwrap(),
            "from = \"a.org\"\nto = \"b.org\"\n"
        );
        let t = toml("continue name regex (.*)\\.a\\.org {1}.b.org answer auto").unwrap();
        assert!(
            t.contains("match = \"regex\"")
                && t.contains("answer_auto = true")
                && t.ends_with("continue = true\n"),
            "{t}"
        );
        let t = toml(
            "stop name suffix .a.org .b.org answer name (.*)\\.b\\.org {1}.a.org answer value x y",
        )
        .unwrap();
        assert!(
            t.contains("answer_name = [{ from = ") && t.contains("answer_value"),
            "{t}"
        );
        assert!(
            toml("ttl exact a.org 30")
                .unwrap_err()
                .to_string()
                .contains("TTL")
        );
        assert!(toml("name regex (unclosed x.org").is_err());
        assert!(toml("type A AAAA").unwrap().contains("field = \"type\""));
    }
}
