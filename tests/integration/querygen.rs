//! `nodens querygen` against the real resolvers it models: glibc
//! (`getent ahosts`), musl (getaddrinfo in a program built with musl-gcc)
//! and Go's pure resolver (`net.LookupIP`, GODEBUG=netdns=go). Each looks a
//! name up inside a network namespace whose resolv.conf has a pod's search
//! list and ndots:5, against CoreDNS behind a relay that writes each
//! question down as it arrives; the names and types it sent, in order, must
//! be the walk nodens predicts.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodens::stub::querygen::{self, Options};
use nodens::stub::{Family, Stub, StubConfig, walk};
use support::*;

/// The pod's resolv.conf: its nameserver is the [`Recorder`] in front of
/// CoreDNS.
const RESOLV_CONF: &str = "search team-a.svc.cluster.local svc.cluster.local cluster.local c.proj.internal google.internal\n\
     nameserver 127.0.0.1\n\
     options ndots:5 timeout:5 attempts:1\n";

/// Every name not in a zone below is NXDOMAIN (the root zone answers).
fn zones() -> Vec<(&'static str, String)> {
    let root = "$ORIGIN .\n$TTL 3600\n\
                @ IN SOA ns.root. hostmaster.root. 1 7200 3600 1209600 3\n\
                @ IN NS ns.root.\n\
                ns.root. IN A 192.0.2.53\n";
    vec![
        (
            "cluster.local.",
            zone_file("cluster.local.", "web.team-a.svc 5 IN A 10.0.0.10\n"),
        ),
        (
            "example.com.",
            zone_file(
                "example.com.",
                "api 60 IN A 192.0.2.10\napi 60 IN AAAA 2001:db8::10\n",
            ),
        ),
        (".", root.to_string()),
    ]
}

/// The names that exist, for the walk's stopping point.
fn exists(name: &str) -> bool {
    matches!(name, "web.team-a.svc.cluster.local" | "api.example.com")
}

/// A network namespace with an address of each family on an interface that
/// is not loopback (getaddrinfo's AI_ADDRCONFIG then asks for both) and
/// the pod's resolv.conf in /etc/netns/NAME, which `ip netns exec` mounts.
struct Pod {
    ns: Netns,
    etc: PathBuf,
}

