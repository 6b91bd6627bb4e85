//! A record as a line: CoreDNS's `log` common format followed by nodens's
//! fields as `key=value`, or one JSON object. Runs on the writer thread.

use std::fmt::Write as _;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::config::QueryLogFormat;
use super::record::Record;
use crate::listen::Proto;
use crate::wire::{QTYPE_LABELS, flag, name, rcode_name};

/// The pod a client address belongs to, when the pod watch knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pod<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
}

/// Appends the line of `record` (newline included) to `out`.
pub(crate) fn line(
    format: QueryLogFormat,
    record: &Record,
    pod: Option<Pod<'_>>,
    clock: &Clock,
    out: &mut String,
) {
    match format {
        QueryLogFormat::Text => text(record, pod, out),
        QueryLogFormat::Json => json(record, pod, clock, out),
    }
    out.push('\n');
}

/// CoreDNS's common log format:
/// `[INFO] client:port - id "TYPE CLASS name. proto size do bufsize" RCODE flags rsize durations`,
/// then `zone=`, `source=` and, when known, `namespace=` and `pod=`.
fn text(r: &Record, pod: Option<Pod<'_>>, out: &mut String) {
    let _ = write!(
        out,
        "[INFO] {} - {} \"{} {} {} {} {} {} {}\" {} {} {} {}s zone={} source={}",
        r.client,
        r.id,
        qtype_name(r.qtype),
        class_name(r.qclass),
        name::to_text(r.name()),
        proto_name(r.proto),
        r.size,
        r.dnssec_ok,
        r.bufsize,
        rcode_text(r.rcode),
        flags_text(r.flags),
        r.rsize,
        r.duration.as_secs_f64(),
        r.zone.as_deref().unwrap_or("-"),
        r.source.name(),
    );
    if let Some(pod) = pod {
        let _ = write!(out, " namespace={} pod={}", pod.namespace, pod.name);
    }
}

/// One JSON object a line.
#[derive(Serialize)]
struct JsonLine<'a> {
    time: String,
    client: String,
    port: u16,
    id: u16,
    #[serde(rename = "type")]
    qtype: String,
    class: String,
    name: String,
    proto: &'static str,
    size: u16,
    #[serde(rename = "do")]
    dnssec_ok: bool,
    bufsize: u16,
    rcode: String,
    flags: String,
    rsize: u32,
    duration: f64,
    zone: Option<&'a str>,
    source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<&'a str>,
}

fn json(r: &Record, pod: Option<Pod<'_>>, clock: &Clock, out: &mut String) {
    let line = JsonLine {
        time: clock.rfc3339(r.started),
        client: r.client.ip().to_string(),
        port: r.client.port(),
        id: r.id,
        qtype: qtype_name(r.qtype),
        class: class_name(r.qclass),
        name: name::to_text(r.name()),
        proto: proto_name(r.proto),
        size: r.size,
        dnssec_ok: r.dnssec_ok,
        bufsize: r.bufsize,
        rcode: rcode_text(r.rcode),
        flags: flags_text(r.flags),
        rsize: r.rsize,
        duration: r.duration.as_secs_f64(),
        zone: r.zone.as_deref(),
        source: r.source.name(),
        namespace: pod.map(|p| p.namespace),
        pod: pod.map(|p| p.name),
    };
    out.push_str(&serde_json::to_string(&line).expect("a line serialises"));
}

fn proto_name(proto: Proto) -> &'static str {
    match proto {
        Proto::Udp => "udp",
        Proto::Tcp => "tcp",
    }
}

/// Types with a mnemonic beside those of the metrics' table.
const MORE_TYPES: [(u16, &str); 12] = [
    (10, "NULL"),
    (13, "HINFO"),
    (35, "NAPTR"),
    (39, "DNAME"),
    (41, "OPT"),
    (52, "TLSA"),
    (59, "CDS"),
    (60, "CDNSKEY"),
    (64, "SVCB"),
    (99, "SPF"),
    (256, "URI"),
    (257, "CAA"),
];

