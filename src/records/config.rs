//! The schema of a zone's local answers (`[zone.hosts]`, `[[zone.template]]`,
//! `local`) and their compile step: hosts files are read and every line,
//! regular expression and record is checked here, at start, reload and
//! `check-config`, so that an error names its file and line before
//! anything runs with it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::template::{RecordText, Template};
use super::{Fallthrough, HostsPlan, Plan, hosts, rr};
use crate::vocab::position::Step::{Index, Key};
use crate::vocab::values::ZoneName;
use crate::vocab::{Inputs, Invalid};
use crate::wire::{name, rcode};

/// `[zone.hosts]`: records from hosts-file lines (CoreDNS's `hosts`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostsConfig {
    /// Hosts-file lines: `ADDRESS NAME...`.
    #[serde(default)]
    pub entries: Vec<Spanned<String>>,
    /// Hosts files, read at start and followed while running.
    #[serde(default)]
    pub files: Vec<Spanned<PathBuf>>,
    /// The names answered from the records (default: the zone's name).
    #[serde(default)]
    pub zones: Vec<ZoneName>,
    #[serde(default = "default_hosts_ttl", with = "humantime_serde")]
    pub ttl: Duration,
    /// Answer PTR questions for the addresses (CoreDNS's `no_reverse` = false).
    #[serde(default = "yes")]
    pub reverse: bool,
    /// How often the files are checked for changes; 0: never.
    #[serde(default = "default_reload", with = "humantime_serde")]
    pub reload: Duration,
    #[serde(default)]
    pub fallthrough: FallthroughConfig,
}

/// `fallthrough = true`, `false`, or the zones whose names go on.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FallthroughConfig {
    All(bool),
    Zones(Vec<ZoneName>),
}

impl Default for FallthroughConfig {
    fn default() -> Self {
        FallthroughConfig::All(false)
    }
}

/// `[[zone.template]]`: a synthesised answer (CoreDNS's `template`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateConfig {
    /// The question class it answers (`IN`, `CH`, `ANY`).
    #[serde(default = "any")]
    pub class: String,
    /// The question type it answers (`A`, `AAAA`, `ANY`, ...).
    #[serde(rename = "type", default = "any")]
    pub qtype: String,
    /// The zones it answers in (default: the zone's name).
    #[serde(default)]
    pub zones: Vec<ZoneName>,
    /// Regular expressions on the lower-case name with its final dot; the
    /// first that matches answers (default: every name).
    #[serde(default, rename = "match")]
    pub matches: Vec<String>,
    /// `NOERROR`, `NXDOMAIN`, `SERVFAIL`, `REFUSED`, ...
    #[serde(default = "noerror")]
    pub rcode: String,
    #[serde(default)]
    pub answer: Vec<String>,
    #[serde(default)]
    pub additional: Vec<String>,
    /// Unset: an answer without records gets nodens's SOA for the zone
    /// (`records::template::DEFAULT_SOA`); `[]`: none, as CoreDNS.
    #[serde(default)]
    pub authority: Option<Vec<String>>,
    #[serde(default)]
    pub fallthrough: FallthroughConfig,
}

fn default_hosts_ttl() -> Duration {
    Duration::from_secs(3600)
}
fn default_reload() -> Duration {
    Duration::from_secs(5)
}
fn yes() -> bool {
    true
}
fn any() -> String {
    "ANY".into()
}
fn noerror() -> String {
    "NOERROR".into()
}

/// A zone's compiled local answers (`ZonePlan::records`).
#[derive(Debug, Clone)]
pub struct RecordsPlan(pub(crate) Arc<Plan>);

fn wire(z: &ZoneName) -> Box<[u8]> {
    name::from_text(&z.0)
        .expect("a checked zone name")
        .into_boxed_slice()
}

fn fallthrough(f: &FallthroughConfig) -> Fallthrough {
    match f {
        FallthroughConfig::All(false) => Fallthrough::None,
        FallthroughConfig::All(true) => Fallthrough::All,
        FallthroughConfig::Zones(z) if z.is_empty() => Fallthrough::All,
        FallthroughConfig::Zones(z) => Fallthrough::Zones(z.iter().map(wire).collect()),
    }
}