impl Pod {
    fn create() -> Pod {
        let ns = Netns::create("stub");
        ns.run(&[
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
        ]);
        ns.run(&["ip", "addr", "add", "10.99.0.2/24", "dev", "eth0"]);
        ns.run(&["ip", "addr", "add", "fd00:99::2/64", "dev", "eth0", "nodad"]);
        ns.run(&["ip", "link", "set", "eth0", "up"]);
        ns.run(&["ip", "link", "set", "peer0", "up"]);
        let etc = Path::new("/etc/netns").join(&ns.name);
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("resolv.conf"), RESOLV_CONF).unwrap();
        Pod { ns, etc }
    }

    /// Runs `program args` in the namespace (its /etc/resolv.conf the pod's).
    fn lookup(&self, program: &[&str], env: &[(&str, &str)]) -> (bool, String) {
        let mut cmd = Command::new(tool("ip"));
        cmd.args(["netns", "exec", &self.ns.name]).args(program);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("{program:?}: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

/// (name, types) in the order first asked: A and AAAA of one name are sent
/// together, so their order between themselves is not compared; a
/// retransmission is the same query again.
fn grouped(queries: impl IntoIterator<Item = (String, String)>) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (name, qtype) in queries {
        match groups.iter_mut().find(|(n, _)| *n == name) {
            Some((_, types)) => {
                if !types.contains(&qtype) {
                    types.push(qtype);
                }
            }
            None => groups.push((name, vec![qtype])),
        }
    }
    for (_, types) in &mut groups {
        types.sort();
    }
    groups
}

/// A UDP relay on the pod's nameserver address that writes each question
/// down as it arrives, then passes it on to CoreDNS: the order a resolver
/// asked in. CoreDNS's own log is written as it answers, concurrently, so a
/// name's line can come after the next name's (seen in CI with Go's walk,
/// `google.internal` logged before `c.proj.internal`).
struct Recorder {
    asked: Arc<Mutex<Vec<(String, String)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    fn start(ns: &Netns, listen: SocketAddr, upstream: SocketAddr) -> Recorder {
        let name = ns.name.clone();
        let socket = in_netns(&name, || UdpSocket::bind(listen).unwrap());
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let asked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (asked, stop) = (asked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 1500];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, client)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    let query = buf[..n].to_vec();
                    if let Some((qname, qtype)) = question_of(&query) {
                        let qname = qname.trim_end_matches('.').to_string();
                        asked.lock().unwrap().push((qname, qtype.to_string()));
                    }
                    // Each query on a socket of its own, answered in its
                    // own time, as a resolver's answers arrive.
                    let back = socket.try_clone().unwrap();
                    let out = in_netns(&name, || UdpSocket::bind("127.0.0.1:0").unwrap());
                    std::thread::spawn(move || {
                        out.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
                        let mut buf = [0u8; 1500];
                        if out.send_to(&query, upstream).is_ok()
                            && let Ok(n) = out.recv(&mut buf)
                        {
                            let _ = back.send_to(&buf[..n], client);
                        }
                    });
                }
            })
        };
        Recorder {
            asked,
            stop,
            thread: Some(thread),
        }
    }

    /// How many questions have arrived.
    fn count(&self) -> usize {
        self.asked.lock().unwrap().len()
    }

    /// The questions that arrived after the first `skip`, in order.
    fn asked_since(&self, skip: usize) -> Vec<(String, String)> {
        self.asked.lock().unwrap()[skip..].to_vec()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn querygen_walks_the_search_list_as_glibc_musl_and_go_do() {
    needs!(
        Need::Root,
        Need::Tool("musl-gcc"),
        Need::Tool("go"),
        Need::Tool("ip"),
        Need::CoreDns
    );
    let bins = tempfile::tempdir().unwrap();
    let musl = build_musl_lookup(bins.path());
    let go = build_go_lookup(bins.path());
    let pod = Pod::create();
    let core = CoreDns::launch(&pod.ns.exec(), "127.0.0.1:5300".parse().unwrap(), &zones());
    let probe = Q::new("_ready.cluster.local.", Rt::TXT).to_bytes();
    wait_until(
        Duration::from_secs(15),
        "CoreDNS in the pod namespace",
        || {
            in_netns(&pod.ns.name, || {
                udp_exchange(core.addr, &probe, Duration::from_millis(200)).map(|_| ())
            })
        },
    );
    let recorder = Recorder::start(&pod.ns, "127.0.0.1:53".parse().unwrap(), core.addr);
    let config = StubConfig::parse(RESOLV_CONF);

    let musl = musl.to_str().unwrap();
    let go = go.to_str().unwrap();
    /// A resolver, the program that looks a name up with it, its environment.
    type Client<'a> = (Stub, Vec<&'a str>, &'a [(&'a str, &'a str)]);
    let clients: [Client; 3] = [
        (Stub::Glibc, vec!["getent", "ahosts"], &[]),
        (Stub::Musl, vec![musl], &[]),
        (Stub::Go, vec![go], &[("GODEBUG", "netdns=go")]),
    ];
    for (stub, program, env) in &clients {
        for (name, answer) in [
            ("api.example.com", "192.0.2.10"),
            ("web", "10.0.0.10"),
            ("web.team-a", "10.0.0.10"),
            ("api.example.com.", "192.0.2.10"),
        ] {
            let before = recorder.count();
            let mut args = program.clone();
            args.push(name);
            let (ok, out) = pod.lookup(&args, env);
            assert!(ok && out.contains(answer), "{stub:?} {name}: {out}");
            let seen = grouped(recorder.asked_since(before));
            let types: Vec<String> = ["A", "AAAA"].map(String::from).to_vec();
            let predicted: Vec<(String, Vec<String>)> = walk(*stub, &config, name, exists)
                .into_iter()
                .map(|n| (n, types.clone()))
                .collect();
            assert_eq!(seen, predicted, "{stub:?} looking up {name}");
        }
        // querygen's lines for an external name: the whole walk, in order.
        let options = Options {
            stub: *stub,
            family: Family::Unspec,
            config: config.clone(),
        };
        let lines = querygen::generate("api.example.com\n", "-", &options).unwrap();
        let before = recorder.count();
        let mut args = program.clone();
        args.push("api.example.com");
        assert!(pod.lookup(&args, env).0);
        let seen = grouped(recorder.asked_since(before));
        let generated = grouped(lines.lines().map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.to_string(), t.to_string())
        }));
        assert_eq!(
            seen, generated,
            "{stub:?}: querygen's lines against the wire"
        );
        assert_eq!(generated.len(), 6, "five search domains, then the name");
    }
}