/// The type's mnemonic, or `TYPEn` (RFC 3597) as CoreDNS writes it.
fn qtype_name(qtype: u16) -> String {
    QTYPE_LABELS
        .iter()
        .chain(&MORE_TYPES)
        .find(|(t, _)| *t == qtype)
        .map_or_else(|| format!("TYPE{qtype}"), |(_, label)| (*label).to_string())
}

fn class_name(class: u16) -> String {
    match class {
        1 => "IN".into(),
        3 => "CH".into(),
        4 => "HS".into(),
        254 => "NONE".into(),
        255 => "ANY".into(),
        n => format!("CLASS{n}"),
    }
}

fn rcode_text(code: u16) -> String {
    match rcode_name(code) {
        "other" => format!("RCODE{code}"),
        known => known.to_string(),
    }
}

/// The reply's flags as CoreDNS's `{>rflags}` lists them ("qr,rd,ra").
fn flags_text(flags: u16) -> String {
    const NAMES: [(u16, &str); 8] = [
        (flag::QR, "qr"),
        (flag::AA, "aa"),
        (flag::TC, "tc"),
        (flag::RD, "rd"),
        (flag::RA, "ra"),
        (0x0040, "z"),
        (0x0020, "ad"),
        (0x0010, "cd"),
    ];
    let set: Vec<&str> = NAMES
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(",")
    }
}

/// Turns a query's arrival [`Instant`] into wall-clock time: one reading
/// of both clocks, taken when the writer wakes.
pub(crate) struct Clock {
    instant: Instant,
    system: SystemTime,
}

impl Clock {
    pub(crate) fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            system: SystemTime::now(),
        }
    }

    /// `at` in RFC 3339, UTC, to the microsecond.
    fn rfc3339(&self, at: Instant) -> String {
        let wall = self.system - self.instant.saturating_duration_since(at);
        let since = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (days, rest) = (secs / 86_400, secs % 86_400);
        let (y, m, d) = civil_from_days(days as i64);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
            rest / 3600,
            rest / 60 % 60,
            rest % 60,
            since.subsec_micros()
        )
    }
}

/// The calendar date of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::answered::Source;

    fn record() -> Record {
        let wire = b"\x03Www\x07example\x00";
        let mut name = [0; 255];
        name[..wire.len()].copy_from_slice(wire);
        Record {
            zone: Some(Arc::from("example.")),
            client: "[fd00::7]:5353".parse().unwrap(),
            started: Instant::now(),
            duration: Duration::from_micros(250),
            name,
            name_len: wire.len() as u8,
            id: 4242,
            qtype: 28,
            qclass: 1,
            proto: Proto::Udp,
            size: 40,
            dnssec_ok: true,
            bufsize: 1232,
            rcode: 3,
            flags: flag::QR | flag::RD | flag::RA,
            rsize: 99,
            source: Source::Upstream,
        }
    }

    #[test]
    fn text_is_coredns_common_format_then_extras() {
        let mut out = String::new();
        let pod = Pod {
            namespace: "team-a",
            name: "web-1",
        };
        line(
            QueryLogFormat::Text,
            &record(),
            Some(pod),
            &Clock::now(),
            &mut out,
        );
        assert_eq!(
            out,
            "[INFO] [fd00::7]:5353 - 4242 \"AAAA IN Www.example. udp 40 true 1232\" NXDOMAIN qr,rd,ra 99 0.00025s zone=example. source=upstream namespace=team-a pod=web-1\n"
        );
    }

    #[test]
    fn json_has_every_field_and_omits_an_unknown_pod() {
        let mut out = String::new();
        let mut r = record();
        r.qtype = 65_000;
        r.zone = None;
        line(QueryLogFormat::Json, &r, None, &Clock::now(), &mut out);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["client"], "fd00::7");
        assert_eq!(v["port"], 5353);
        assert_eq!(v["type"], "TYPE65000");
        assert_eq!(v["name"], "Www.example.");
        assert_eq!(v["rcode"], "NXDOMAIN");
        assert_eq!(v["do"], true);
        assert_eq!(v["zone"], serde_json::Value::Null);
        assert!(v.get("pod").is_none());
        assert!(v["time"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn dates_from_day_counts() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }
}
