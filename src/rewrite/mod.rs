//! A zone's answers shaped beyond plain forwarding, as CoreDNS's
//! `rewrite`, `dns64` and `forward ... except` shape them: the question
//! sent upstream rewritten and its answer's names written back
//! ([`Rewrites`]), AAAA synthesized from A records ([`dns64`]).
//!
//! All of it happens where a miss asks upstream (`upstream::rules`): the
//! cache is keyed and filled by the client's question, so a cache hit never
//! sees a rule. Names are compared in CoreDNS's form: presentation text,
//! lower case, with the trailing dot (`www.example.org.`).
//!
//! Configuration: each zone's `rewrite`, `dns64` and `except` (compiled by
//! `config`'s zone rules into `upstream::rules::ZoneRules`). Request path:
//! only on a miss.

pub(crate) mod dns64;
pub(crate) mod message;

use regex::Regex;

/// What happens after a rule that matched: CoreDNS's `stop` (the default)
/// or `continue` (the next rules see the rewritten question).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Stop,
    Continue,
}

/// How a name rule matches the question's name.
#[derive(Debug, Clone)]
pub(crate) enum NameMatch {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Substring(String),
    /// `{N}` in the replacement is the Nth group of the match.
    Regex(Regex),
}

/// One `rewrite` rule.
#[derive(Debug, Clone)]
pub(crate) enum Rule {
    Name {
        matcher: NameMatch,
        to: String,
        /// `answer auto` (always on for `exact`): the rewritten name is
        /// mapped back in the answer's owner names and name values.
        auto: bool,
        /// `answer name` / `answer value` rules, in the order written.
        answers: Vec<AnswerRule>,
        next: Next,
    },
    /// `rewrite type FROM TO` (and `class`): the question's type changes,
    /// the answer's records stay what they are.
    Type {
        from: u16,
        to: u16,
        next: Next,
    },
    Class {
        from: u16,
        to: u16,
        next: Next,
    },
}

/// `answer name FROM TO` (owner names) or `answer value FROM TO` (the
/// names a record points at), FROM a regular expression.
#[derive(Debug, Clone)]
pub(crate) struct AnswerRule {
    pub(crate) pattern: Regex,
    pub(crate) to: String,
    pub(crate) values: bool,
}

/// A zone's rules, in the order written.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rewrites(pub(crate) Vec<Rule>);

/// How one name of the answer is written back.
#[derive(Debug, Clone)]
enum Mapping {
    /// The rewritten name, or a name below it, back to the original.
    Remap {
        rewritten: String,
        original: String,
    },
    /// A suffix (plain text, as CoreDNS's suffix rewriter) back.
    Suffix {
        suffix: String,
        original: String,
    },
    Regex(Regex, String),
}

impl Mapping {
    fn apply(&self, src: &str) -> Option<String> {
        match self {
            Mapping::Remap {
                rewritten,
                original,
            } => {
                if src == rewritten {
                    return Some(original.clone());
                }
                let i = src.len().checked_sub(rewritten.len())?;
                (i > 0 && src.as_bytes()[i - 1] == b'.' && &src[i..] == rewritten)
                    .then(|| format!("{}{original}", &src[..i]))
            }
            Mapping::Suffix { suffix, original } => src
                .strip_suffix(suffix.as_str())
                .map(|before| format!("{before}{original}")),
            Mapping::Regex(pattern, to) => substitute(pattern, to, src),
        }
    }
}

/// One step of writing an answer back: a mapping, for owner names, name
/// values, or both.
#[derive(Debug, Clone)]
pub(crate) struct Back {
    mapping: Mapping,
    owners: bool,
    values: bool,
}

/// A question as rewritten, and how to write its answer back.
#[derive(Debug)]
pub(crate) struct Rewritten {
    pub(crate) name: String,
    pub(crate) qtype: u16,
    pub(crate) qclass: u16,
    /// Applied to each record in reverse order (the last rule's first).
    back: Vec<Back>,
}

impl Rewritten {
    /// The name a record's `field` (owner or value) gets, if it changes.
    pub(crate) fn write_back(&self, name: &str, value: bool) -> Option<String> {
        let mut current: Option<String> = None;
        for b in self.back.iter().rev() {
            if (value && !b.values) || (!value && !b.owners) {
                continue;
            }
            let src = current.as_deref().unwrap_or(name);
            if let Some(new) = b.mapping.apply(src)
                && new != src
            {
                current = Some(new);
            }
        }
        current
    }
}

/// CoreDNS's regex replacement: `{N}` becomes the Nth group (empty when
/// it took part in no match); `None` when the pattern does not match.
fn substitute(pattern: &Regex, template: &str, src: &str) -> Option<String> {
    let caps = pattern.captures(src)?;
    let mut s = template.to_string();
    for i in 0..caps.len() {
        let group = caps.get(i).map_or("", |m| m.as_str());
        s = s.replace(&format!("{{{i}}}"), group);
    }
    Some(s)
}

/// CoreDNS's `plugin.Name(..).Normalize()`: lower case, a trailing dot.
pub(crate) fn normalize(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let escaped_dot = lower.ends_with("\\.") && !lower.ends_with("\\\\.");
    if lower.ends_with('.') && !escaped_dot {
        lower
    } else {
        lower + "."
    }
}

