//! `nodens trace`: one name resolved the way the pod's resolver would:
//! the search list walked with its ndots, A and AAAA together (one after
//! the other with `single-request`), each query retried on the next
//! nameserver after `timeout`, and the walk stopped where that resolver
//! stops. Every query is printed with its answer code and latency.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::client::{QueryError, Question, Reply, Transport, ask, rcode_name};
use super::resolver::ResolvConf;
use crate::stub::{Family, Stub, walk, walk::address_types};
use crate::wire::rtype;

#[derive(Debug, Serialize)]
pub struct Trace {
    pub name: String,
    pub resolver: &'static str,
    pub steps: Vec<Step>,
    /// The name that answered and its addresses, or why none did.
    pub outcome: Outcome,
    pub queries: usize,
    pub round_trips: usize,
    pub elapsed_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct Step {
    /// Which name of the walk (1 = first).
    pub round: usize,
    pub qtype: &'static str,
    pub name: String,
    pub server: SocketAddr,
    /// NOERROR, NXDOMAIN, NODATA, SERVFAIL... or TIMEOUT, ERROR.
    pub result: String,
    pub answers: Vec<String>,
    pub latency_ms: f64,
}

#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    Resolved { name: String, answers: Vec<String> },
    Failed { reason: String },
}

impl Trace {
    pub fn resolved(&self) -> bool {
        matches!(self.outcome, Outcome::Resolved { .. })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a trace is always serializable")
    }

    pub fn to_text(&self) -> String {
        let mut out = format!("trace {} ({})\n", self.name, self.resolver);
        let width = self.steps.iter().map(|s| s.name.len()).max().unwrap_or(0) + 1;
        for s in &self.steps {
            out.push_str(&format!(
                "  {:>2}  {:<5} {:<width$} {:<8} {:>9}  {}{}\n",
                s.round,
                s.qtype,
                format!("{}.", s.name),
                s.result,
                format!("{:.2} ms", s.latency_ms),
                s.server,
                if s.answers.is_empty() {
                    String::new()
                } else {
                    format!("  {}", s.answers.join(" "))
                },
            ));
        }
        out.push_str(&match &self.outcome {
            Outcome::Resolved { name, answers } => {
                format!("resolved as {name}: {}", answers.join(" "))
            }
            Outcome::Failed { reason } => format!("not resolved: {reason}"),
        });
        out.push_str(&format!(
            " ({} quer{}, {} round trip{}, {:.1} ms)\n",
            self.queries,
            if self.queries == 1 { "y" } else { "ies" },
            self.round_trips,
            if self.round_trips == 1 { "" } else { "s" },
            self.elapsed_ms
        ));
        out
    }
}

/// What one name of the walk gave, for the resolver's decision.
enum Verdict {
    Answer(Vec<String>),
    /// Go on to the next name.
    Next,
    /// The resolver gives up here.
    Stop(String),
}

pub fn run(
    resolv: &ResolvConf,
    servers: &[SocketAddr],
    stub: Stub,
    family: Family,
    name: &str,
) -> Trace {
    super::client::runtime().block_on(trace(resolv, servers, stub, family, name))
}

async fn trace(
    resolv: &ResolvConf,
    servers: &[SocketAddr],
    stub: Stub,
    family: Family,
    name: &str,
) -> Trace {
    let started = Instant::now();
    let config = &resolv.stub;
    let names = walk(stub, config, name, |_| false);
    let types = address_types(stub, config, family);
    let sequential = stub == Stub::Glibc && config.single_request;
    let deadline = Duration::from_secs(u64::from(config.timeout));
    let mut trace = Trace {
        name: name.to_string(),
        resolver: match stub {
            Stub::Glibc => "glibc",
            Stub::Musl => "musl",
            Stub::Go => "go",
        },
        steps: Vec::new(),
        outcome: Outcome::Failed {
            reason: "no name of the walk has an address".into(),
        },
        queries: 0,
        round_trips: 0,
        elapsed_ms: 0.0,
    };
    if servers.is_empty() {
        trace.outcome = Outcome::Failed {
            reason: "no nameserver".into(),
        };
        return trace;
    }
    for (round, candidate) in names.iter().enumerate() {
        let mut replies = Vec::new();
        if sequential {
            for &t in types {
                replies
                    .push(ask_with_retries(servers, candidate, t, deadline, config.attempts).await);
                trace.round_trips += 1;
            }
        } else {
            let asks = types
                .iter()
                .map(|&t| ask_with_retries(servers, candidate, t, deadline, config.attempts));
            replies = futures_util::future::join_all(asks).await;
            trace.round_trips += 1;
        }
        for (qtype, (server, result)) in types.iter().zip(&replies) {
            trace.queries += 1;
            trace
                .steps
                .push(step(round + 1, qtype, candidate, *server, result));
        }
        match verdict(stub, &replies) {
            Verdict::Answer(answers) => {
                trace.outcome = Outcome::Resolved {
                    name: candidate.clone(),
                    answers,
                };
                break;
            }
            Verdict::Next => {}
            Verdict::Stop(reason) => {
                trace.outcome = Outcome::Failed {
                    reason: format!("{reason} for {candidate}: {} stops here", trace.resolver),
                };
                break;
            }
        }
    }
    trace.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    trace
}

