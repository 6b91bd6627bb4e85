//! DNS over TLS peers: a certificate authority made in the test (with
//! server certificates for given names, current or already expired),
//! unbound serving a zone on a TLS listener, and a TCP listener that
//! accepts and never says a word (a stalled handshake).

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    date_time_ymd,
};

use super::dns::{Q, Rt, udp_exchange};
use super::proc::Proc;
use super::wait::wait_until;

/// A certificate authority whose files live in a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    /// The authority's certificate (PEM): what nodens's `[zone.tls] ca` names.
    pub ca: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM files.
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, issuer.pem()).unwrap();
        Pki { dir, ca, issuer }
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by
    /// this authority; `expired`: valid in 2020 only.
    pub fn issue(&self, label: &str, names: &[&str], expired: bool) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, label);
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2020, 12, 31);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let issued = Issued {
            cert: self.dir.path().join(format!("{label}.pem")),
            key: self.dir.path().join(format!("{label}-key.pem")),
        };
        std::fs::write(&issued.cert, cert.pem()).unwrap();
        std::fs::write(&issued.key, key.serialize_pem()).unwrap();
        issued
    }
}

/// unbound answering `A 192.0.2.1` for every name under `test.` (and
/// REFUSED for anything else, so it never asks another server), on a TLS
/// listener (`dot`) and a plain one (`plain`, for its readiness).
pub struct Unbound {
    pub dot: SocketAddr,
    pub plain: SocketAddr,
    pub proc: Proc,
    _dir: tempfile::TempDir,
}

impl Unbound {
    pub fn start(ip: IpAddr, port: u16, server: &Issued) -> Unbound {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dot = SocketAddr::new(ip, port);
        let plain = SocketAddr::new(ip, 5300);
        let conf = dir.path().join("unbound.conf");
        std::fs::write(
            &conf,
            format!(
                "server:\n  interface: {ip}@{port}\n  interface: {ip}@5300\n  tls-port: {port}\n\
                 \x20 tls-service-pem: \"{}\"\n  tls-service-key: \"{}\"\n\
                 \x20 do-daemonize: no\n  username: \"\"\n  chroot: \"\"\n  directory: \"{}\"\n\
                 \x20 pidfile: \"\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n\
                 \x20 log-queries: yes\n  num-threads: 1\n  so-reuseport: no\n  do-ip6: no\n\
                 \x20 module-config: \"iterator\"\n  incoming-num-tcp: 64\n\
                 \x20 local-zone: \".\" refuse\n  local-zone: \"test.\" redirect\n\
                 \x20 local-data: \"test. 60 IN A 192.0.2.1\"\n\
                 remote-control:\n  control-enable: no\n",
                server.cert.display(),
                server.key.display(),
                dir.path().display(),
            ),
        )
        .unwrap();
        let mut cmd = Command::new("unbound");
        cmd.args(["-d", "-c"]).arg(&conf);
        let proc = Proc::spawn("unbound", cmd);
        let probe = Q::new("ready.test.", Rt::A).to_bytes();
        wait_until(Duration::from_secs(15), "unbound to answer", || {
            udp_exchange(plain, &probe, Duration::from_millis(200)).map(|_| ())
        });
        Unbound {
            dot,
            plain,
            proc,
            _dir: dir,
        }
    }

    /// The queries for `name` unbound has logged once at least `n` have
    /// (or 5 s have passed): its log reaches the test through a pipe, a
    /// moment after the answer does.
    pub fn wait_queries(&self, name: &str, n: usize) -> usize {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let seen = self.count_queries(name);
            if seen >= n || std::time::Instant::now() >= deadline {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The queries for `name` (lower case, with its final dot) unbound logged.
    pub fn count_queries(&self, name: &str) -> usize {
        let needle = format!(" {name} ");
        self.proc
            .lines()
            .iter()
            .filter(|l| l.contains("info:") && l.contains(&needle))
            .count()
    }
}

/// A TCP listener that accepts connections and never reads or writes: a
/// DNS-over-TLS server whose handshake stalls. Dropping it closes the
/// listener and every connection it holds.
pub struct Stall {
    pub addr: SocketAddr,
    accepted: Arc<Mutex<Vec<TcpStream>>>,
    open: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stall {
    pub fn bind(addr: SocketAddr) -> Stall {
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(AtomicBool::new(true));
        let (held, running) = (accepted.clone(), open.clone());
        let thread = std::thread::spawn(move || {
            while running.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => held.lock().unwrap().push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Stall {
            addr,
            accepted,
            open,
            thread: Some(thread),
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        self.open.store(false, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
