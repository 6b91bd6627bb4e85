//! A zone's `except`, `[[zone.rewrite]]` and `[zone.dns64]`: their schema
//! and their compilation into the rules the miss path applies
//! (`upstream::rules`). A regular expression that does not compile, or a
//! replacement naming a group the pattern lacks, is an error at its line.

use std::net::IpAddr;

use ipnet::IpNet;
use regex::Regex;
use serde::Deserialize;
use toml::Spanned;

use super::check::Invalid;
use super::file::{File, ZoneConfig};
use crate::rewrite::dns64::Dns64;
use crate::rewrite::{AnswerRule, NameMatch, Next, Rewrites, Rule, normalize};
use crate::upstream::rules::ZoneRules;
use crate::wire::{QTYPE_LABELS, name};

/// One `[[zone.rewrite]]`: CoreDNS's `rewrite [stop|continue] FIELD ...`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewriteConfig {
    /// What is rewritten: the question's `name` (the default), `type` or `class`.
    #[serde(default)]
    pub field: RewriteField,
    /// How a name rule matches (`exact` by default).
    #[serde(default, rename = "match")]
    pub matching: NameMatchKind,
    pub from: Spanned<String>,
    pub to: Spanned<String>,
    /// Map the rewritten name back in the answer (always so for `exact`).
    #[serde(default)]
    pub answer_auto: bool,
    /// `answer name FROM TO`: owner names matching FROM (a regular expression) become TO.
    #[serde(default)]
    pub answer_name: Vec<AnswerConfig>,
    /// `answer value FROM TO`: the names records point at.
    #[serde(default)]
    pub answer_value: Vec<AnswerConfig>,
    /// CoreDNS's `continue`: the next rules apply to the rewritten question
    /// (by default the first rule that matches is the last).
    #[serde(default, rename = "continue")]
    pub and_continue: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerConfig {
    pub from: Spanned<String>,
    pub to: Spanned<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RewriteField {
    #[default]
    Name,
    Type,
    Class,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NameMatchKind {
    #[default]
    Exact,
    Prefix,
    Suffix,
    Substring,
    Regex,
}

/// `[zone.dns64]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dns64Config {
    /// The IPv6 prefix the IPv4 addresses go into.
    #[serde(default = "default_prefix")]
    pub prefix: Spanned<IpNet>,
    /// Synthesize even for names that have AAAA records.
    #[serde(default)]
    pub translate_all: bool,
}

fn default_prefix() -> Spanned<IpNet> {
    Spanned::new(0..0, "64:ff9b::/96".parse().expect("a prefix"))
}

/// A regular expression as CoreDNS's rewrite reads one, and the
/// replacement's `{N}` groups checked against it.
fn pattern(from: &Spanned<String>, to: &str, what: &str) -> Result<Regex, Invalid> {
    let text = from.get_ref();
    let regex = Regex::new(text).map_err(|e| {
        let first = e.to_string();
        let why = first.lines().last().unwrap_or("").trim();
        Invalid::At(
            from.span(),
            format!("{what}: `{text}` is not a regular expression: {why}"),
        )
    })?;
    let groups = regex.captures_len() - 1;
    let used = (0..=100)
        .filter(|i| to.contains(&format!("{{{i}}}")))
        .count();
    if used > groups {
        return Err(Invalid::At(
            from.span(),
            format!("{what}: the replacement `{to}` uses more groups than `{text}` has ({groups})"),
        ));
    }
    Ok(regex)
}

/// A type (`A`, `AAAA`, `TYPE65`) or class (`IN`, `CH`, `CLASS3`) name.
fn numbered(text: &Spanned<String>, class: bool) -> Result<u16, Invalid> {
    let upper = text.get_ref().to_ascii_uppercase();
    let (prefix, named): (&str, Vec<(u16, &str)>) = if class {
        (
            "CLASS",
            vec![(1, "IN"), (3, "CH"), (4, "HS"), (254, "NONE"), (255, "ANY")],
        )
    } else {
        ("TYPE", QTYPE_LABELS.to_vec())
    };
    named
        .iter()
        .find(|(_, n)| *n == upper)
        .map(|(v, _)| *v)
        .or_else(|| upper.strip_prefix(prefix).and_then(|n| n.parse().ok()))
        .ok_or_else(|| {
            let what = if class { "class" } else { "type" };
            Invalid::At(
                text.span(),
                format!("rewrite: `{}` is not a {what}", text.get_ref()),
            )
        })
}

fn rule(r: &RewriteConfig) -> Result<Rule, Invalid> {
    let next = if r.and_continue {
        Next::Continue
    } else {
        Next::Stop
    };
    match r.field {
        RewriteField::Type => {
            return Ok(Rule::Type {
                from: numbered(&r.from, false)?,
                to: numbered(&r.to, false)?,
                next,
            });
        }
        RewriteField::Class => {
            return Ok(Rule::Class {
                from: numbered(&r.from, true)?,
                to: numbered(&r.to, true)?,
                next,
            });
        }
        RewriteField::Name => {}
    }
    let (from, to) = (r.from.get_ref(), normalize(r.to.get_ref()));
    let matcher = match r.matching {
        NameMatchKind::Exact => NameMatch::Exact(normalize(from)),
        NameMatchKind::Prefix => NameMatch::Prefix(normalize(from)),
        NameMatchKind::Suffix => NameMatch::Suffix(normalize(from)),
        NameMatchKind::Substring => NameMatch::Substring(normalize(from)),
        NameMatchKind::Regex => NameMatch::Regex(pattern(&r.from, &to, "rewrite")?),
    };
    if r.answer_auto && !r.answer_name.is_empty() {
        return Err(Invalid::At(
            r.answer_name[0].from.span(),
            "rewrite: answer_auto cannot be combined with answer_name".into(),
        ));
    }
    let mut answers = Vec::new();
    for (list, values) in [(&r.answer_name, false), (&r.answer_value, true)] {
        for a in list {
            let to = normalize(a.to.get_ref());
            answers.push(AnswerRule {
                pattern: pattern(&a.from, &to, "rewrite answer")?,
                to,
                values,
            });
        }
    }
    Ok(Rule::Name {
        matcher,
        to,
        auto: r.answer_auto,
        answers,
        next,
    })
}

fn dns64(d: &Dns64Config) -> Result<Dns64, Invalid> {
    let net = d.prefix.get_ref();
    let len = net.prefix_len();
    match net.network() {
        IpAddr::V6(prefix) if len % 8 == 0 && (32..=96).contains(&len) => Ok(Dns64 {
            prefix,
            prefix_len: len,
            translate_all: d.translate_all,
        }),
        _ => Err(Invalid::At(
            d.prefix.span(),
            format!(
                "dns64.prefix: `{net}` is not an IPv6 prefix of 32 to 96 bits, a multiple of 8"
            ),
        )),
    }
}

impl File {
    /// The zone's rules compiled; `None` for a zone with none.
    pub(super) fn compile_zone_rules(
        &self,
        z: &ZoneConfig,
    ) -> Result<Option<std::sync::Arc<ZoneRules>>, Invalid> {
        let rules = ZoneRules {
            except: z
                .except
                .iter()
                .map(|e| name::from_text(&e.get_ref().0).expect("a checked zone name"))
                .collect(),
            rewrites: Rewrites(z.rewrite.iter().map(rule).collect::<Result<_, _>>()?),
            dns64: z.dns64.as_ref().map(dns64).transpose()?,
        };
        Ok(rules.some())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn a_bad_regex_is_an_error_at_its_line() {
        let text = "[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:9\"]\n\n\
                    [[zone.rewrite]]\nmatch = \"regex\"\nfrom = \"(unclosed\"\nto = \"x.org\"\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 7, "{e}");
        assert!(e.to_string().contains("not a regular expression"), "{e}");
    }

    #[test]
    fn a_replacement_with_too_many_groups_is_refused() {
        let text = "[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:9\"]\n\n\
                    [[zone.rewrite]]\nmatch = \"regex\"\nfrom = \"(a)\\\\.org\"\nto = \"{1}{2}.org\"\n";
        let e = Config::parse(text).unwrap_err();
        assert!(e.to_string().contains("more groups"), "{e}");
    }

    #[test]
    fn rules_compile() {
        let text = "[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:9\"]\nexcept = [\"example.org\"]\n\
                    [zone.dns64]\ntranslate_all = true\n\
                    [[zone.rewrite]]\nfrom = \"a.org\"\nto = \"b.org\"\n\
                    [[zone.rewrite]]\nfield = \"type\"\nfrom = \"A\"\nto = \"AAAA\"\n";
        let config = Config::parse(text).unwrap();
        let rules = config.zones[0].rules.as_ref().unwrap();
        assert_eq!(rules.except.len(), 1);
        assert_eq!(rules.rewrites.0.len(), 2);
        assert!(rules.dns64.as_ref().unwrap().translate_all);
        let bad = "[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:9\"]\n[zone.dns64]\nprefix = \"10.0.0.0/8\"\n";
        assert!(Config::parse(bad).is_err());
    }
}
