//! The nodens under test: a running `nodens serve` with its config file,
//! and what tests ask of it (readiness, reload, metrics, the pool gauges).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::thread;
use std::time::{Duration, Instant};

use super::config::Cfg;
use super::http::http_get;
use super::proc::Proc;
use super::prom::{has_series, parse_metrics, sum_metric};
use super::tools::{nodens_bin, wrapped_command};
use super::wait::wait_until;

/// A running `nodens serve`, killed on drop.
pub struct Nodens {
    pub proc: Proc,
    pub config_path: PathBuf,
    /// The first listen address: where the DNS helpers send.
    pub dns: SocketAddr,
    /// The HTTP address, if metrics.listen is set.
    pub http: Option<SocketAddr>,
    _dir: tempfile::TempDir,
}

/// The first `server.listen` address and `metrics.listen` of a config text.
fn addresses_of(toml_text: &str) -> (SocketAddr, Option<SocketAddr>) {
    let table: toml::Table = toml_text.parse().expect("test config is valid TOML");
    let server = table.get("server").and_then(|s| s.as_table());
    let dns = server
        .and_then(|s| s.get("listen"))
        .and_then(|l| l.as_array())
        .and_then(|a| a.first())
        .and_then(|v| v.as_str())
        .map(|s| s.parse().expect("listen address with a port"))
        .unwrap_or_else(|| "127.0.0.1:1053".parse().unwrap());
    let http = match table
        .get("metrics")
        .and_then(|m| m.get("listen"))
        .and_then(|v| v.as_str())
    {
        Some("") => None,
        Some(s) => Some(s.parse().expect("metrics.listen")),
        None => Some("127.0.0.1:9253".parse().unwrap()),
    };
    (dns, http)
}

impl Nodens {
    /// Starts nodens with this configuration and waits for /ready.
    pub fn start(cfg: &Cfg) -> Nodens {
        Nodens::start_toml(&cfg.to_toml())
    }

    pub fn start_toml(toml_text: &str) -> Nodens {
        let mut n = Nodens::launch(toml_text, &[]);
        n.wait_ready();
        n
    }

    /// Writes the config and starts `[wrapper...] nodens serve --config FILE`
    /// without waiting for anything.
    pub fn launch(toml_text: &str, wrapper: &[&str]) -> Nodens {
        Nodens::launch_bin(toml_text, wrapper, &nodens_bin())
    }

    /// [`Nodens::launch`] with another copy of the binary (one a uid other
    /// than the test's can run).
    pub fn launch_bin(toml_text: &str, wrapper: &[&str], bin: &std::path::Path) -> Nodens {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("nodens.toml");
        std::fs::write(&config_path, toml_text).unwrap();
        let (dns, http) = addresses_of(toml_text);
        let mut cmd = wrapped_command(wrapper, bin);
        cmd.arg("serve").arg("--config").arg(&config_path);
        let proc = Proc::spawn(&format!("nodens {dns}"), cmd);
        Nodens {
            proc,
            config_path,
            dns,
            http,
            _dir: dir,
        }
    }

    fn http_addr(&self) -> SocketAddr {
        self.http.expect("this nodens has no metrics.listen")
    }

    /// Waits until GET /ready answers 200 (panics early if nodens exits).
    pub fn wait_ready(&mut self) {
        let addr = self.http_addr();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok((200, _)) = http_get(addr, "/ready") {
                return;
            }
            if let Some(st) = self.proc.try_status() {
                thread::sleep(Duration::from_millis(100));
                panic!(
                    "nodens exited ({st}) before /ready; output:\n{}",
                    self.proc.lines().join("\n")
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "nodens not ready on {addr} after 20 s; output:\n{}",
                    self.proc.lines().join("\n")
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Rewrites the config file (atomically, by rename) and sends SIGHUP.
    pub fn reload(&self, toml_text: &str) {
        let tmp = self.config_path.with_extension("toml.new");
        std::fs::write(&tmp, toml_text).unwrap();
        std::fs::rename(&tmp, &self.config_path).unwrap();
        self.proc.signal(libc::SIGHUP);
    }

    /// Sends SIGTERM and waits (up to 20 s) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.proc.signal(libc::SIGTERM);
        self.proc
            .wait_exit(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("nodens still running 20 s after SIGTERM"))
    }

    pub fn assert_alive(&mut self) {
        if let Some(st) = self.proc.try_status() {
            panic!(
                "nodens died ({st}); output:\n{}",
                self.proc.lines().join("\n")
            );
        }
    }

    /// The `server` label of this instance's DNS metrics: `dns://IP:PORT`.
    pub fn server_label(&self) -> String {
        format!("dns://{}", self.dns)
    }

    pub fn metrics_text(&self) -> String {
        let (code, body) = http_get(self.http_addr(), "/metrics").expect("GET /metrics");
        assert_eq!(code, 200, "GET /metrics: {body}");
        body
    }

    /// The sum of every series of `name` whose labels include `labels`.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        sum_metric(&parse_metrics(&self.metrics_text()), name, labels)
    }

    /// Waits until `metric(name, labels) >= at_least`; returns the value.
    pub fn wait_metric(&self, name: &str, labels: &[(&str, &str)], at_least: f64) -> f64 {
        wait_until(
            Duration::from_secs(5),
            &format!("{name}{labels:?} >= {at_least}"),
            || {
                let v = self.metric(name, labels);
                (v >= at_least).then_some(v)
            },
        )
    }

    /// The worker count from the `workers=N` startup line.
    pub fn wait_workers(&mut self, timeout: Duration) -> usize {
        let line = self
            .proc
            .wait_for_line(0, timeout, "a workers=N line", |l| l.contains("workers="));
        let digits: String = line
            .split("workers=")
            .nth(1)
            .unwrap()
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("no number after workers= in {line:?}"))
    }
}

impl Nodens {
    /// Waits (up to 5 s) until the pool of every upstream in `tos` ("IP:port")
    /// is idle: `nodens_upstream_tcp_connections{state="busy"}`,
    /// `nodens_upstream_queue_length` and `nodens_upstream_inflight` all 0.
    /// Each of the three must be exported for that upstream: a missing
    /// series fails, it does not count as 0.
    pub fn wait_pool_idle(&self, tos: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let m = parse_metrics(&self.metrics_text());
            let mut bad = Vec::new();
            for to in tos {
                for (name, extra) in [
                    ("nodens_upstream_tcp_connections", Some(("state", "busy"))),
                    ("nodens_upstream_queue_length", None),
                    ("nodens_upstream_inflight", None),
                ] {
                    if !has_series(&m, name, &[("to", to)]) {
                        bad.push(format!("{name}{{to=\"{to}\"}} is not exported"));
                        continue;
                    }
                    let mut labels = vec![("to", *to)];
                    labels.extend(extra);
                    let v = sum_metric(&m, name, &labels);
                    if v != 0.0 {
                        bad.push(format!("{name}{labels:?} = {v}"));
                    }
                }
            }
            if bad.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "upstream pool not idle 5 s after the traffic: {}",
                    bad.join("; ")
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}
