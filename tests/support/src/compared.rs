//! What two DNS servers are compared on when they should answer alike: the
//! RCODE, the answer section as a set (owner, class, type, data; TTLs and
//! order left out, since caches count TTLs down and may rotate RRsets),
//! whether the authority section holds an SOA (a negative answer's TTL
//! source) and the TC bit. Used by the differential test of converted
//! Corefiles, where CoreDNS is the reference.

use std::collections::BTreeSet;
use std::fmt;

use hickory_proto::rr::RecordType;

use super::dns::Reply;

/// The comparable part of one answer, or the lack of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compared {
    Answered {
        rcode: u16,
        /// Left empty when `tc` is set: a truncated answer's records are
        /// whatever fitted, and clients throw them away and retry over TCP.
        answers: BTreeSet<String>,
        soa: bool,
        tc: bool,
    },
    /// No answer within the query's deadline (or the connection closed).
    NoAnswer,
}

impl Compared {
    pub fn of(reply: &Reply) -> Compared {
        let tc = reply.tc();
        Compared::Answered {
            rcode: reply.rcode(),
            answers: if tc {
                BTreeSet::new()
            } else {
                reply.answer_set()
            },
            soa: reply
                .msg
                .name_servers()
                .iter()
                .any(|r| r.record_type() == RecordType::SOA),
            tc,
        }
    }

    pub fn of_option(reply: Option<&Reply>) -> Compared {
        reply.map_or(Compared::NoAnswer, Compared::of)
    }
}

fn rcode_name(rcode: u16) -> String {
    match rcode {
        0 => "NOERROR".into(),
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        n => format!("RCODE{n}"),
    }
}

impl fmt::Display for Compared {
    /// `NOERROR [a, b] soa tc`, short enough for a table cell.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compared::NoAnswer => write!(f, "no answer"),
            Compared::Answered {
                rcode,
                answers,
                soa,
                tc,
            } => {
                write!(f, "{}", rcode_name(*rcode))?;
                if !answers.is_empty() {
                    let shown: Vec<String> = answers
                        .iter()
                        .map(|a| {
                            // "owner IN TYPE data" -> "TYPE data": the owner is the query's.
                            let mut parts = a.splitn(4, ' ');
                            let owner = parts.next().unwrap_or("");
                            let _class = parts.next();
                            let rest: Vec<&str> = parts.collect();
                            format!("{owner} {}", rest.join(" "))
                        })
                        .collect();
                    if shown.len() > 3 {
                        write!(f, " [{}, ... {} records]", shown[0], shown.len())?;
                    } else {
                        write!(f, " [{}]", shown.join(", "))?;
                    }
                }
                if *soa {
                    write!(f, " +soa")?;
                }
                if *tc {
                    write!(f, " TC")?;
                }
                Ok(())
            }
        }
    }
}
