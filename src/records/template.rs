//! Synthesised answers (CoreDNS's `template`): a rule matches a question
//! by zone, class, type and a regular expression on the lower-case name
//! with its final dot, and answers with a response code and records
//! written as text with `{{ .Name }}`-style fields, without asking
//! upstream. The fields: `.Name`, `.Zone`, `.Class`, `.Type`, `.Regex`,
//! `.Remote`, `index .Match N` and `.Group.NAME` / `index .Group "NAME"`
//! (the regular expression's groups), as CoreDNS's Go templates name them.

use regex::Regex;

use super::Fallthrough;
use super::rr::{self, Rr};
use crate::search::names::suffix_at;
use crate::wire::{class, name, rcode, rtype};

/// `ANY` as a class or type: matches every question.
const ANY: u16 = 255;

/// What the text of a record says at one place.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Name,
    Zone,
    Class,
    Type,
    Regex,
    Remote,
    Match(usize),
    Group(String),
}

/// Why a record template is not one nodens can fill in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadTemplate {
    #[error("`{0}`: `{{{{` is not closed")]
    Open(String),
    #[error(
        "`{text}`: `{{{{ {action} }}}}` is not a field nodens fills in (.Name, .Zone, .Class, .Type, .Regex, .Remote, index .Match N, .Group.NAME)"
    )]
    Field { text: String, action: String },
}

/// A record to write, with its fields still to fill in.
#[derive(Debug, Clone)]
pub(crate) struct RecordText {
    pieces: Vec<Piece>,
}

impl RecordText {
    /// Compiles `text`; the record is checked now with sample values.
    pub(crate) fn compile(text: &str) -> Result<RecordText, BadTemplate> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| BadTemplate::Open(text.to_string()))?;
            let action = after[..close]
                .trim_start_matches('-')
                .trim_end_matches('-')
                .trim();
            pieces.push(action_piece(action).ok_or_else(|| BadTemplate::Field {
                text: text.to_string(),
                action: action.to_string(),
            })?);
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        let compiled = RecordText { pieces };
        Ok(compiled)
    }

    fn render(&self, data: &Data<'_>) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Name => out.push_str(data.name),
                Piece::Zone => out.push_str(data.zone),
                Piece::Class => out.push_str(data.class),
                Piece::Type => out.push_str(data.qtype),
                Piece::Regex => out.push_str(data.regex),
                Piece::Remote => out.push_str(data.remote),
                Piece::Match(i) => out.push_str(data.group(*i)),
                Piece::Group(n) => out.push_str(data.named(n)),
            }
        }
        out
    }
}

fn action_piece(action: &str) -> Option<Piece> {
    let words: Vec<&str> = action.split_whitespace().collect();
    Some(match words.as_slice() {
        [".Name"] => Piece::Name,
        [".Zone"] => Piece::Zone,
        [".Class"] => Piece::Class,
        [".Type"] => Piece::Type,
        [".Regex"] => Piece::Regex,
        [".Remote"] => Piece::Remote,
        ["index", ".Match", n] => Piece::Match(n.parse().ok()?),
        ["index", ".Group", n] => Piece::Group(n.trim_matches('"').to_string()),
        [field] => Piece::Group(field.strip_prefix(".Group.")?.to_string()),
        _ => return None,
    })
}

/// The values a record's fields are filled with.
struct Data<'a> {
    name: &'a str,
    zone: &'a str,
    class: &'a str,
    qtype: &'a str,
    regex: &'a str,
    remote: &'a str,
    captures: Option<regex::Captures<'a>>,
    names: &'a Regex,
}

impl Data<'_> {
    fn group(&self, i: usize) -> &str {
        self.captures
            .as_ref()
            .and_then(|c| c.get(i))
            .map_or("", |m| m.as_str())
    }

    fn named(&self, n: &str) -> &str {
        if let Ok(i) = n.parse::<usize>() {
            return self.group(i);
        }
        if !self.names.capture_names().any(|c| c == Some(n)) {
            return "";
        }
        self.captures
            .as_ref()
            .and_then(|c| c.name(n))
            .map_or("", |m| m.as_str())
    }
}