fn rcode_of(text: &str) -> Option<u16> {
    Some(match text.to_ascii_uppercase().as_str() {
        "NOERROR" => rcode::NOERROR,
        "FORMERR" => 1,
        "SERVFAIL" => rcode::SERVFAIL,
        "NXDOMAIN" => rcode::NXDOMAIN,
        "NOTIMP" => 4,
        "REFUSED" => rcode::REFUSED,
        _ => return None,
    })
}

/// What of a zone's section (`[[zone]]` number `index`) its local answers
/// are compiled from.
pub(crate) struct Zone<'a> {
    pub name: &'a ZoneName,
    pub hosts: Option<&'a HostsConfig>,
    pub templates: &'a [TemplateConfig],
    pub local: bool,
    pub whoami: bool,
}

/// Compiles zone `index`'s local answers; `None` when it has none. Reads
/// its hosts files (a bad one is skipped at a start: `inputs`).
pub(crate) fn compile(
    index: usize,
    z: Zone<'_>,
    inputs: &Inputs,
) -> Result<Option<RecordsPlan>, Invalid> {
    if z.hosts.is_none() && z.templates.is_empty() && !z.local && !z.whoami {
        return Ok(None);
    }
    let own = vec![wire(z.name)];
    let hosts = z
        .hosts
        .map(|h| compile_hosts(index, h, &own, inputs))
        .transpose()?;
    let templates = z
        .templates
        .iter()
        .enumerate()
        .map(|(j, t)| compile_template(index, j, t, z.name))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(RecordsPlan(Arc::new(Plan {
        local: z.local,
        templates,
        hosts,
        whoami: z.whoami,
    }))))
}

fn compile_hosts(
    index: usize,
    h: &HostsConfig,
    own: &[Box<[u8]>],
    inputs: &Inputs,
) -> Result<HostsPlan, Invalid> {
    let zones: Vec<Box<[u8]>> = if h.zones.is_empty() {
        own.to_vec()
    } else {
        h.zones.iter().map(wire).collect()
    };
    let ttl = h.ttl.as_secs();
    if ttl == 0 || ttl > u64::from(u32::MAX) {
        return Err(hosts_error(
            index,
            "ttl",
            "hosts.ttl: between 1s and 2^32-1 s",
        ));
    }
    let mut inline = String::new();
    for e in &h.entries {
        inline.push_str(e.get_ref());
        inline.push('\n');
    }
    let inline = hosts::HostsData::parse(&inline, &zones, h.reverse).map_err(|e| {
        let span = h.entries[e.line - 1].span();
        Invalid::At(span, format!("hosts.entries: {}", e.message))
    })?;
    let files = h
        .files
        .iter()
        .map(|f| {
            let (data, stamp) = match hosts::read_file(f.get_ref(), &zones, h.reverse) {
                Ok(read) => read,
                // At a start: no records from it; its reload (a new
                // stamp) or a SIGHUP reads it again.
                Err(why) if inputs.lenient() => {
                    inputs.skip(format!("{why}; no records from it until it reads well"));
                    (hosts::HostsData::default(), None)
                }
                Err(why) => return Err(Invalid::At(f.span(), why.to_string())),
            };
            Ok((f.get_ref().clone(), Arc::new(data), stamp))
        })
        .collect::<Result<Vec<_>, Invalid>>()?;
    Ok(HostsPlan {
        zones,
        ttl: ttl as u32,
        reverse: h.reverse,
        reload: h.reload,
        fallthrough: fallthrough(&h.fallthrough),
        inline,
        files,
    })
}

fn hosts_error(index: usize, field: &'static str, message: &str) -> Invalid {
    Invalid::Key(
        vec![Key("zone"), Index(index), Key("hosts"), Key(field)],
        message.into(),
    )
}

