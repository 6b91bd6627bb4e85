//! The query log's configuration: where lines go and in what form (the
//! global `[query_log]`, one sink for the process), and which queries of a
//! zone are logged (`[zone.query_log]`: on or off, the answer classes,
//! the sample rate). Every bad value is a deserialisation error, which
//! carries its line.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

/// The least `max_size` taken (a smaller one is raised to it).
pub(crate) const MIN_MAX_SIZE: u64 = 64 * 1024;

/// `[query_log]`: the sink every zone's lines go to.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct QueryLogConfig {
    /// "stdout" (the container log), "stderr", or a file path (appended to).
    pub output: QueryLogOutput,
    pub format: QueryLogFormat,
    /// Records waiting for the writer at most; beyond, a record is dropped
    /// and counted, the query goes on.
    pub queue: QueueSize,
    /// The classes logged for queries that reach no zone: refused by the
    /// allow list, malformed, or in no zone. Empty (the default): none.
    pub unzoned: Vec<Class>,
    /// A file output's size at most: past it the file is renamed to
    /// `<output>.1` (replacing the last one) and a new one started.
    pub max_size: bytesize::ByteSize,
}

impl Default for QueryLogConfig {
    fn default() -> Self {
        QueryLogConfig {
            output: QueryLogOutput::Stdout,
            format: QueryLogFormat::Text,
            queue: QueueSize(16_384),
            unzoned: Vec::new(),
            max_size: bytesize::ByteSize::mib(100),
        }
    }
}

/// Where the query log's lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryLogOutput {
    Stdout,
    Stderr,
    File(PathBuf),
}

impl<'de> Deserialize<'de> for QueryLogOutput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "stdout" => QueryLogOutput::Stdout,
            "stderr" => QueryLogOutput::Stderr,
            "" => {
                return Err(serde::de::Error::custom(
                    "query_log.output: \"stdout\", \"stderr\" or a file path",
                ));
            }
            path => QueryLogOutput::File(PathBuf::from(path)),
        })
    }
}

/// The form of a line: CoreDNS's `log` common format with nodens's fields
/// after it, or one JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryLogFormat {
    Text,
    Json,
}

/// The queue's length: 1 to 1,048,576 records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSize(pub usize);

impl<'de> Deserialize<'de> for QueueSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(d)?;
        if !(1..=1 << 20).contains(&n) {
            return Err(serde::de::Error::custom(
                "query_log.queue: from 1 to 1048576 records",
            ));
        }
        Ok(QueueSize(n as usize))
    }
}

/// CoreDNS's response classes (`log`'s `class` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// NOERROR with an answer (or a delegation).
    Success,
    /// NXDOMAIN, or NOERROR without an answer (NODATA).
    Denial,
    /// Every other response code (SERVFAIL, REFUSED, FORMERR, ...).
    Error,
    All,
}

/// `[zone.query_log]`: whether and which of the zone's queries are logged.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ZoneQueryLogConfig {
    /// Off keeps the table in the file and logs nothing.
    pub enabled: bool,
    pub classes: Vec<Class>,
    /// 1 in N queries (an integer N >= 1), or a fraction (0 < f <= 1).
    pub sample: Sample,
}

impl Default for ZoneQueryLogConfig {
    fn default() -> Self {
        ZoneQueryLogConfig {
            enabled: true,
            classes: vec![Class::All],
            sample: Sample(1.0),
        }
    }
}

/// The share of queries logged, in (0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample(pub f64);

impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            OneIn(u64),
            Fraction(f64),
        }
        let bad = || {
            serde::de::Error::custom(
                "sample: an integer N >= 1 (1 in N queries) or a fraction in (0, 1]",
            )
        };
        match Written::deserialize(d).map_err(|_: D::Error| bad())? {
            Written::OneIn(0) => Err(bad()),
            Written::OneIn(n) => Ok(Sample(1.0 / n as f64)),
            Written::Fraction(f) if f > 0.0 && f <= 1.0 => Ok(Sample(f)),
            Written::Fraction(_) => Err(bad()),
        }
    }
}

/// A zone's query log, compiled: the class bits and the sampling threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneLogPlan {
    /// Bit `1 << class` for each class logged (success 0, denial 1, error 2).
    pub classes: u8,
    /// A query is logged when a 32-bit random number is below this (2^32: all).
    pub threshold: u64,
}

/// The class bits of a list of classes.
pub(crate) fn class_bits(classes: &[Class]) -> u8 {
    classes.iter().fold(0, |bits, c| {
        bits | match c {
            Class::Success => 1,
            Class::Denial => 2,
            Class::Error => 4,
            Class::All => 7,
        }
    })
}

impl ZoneQueryLogConfig {
    /// `None` when the zone logs nothing.
    pub(crate) fn compile(&self) -> Option<ZoneLogPlan> {
        let classes = class_bits(&self.classes);
        (self.enabled && classes != 0).then(|| ZoneLogPlan {
            classes,
            threshold: (self.sample.0 * (1u64 << 32) as f64).round() as u64,
        })
    }
}

/// The query log as the server runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryLogPlan {
    pub output: QueryLogOutput,
    pub format: QueryLogFormat,
    pub queue: usize,
    /// What is logged of the queries that reach no zone.
    pub unzoned: Option<ZoneLogPlan>,
    /// A file output's size at most, in bytes (at least [`MIN_MAX_SIZE`]:
    /// a write of the writer's, a few KiB, always fits a new file).
    pub max_size: u64,
}

impl QueryLogConfig {
    pub(crate) fn compile(&self) -> QueryLogPlan {
        let classes = class_bits(&self.unzoned);
        QueryLogPlan {
            output: self.output.clone(),
            format: self.format,
            queue: self.queue.0,
            unzoned: (classes != 0).then_some(ZoneLogPlan {
                classes,
                threshold: 1 << 32,
            }),
            max_size: self.max_size.as_u64().max(MIN_MAX_SIZE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(text: &str) -> Result<ZoneQueryLogConfig, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn sample_is_one_in_n_or_a_fraction() {
        assert_eq!(zone("sample = 4").unwrap().sample, Sample(0.25));
        assert_eq!(zone("sample = 0.5").unwrap().sample, Sample(0.5));
        for bad in ["sample = 0", "sample = 1.5", "sample = 0.0", "sample = -2"] {
            let e = zone(bad).unwrap_err().to_string();
            assert!(e.contains("1 in N"), "{bad}: {e}");
        }
    }

    #[test]
    fn classes_compile_to_bits_and_off_is_none() {
        let plan = zone("classes = [\"denial\", \"error\"]").unwrap().compile();
        assert_eq!(plan.unwrap().classes, 6);
        assert_eq!(plan.unwrap().threshold, 1 << 32);
        assert!(zone("enabled = false").unwrap().compile().is_none());
        assert!(zone("classes = []").unwrap().compile().is_none());
        assert!(zone("classes = [\"some\"]").is_err());
    }

    #[test]
    fn output_and_queue_are_checked() {
        let c: QueryLogConfig = toml::from_str("output = \"/tmp/q.log\"\nqueue = 8").unwrap();
        assert_eq!(c.output, QueryLogOutput::File("/tmp/q.log".into()));
        assert!(toml::from_str::<QueryLogConfig>("queue = 0").is_err());
        assert!(toml::from_str::<QueryLogConfig>("output = \"\"").is_err());
    }
}