/// One `template` rule.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    /// (wire, text) of each zone it answers in.
    pub(crate) zones: Vec<(Box<[u8]>, String)>,
    pub(crate) qclass: u16,
    pub(crate) qtype: u16,
    pub(crate) regex: Vec<Regex>,
    pub(crate) rcode: u16,
    pub(crate) answer: Vec<RecordText>,
    pub(crate) additional: Vec<RecordText>,
    /// None: nodens's own SOA for an answer without records.
    pub(crate) authority: Option<Vec<RecordText>>,
    pub(crate) fallthrough: Fallthrough,
}

/// What a template's rule says about a question.
pub(crate) enum Outcome {
    /// Not this rule's question: the next rule.
    Next,
    /// The answer.
    Answer {
        rcode: u16,
        answer: Vec<Rr>,
        authority: Vec<Rr>,
        additional: Vec<Rr>,
    },
    /// The regex did not match and there is no fallthrough: SERVFAIL.
    Fail,
    /// A record did not render into a valid one: SERVFAIL (logged).
    Broken(rr::BadRecord),
}

/// The SOA nodens writes for an answer without records when the rule
/// gives no `authority`: owned by the zone, 30 s TTL and negative TTL.
pub(crate) const DEFAULT_SOA: &str =
    "{{ .Zone }} 30 IN SOA localhost. hostmaster.localhost. 1 3600 600 86400 30";

fn class_name(c: u16) -> &'static str {
    match c {
        class::IN => "IN",
        class::CH => "CH",
        4 => "HS",
        254 => "NONE",
        _ => "ANY",
    }
}

fn type_name(t: u16) -> String {
    match t {
        rtype::A => "A".into(),
        rtype::NS => "NS".into(),
        rtype::CNAME => "CNAME".into(),
        rtype::SOA => "SOA".into(),
        rtype::PTR => "PTR".into(),
        rtype::MX => "MX".into(),
        rtype::TXT => "TXT".into(),
        rtype::AAAA => "AAAA".into(),
        rtype::SRV => "SRV".into(),
        ANY => "ANY".into(),
        65 => "HTTPS".into(),
        64 => "SVCB".into(),
        other => format!("TYPE{other}"),
    }
}

impl Template {
    /// Whether `folded` (wire, lower case) is in one of the rule's zones.
    pub(crate) fn zone_of(&self, folded: &[u8]) -> Option<&str> {
        self.zones
            .iter()
            .filter(|(wire, _)| suffix_at(folded, wire).is_some())
            .max_by_key(|(wire, _)| wire.len())
            .map(|(_, text)| text.as_str())
    }

    /// Matches the question of `folded` (its name as text: `text`).
    pub(crate) fn apply(
        &self,
        folded: &[u8],
        text: &str,
        qclass: u16,
        qtype: u16,
        remote: &str,
    ) -> Outcome {
        let Some(zone) = self.zone_of(folded) else {
            return Outcome::Next;
        };
        if self.qclass != ANY && qclass != ANY && qclass != self.qclass {
            return Outcome::Next;
        }
        if self.qtype != ANY && qtype != ANY && qtype != self.qtype {
            return Outcome::Next;
        }
        let Some(regex) = self.regex.iter().find(|r| r.is_match(text)) else {
            return if self.fallthrough.through(folded) {
                Outcome::Next
            } else {
                Outcome::Fail
            };
        };
        if self.rcode == rcode::SERVFAIL {
            return Outcome::Answer {
                rcode: rcode::SERVFAIL,
                answer: Vec::new(),
                authority: Vec::new(),
                additional: Vec::new(),
            };
        }
        let qtype_name = type_name(if qtype == ANY { self.qtype } else { qtype });
        let data = Data {
            name: text,
            zone,
            class: class_name(if qclass == ANY { self.qclass } else { qclass }),
            qtype: &qtype_name,
            regex: regex.as_str(),
            remote,
            captures: regex.captures(text),
            names: regex,
        };
        let render = |list: &[RecordText]| -> Result<Vec<Rr>, rr::BadRecord> {
            list.iter().map(|r| rr::parse(&r.render(&data))).collect()
        };
        let answer = match render(&self.answer) {
            Ok(a) => a,
            Err(e) => return Outcome::Broken(e),
        };
        let authority = match &self.authority {
            Some(list) => render(list),
            None if answer.is_empty() => {
                render(&[RecordText::compile(DEFAULT_SOA).expect("a valid record")])
            }
            None => Ok(Vec::new()),
        };
        let authority = match authority {
            Ok(a) => a,
            Err(e) => return Outcome::Broken(e),
        };
        let additional = match render(&self.additional) {
            Ok(a) => a,
            Err(e) => return Outcome::Broken(e),
        };
        Outcome::Answer {
            rcode: self.rcode,
            answer,
            authority,
            additional,
        }
    }
}