fn compile_template(
    index: usize,
    j: usize,
    t: &TemplateConfig,
    zone: &ZoneName,
) -> Result<Template, Invalid> {
    let fail = |field: &'static str, message: String| {
        Invalid::Key(
            vec![
                Key("zone"),
                Index(index),
                Key("template"),
                Index(j),
                Key(field),
            ],
            format!("template: {message}"),
        )
    };
    let qclass = rr::class_code(&t.class)
        .ok_or_else(|| fail("class", format!("`{}` is not a class", t.class)))?;
    let qtype = match t.qtype.to_ascii_uppercase().as_str() {
        "ANY" => 255,
        "HTTPS" => 65,
        "SVCB" => 64,
        other => rr::type_code(other)
            .ok_or_else(|| fail("type", format!("`{}` is not a type nodens knows", t.qtype)))?,
    };
    let rcode = rcode_of(&t.rcode)
        .ok_or_else(|| fail("rcode", format!("`{}` is not a response code", t.rcode)))?;
    let regex = if t.matches.is_empty() {
        vec![regex::Regex::new(".*").expect("a valid regex")]
    } else {
        t.matches
            .iter()
            .map(|m| regex::Regex::new(m).map_err(|e| fail("match", format!("`{m}`: {e}"))))
            .collect::<Result<_, _>>()?
    };
    let records = |field: &'static str, list: &[String]| {
        list.iter()
            .map(|text| {
                let compiled = RecordText::compile(text).map_err(|e| fail(field, e.to_string()))?;
                // The record with every field filled in must be one nodens can write.
                let sample = text
                    .replace("{{ .Name }}", "a.example.")
                    .replace("{{ .Zone }}", "example.");
                if !sample.contains("{{") {
                    rr::parse(&sample).map_err(|e| fail(field, e.to_string()))?;
                }
                Ok(compiled)
            })
            .collect::<Result<Vec<_>, Invalid>>()
    };
    let zones = if t.zones.is_empty() {
        vec![zone.clone()]
    } else {
        t.zones.clone()
    };
    Ok(Template {
        zones: zones.iter().map(|n| (wire(n), n.0.clone())).collect(),
        qclass,
        qtype,
        regex,
        rcode,
        answer: records("answer", &t.answer)?,
        additional: records("additional", &t.additional)?,
        authority: t
            .authority
            .as_ref()
            .map(|a| records("authority", a))
            .transpose()?,
        fallthrough: fallthrough(&t.fallthrough),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn zone(extra: &str) -> String {
        format!("[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1\"]\n{extra}")
    }

    #[test]
    fn hosts_entries_and_files_compile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, "10.0.0.1 a.example\n").unwrap();
        let text = zone(&format!(
            "[zone.hosts]\nentries = [\"10.0.0.2 b.example\"]\nfiles = [\"{}\"]\nfallthrough = [\"example\"]\n",
            path.display()
        ));
        let c = Config::parse(&text).unwrap();
        let plan = &c.zones[0].records.as_ref().unwrap().0;
        let hosts = plan.hosts.as_ref().unwrap();
        assert_eq!(hosts.inline.len(), 1);
        assert_eq!(hosts.files[0].1.len(), 1);
        assert_eq!(hosts.ttl, 3600);
    }

    #[test]
    fn a_bad_hosts_line_names_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, "10.0.0.1 a.example\n\n10.0.0.256 b\n").unwrap();
        let text = zone(&format!("[zone.hosts]\nfiles = [\"{}\"]\n", path.display()));
        let e = Config::parse(&text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 5, "{e}");
        assert!(e.message.contains("line 3"), "{e}");
        assert!(e.message.contains(&path.display().to_string()), "{e}");
        let e = Config::parse(&zone(
            "[zone.hosts]\nentries = [\n\"10.0.0.1 a\",\n\"nope b\"]\n",
        ))
        .unwrap_err();
        assert_eq!(e.position.unwrap().0, 7, "{e}");
    }

    #[test]
    fn template_errors_name_the_field() {
        let e = Config::parse(&zone(
            "[[zone.template]]\ntype = \"AAAA\"\nmatch = [\"(\"]\n",
        ))
        .unwrap_err();
        assert_eq!(e.position.unwrap().0, 6, "{e}");
        let e = Config::parse(&zone(
            "[[zone.template]]\ntype = \"A\"\nanswer = [\"{{ .Name }} 60 IN A 10.0.0\"]\n",
        ))
        .unwrap_err();
        assert_eq!(e.position.unwrap().0, 6, "{e}");
        let e = Config::parse(&zone("[[zone.template]]\nrcode = \"NOPE\"\n")).unwrap_err();
        assert_eq!(e.position.unwrap().0, 5, "{e}");
        assert!(Config::parse(&zone("local = true\n[[zone.template]]\ntype = \"AAAA\"\n")).is_ok());
    }
}