type Asked = (SocketAddr, Result<Reply, NoReply>);

/// Why a query of the walk got no reply.
#[derive(Debug, thiserror::Error)]
enum NoReply {
    #[error(transparent)]
    BadName(#[from] crate::wire::name::BadName),
    /// Never asked: no attempt and no server.
    #[error("no answer")]
    NotAsked,
    #[error(transparent)]
    Query(#[from] QueryError),
    /// Truncated over UDP, then no reply over TCP.
    #[error("TC, then TCP: {0}")]
    OverTcp(QueryError),
}

impl NoReply {
    /// No reply in time, as a resolver times out (not an error of the exchange).
    fn timed_out(&self) -> bool {
        matches!(
            self,
            NoReply::NotAsked | NoReply::Query(QueryError::Timeout(_))
        )
    }
}

/// One query as the resolver sends it: each nameserver in turn, `attempts`
/// rounds, `deadline` each; the first reply ends it.
async fn ask_with_retries(
    servers: &[SocketAddr],
    name: &str,
    qtype: &str,
    deadline: Duration,
    attempts: u8,
) -> Asked {
    let t = if qtype == "AAAA" {
        rtype::AAAA
    } else {
        rtype::A
    };
    let question = match Question::new(name, t) {
        Ok(q) => q,
        Err(e) => return (servers[0], Err(e.into())),
    };
    let mut last = (servers[0], Err(NoReply::NotAsked));
    for _ in 0..attempts {
        for &server in servers {
            match ask(server, &question, Transport::Udp, deadline).await {
                Ok(reply) if reply.truncated => {
                    let over_tcp = ask(server, &question, Transport::Tcp, deadline).await;
                    return (server, over_tcp.map_err(NoReply::OverTcp));
                }
                Ok(reply) => return (server, Ok(reply)),
                Err(e) => last = (server, Err(e.into())),
            }
        }
    }
    last
}

fn step(
    round: usize,
    qtype: &'static str,
    name: &str,
    server: SocketAddr,
    result: &Result<Reply, NoReply>,
) -> Step {
    match result {
        Ok(reply) => Step {
            round,
            qtype,
            name: name.to_string(),
            server,
            result: reply.result_name().into(),
            answers: answers(reply),
            latency_ms: reply.latency.as_secs_f64() * 1000.0,
        },
        Err(e) => Step {
            round,
            qtype,
            name: name.to_string(),
            server,
            result: if e.timed_out() {
                "TIMEOUT".into()
            } else {
                format!("ERROR ({e})")
            },
            answers: Vec::new(),
            latency_ms: 0.0,
        },
    }
}

fn answers(reply: &Reply) -> Vec<String> {
    reply
        .cnames
        .iter()
        .map(|c| format!("CNAME {c}"))
        .chain(reply.addresses.iter().map(|a| a.to_string()))
        .collect()
}

/// Where each resolver goes on and where it stops. glibc (`res_nsearch`)
/// goes on after NXDOMAIN, NODATA and SERVFAIL and stops on a timeout or
/// REFUSED; musl (`name_from_dns`) goes on only when one of the answers is
/// NXDOMAIN and stops at SERVFAIL and NODATA; Go goes on like glibc.
fn verdict(stub: Stub, replies: &[Asked]) -> Verdict {
    let ok: Vec<&Reply> = replies
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let found: Vec<String> = ok
        .iter()
        .filter(|r| r.rcode == 0)
        .flat_map(|r| answers(r))
        .collect();
    match stub {
        Stub::Musl => {
            if ok.len() < replies.len() {
                return Verdict::Stop("no answer".into());
            }
            if let Some(r) = ok.iter().find(|r| r.rcode == 2) {
                return Verdict::Stop(rcode_name(r.rcode).into());
            }
            if ok.iter().any(|r| r.rcode == 3) {
                return Verdict::Next;
            }
            if let Some(r) = ok.iter().find(|r| r.rcode != 0) {
                return Verdict::Stop(rcode_name(r.rcode).into());
            }
            if found.is_empty() {
                Verdict::Stop("NODATA".into())
            } else {
                Verdict::Answer(found)
            }
        }
        Stub::Glibc | Stub::Go => {
            if !found.is_empty() {
                return Verdict::Answer(found);
            }
            if ok.is_empty() {
                return Verdict::Stop("no answer".into());
            }
            match ok.iter().find(|r| !matches!(r.rcode, 0 | 2 | 3)) {
                Some(r) => Verdict::Stop(rcode_name(r.rcode).into()),
                None => Verdict::Next,
            }
        }
    }
}