impl Rewrites {
    /// The question rewritten by the rules in order, `None` when none
    /// matched. `name` is in CoreDNS's form (see the module).
    pub(crate) fn apply(&self, name: &str, qtype: u16, qclass: u16) -> Option<Rewritten> {
        let mut out = Rewritten {
            name: name.to_string(),
            qtype,
            qclass,
            back: Vec::new(),
        };
        let mut done = false;
        for rule in &self.0 {
            let next = match rule {
                Rule::Name {
                    matcher,
                    to,
                    auto,
                    answers,
                    next,
                } => {
                    let Some(new) = rewrite_name(matcher, to, &out.name) else {
                        continue;
                    };
                    let before = std::mem::replace(&mut out.name, new);
                    match matcher {
                        NameMatch::Suffix(suffix) if *auto => out.back.push(Back {
                            mapping: Mapping::Suffix {
                                suffix: to.clone(),
                                original: suffix.clone(),
                            },
                            owners: true,
                            values: true,
                        }),
                        NameMatch::Suffix(_) => {}
                        NameMatch::Exact(_) => out.back.push(remap(&out.name, before)),
                        _ if *auto => out.back.push(remap(&out.name, before)),
                        _ => {}
                    }
                    out.back.extend(answers.iter().map(|a| Back {
                        mapping: Mapping::Regex(a.pattern.clone(), a.to.clone()),
                        owners: !a.values,
                        values: a.values,
                    }));
                    *next
                }
                Rule::Type { from, to, next } => {
                    if out.qtype != *from {
                        continue;
                    }
                    out.qtype = *to;
                    *next
                }
                Rule::Class { from, to, next } => {
                    if out.qclass != *from {
                        continue;
                    }
                    out.qclass = *to;
                    *next
                }
            };
            done = true;
            if next == Next::Stop {
                break;
            }
        }
        done.then_some(out)
    }
}

fn remap(rewritten: &str, original: String) -> Back {
    Back {
        mapping: Mapping::Remap {
            rewritten: rewritten.to_string(),
            original,
        },
        owners: true,
        values: true,
    }
}

/// The name a name rule makes of `name`, if it matches.
fn rewrite_name(matcher: &NameMatch, to: &str, name: &str) -> Option<String> {
    match matcher {
        NameMatch::Exact(from) => (from == name).then(|| to.to_string()),
        NameMatch::Prefix(prefix) => name
            .strip_prefix(prefix.as_str())
            .map(|r| format!("{to}{r}")),
        NameMatch::Suffix(suffix) => name
            .strip_suffix(suffix.as_str())
            .map(|b| format!("{b}{to}")),
        NameMatch::Substring(part) => name.contains(part.as_str()).then(|| name.replace(part, to)),
        NameMatch::Regex(pattern) => substitute(pattern, to, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_rule(matcher: NameMatch, to: &str, auto: bool, next: Next) -> Rule {
        Rule::Name {
            matcher,
            to: to.into(),
            auto,
            answers: Vec::new(),
            next,
        }
    }

    #[test]
    fn exact_rewrites_and_maps_back_always() {
        let rules = Rewrites(vec![name_rule(
            NameMatch::Exact("a.example.org.".into()),
            "b.example.net.",
            false,
            Next::Stop,
        )]);
        assert!(rules.apply("x.example.org.", 1, 1).is_none());
        let r = rules.apply("a.example.org.", 1, 1).unwrap();
        assert_eq!(r.name, "b.example.net.");
        assert_eq!(
            r.write_back("b.example.net.", false).as_deref(),
            Some("a.example.org.")
        );
        assert_eq!(
            r.write_back("_x.b.example.net.", true).as_deref(),
            Some("_x.a.example.org.")
        );
        assert_eq!(r.write_back("other.net.", false), None);
    }

    #[test]
    fn regex_groups_and_answer_auto() {
        let rules = Rewrites(vec![name_rule(
            NameMatch::Regex(Regex::new(r"^(.*)\.foo\.org\.$").unwrap()),
            "{1}.bar.org.",
            true,
            Next::Stop,
        )]);
        let r = rules.apply("www.foo.org.", 1, 1).unwrap();
        assert_eq!(r.name, "www.bar.org.");
        assert_eq!(
            r.write_back("www.bar.org.", false).as_deref(),
            Some("www.foo.org.")
        );
    }

    #[test]
    fn suffix_without_auto_restores_nothing_and_continue_chains() {
        let rules = Rewrites(vec![
            name_rule(
                NameMatch::Suffix(".a.org.".into()),
                ".b.org.",
                false,
                Next::Continue,
            ),
            name_rule(NameMatch::Prefix("www.".into()), "web.", true, Next::Stop),
            Rule::Type {
                from: 1,
                to: 28,
                next: Next::Stop,
            },
        ]);
        let r = rules.apply("www.x.a.org.", 1, 1).unwrap();
        assert_eq!(r.name, "web.x.b.org.");
        // The stop on the prefix rule: the type rule is not reached.
        assert_eq!(r.qtype, 1);
        // Only the prefix rule maps back.
        assert_eq!(
            r.write_back("web.x.b.org.", false).as_deref(),
            Some("www.x.b.org.")
        );
    }

    #[test]
    fn normalize_adds_the_dot_and_folds_case() {
        assert_eq!(normalize("Example.ORG"), "example.org.");
        assert_eq!(normalize("example.org."), "example.org.");
        assert_eq!(normalize(".suffix"), ".suffix.");
    }
}