/// The name as templates see it: lower case, with its final dot.
pub(crate) fn name_text(folded: &[u8]) -> String {
    name::to_text(folded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(regex: &str, answer: &[&str], fallthrough: Fallthrough) -> Template {
        Template {
            zones: vec![(
                name::from_text("example.org").unwrap().into(),
                "example.org.".into(),
            )],
            qclass: class::IN,
            qtype: rtype::A,
            regex: vec![Regex::new(regex).unwrap()],
            rcode: rcode::NOERROR,
            answer: answer
                .iter()
                .map(|a| RecordText::compile(a).unwrap())
                .collect(),
            additional: Vec::new(),
            authority: None,
            fallthrough,
        }
    }

    fn ask(t: &Template, name: &str, qtype: u16) -> Outcome {
        let wire = name::from_text(name).unwrap();
        t.apply(&wire, &name_text(&wire), class::IN, qtype, "10.0.0.9")
    }

    #[test]
    fn groups_fill_the_answer() {
        let t = rule(
            r"^ip-(?P<a>\d+)-(\d+)\.example\.org\.$",
            &["{{ .Name }} 60 IN A 10.0.{{ .Group.a }}.{{ index .Match 2 }}"],
            Fallthrough::None,
        );
        let Outcome::Answer {
            answer, authority, ..
        } = ask(&t, "IP-3-4.example.org", rtype::A)
        else {
            panic!("no answer")
        };
        assert_eq!(answer[0].rdata, [10, 0, 3, 4]);
        assert_eq!(answer[0].ttl, 60);
        assert!(authority.is_empty());
        assert!(matches!(ask(&t, "x.example.org", rtype::A), Outcome::Fail));
        assert!(matches!(
            ask(&t, "ip-3-4.example.org", rtype::AAAA),
            Outcome::Next
        ));
        assert!(matches!(
            ask(&t, "ip-3-4.example.com", rtype::A),
            Outcome::Next
        ));
        let t = rule(r"^ip-", &["{{ .Name }} 60 IN A 10.0.0.1"], Fallthrough::All);
        assert!(matches!(ask(&t, "x.example.org", rtype::A), Outcome::Next));
    }

    #[test]
    fn no_records_get_the_default_soa() {
        let t = rule(".*", &[], Fallthrough::None);
        let Outcome::Answer {
            answer, authority, ..
        } = ask(&t, "a.example.org", rtype::A)
        else {
            panic!("no answer")
        };
        assert!(answer.is_empty());
        assert_eq!(authority[0].rtype, rtype::SOA);
        assert_eq!(authority[0].owner, name::from_text("example.org").unwrap());
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(RecordText::compile("{{ .Meta \"x\" }} A 1.2.3.4").is_err());
        assert!(RecordText::compile("{{ .Name ").is_err());
        assert!(RecordText::compile("{{- .Name -}} 5 IN A 1.2.3.4").is_ok());
    }
}
