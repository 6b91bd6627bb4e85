//! A real Kubernetes API server for tests, with no nodes: etcd and
//! kube-apiserver inside a network namespace the test made, objects created
//! with kubectl, and CoreDNS's `kubernetes` plugin serving the cluster
//! domain from them ([`KubeDns`]).
//!
//! Everything listens on the namespace's own addresses; nothing touches the
//! cluster of lab/kube. The binaries come from `$KUBE_APISERVER` and
//! `$KUBECTL` (default: the cache `lab/kube/build k8s` fills, the `K8S_DIR`
//! of `lab/kube/build print`), `$ETCD` (default: `etcd` on PATH, Debian's
//! etcd-server) and [`coredns_bin`]; .ci/install-deps provides them all.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::coredns::LoggedQuery;
use super::netns::{Netns, run_ok};
use super::proc::Proc;
use super::tools::{coredns_bin, is_executable, tool, wrapped_command};
use super::wait::wait_until;

/// The API server's address inside the namespace.
const API: &str = "127.0.0.1:6443";
const ETCD_CLIENT: &str = "http://127.0.0.1:2379";
const ETCD_PEER: &str = "http://127.0.0.1:2380";
/// The API server's advertised address.
const NODE_IP: &str = "172.31.254.1";
/// Where the Services' cluster IPs come from: IPv4 first (a Service that
/// names no family gets one of these), IPv6 for dual-stack Services.
const SERVICE_CIDR: &str = "10.96.0.0/16,fd00:96::/112";
/// CoreDNS's own address (its "pod IP").
pub const COREDNS_IP: &str = "10.244.0.53";
const TOKEN: &str = "nodens-test-admin";
/// The token of user `nodens` (also in system:masters): its requests are
/// told apart from kubectl's and CoreDNS's in the audit log.
const NODENS_TOKEN: &str = "nodens-test-nodens";
/// What the audit log records: every list and watch (the request line,
/// the user), nothing else.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\n\
    omitStages: [RequestReceived]\nrules:\n\
    - level: Metadata\n  verbs: [list, watch]\n\
    - level: None\n";

/// `$var`, else `name` in lab/kube/build's cache.
fn k8s_bin(name: &str, var: &str) -> PathBuf {
    find_k8s_bin(name, var).unwrap_or_else(|why| panic!("{why}"))
}

/// Where [`k8s_bin`] finds `name`, or why it does not.
fn find_k8s_bin(name: &str, var: &str) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(var) {
        let p = PathBuf::from(p);
        if !is_executable(&p) {
            return Err(format!("{var}={} is not an executable", p.display()));
        }
        return Ok(p);
    }
    let dir = build_print("K8S_DIR")?;
    let p = Path::new(&dir).join(name);
    if !is_executable(&p) {
        return Err(format!(
            "{name} not found at {}: set ${var}, or build it with `lab/kube/build k8s` \
             (.ci/install-deps does)",
            p.display()
        ));
    }
    Ok(p)
}

/// `$var`, else the path `lab/kube/build print` names `key`.
fn find_built(key: &str, var: &str) -> Result<PathBuf, String> {
    let p = match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(build_print(key)?),
    };
    if !is_executable(&p) {
        return Err(format!(
            "{} is not an executable: set ${var}, or build it with lab/kube/build \
             (.ci/install-deps does)",
            p.display()
        ));
    }
    Ok(p)
}

/// What `lab/kube/build print` says `key` is.
fn build_print(key: &str) -> Result<String, String> {
    let build = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("lab/kube/build");
    let out = Command::new("bash")
        .arg(&build)
        .arg("print")
        .output()
        .map_err(|e| format!("`{} print`: {e}", build.display()))?;
    let out = String::from_utf8_lossy(&out.stdout);
    out.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|l| l.strip_prefix('=')))
        .map(str::to_string)
        .ok_or_else(|| format!("no {key} in `{} print`: {out}", build.display()))
}

/// Whether a kube-apiserver and etcd are there to start ([`crate::Need::Kubernetes`]).
pub(crate) fn kubernetes_found() -> bool {
    find_k8s_bin("kube-apiserver", "KUBE_APISERVER").is_ok()
        && (std::env::var_os("ETCD").is_some() || super::tools::find_on_path("etcd").is_some())
}

fn etcd_bin() -> PathBuf {
    match std::env::var_os("ETCD") {
        Some(p) => PathBuf::from(p),
        None => tool("etcd"),
    }
}

/// A kubeconfig at `path` for `user` (by `token`) reaching the API server
/// at `server`, trusting the CA in `dir`.
fn write_kubeconfig(path: &Path, dir: &Path, server: &str, user: &str, token: &str) {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: test\n  cluster: {{certificate-authority: {ca}, server: \"https://{server}\"}}\n\
             users:\n- name: {user}\n  user: {{token: {token}}}\n\
             contexts:\n- name: test\n  context: {{cluster: test, user: {user}}}\n\
             current-context: test\n",
            ca = dir.join("ca.crt").display(),
        ),
    )
    .unwrap();
}

/// `openssl ARGS` in `dir`, `args` split at spaces.
fn openssl(dir: &Path, args: &str) {
    run_ok(
        Command::new(tool("openssl"))
            .current_dir(dir)
            .args(args.split_whitespace()),
    );
}

/// A CA, the API server's certificate (signed by it, for [`API`]) and the
/// service-account key pair, in `dir`.
fn make_pki(dir: &Path) {
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    openssl(
        dir,
        &format!("req -x509 {ec} -days 2 -subj /CN=nodens-test-ca -keyout ca.key -out ca.crt"),
    );
    openssl(
        dir,
        &format!("req {ec} -subj /CN=kube-apiserver -keyout server.key -out server.csr"),
    );
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(
        dir,
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
         -extfile server.ext -out server.crt",
    );
    openssl(
        dir,
        "genpkey -algorithm ec -pkeyopt ec_paramgen_curve:P-256 -out sa.key",
    );
    openssl(dir, "pkey -in sa.key -pubout -out sa.pub");
}

/// A list or watch request, as the API server's audit log has it.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// `list` or `watch`.
    pub verb: String,
    pub resource: String,
    /// The path and query.
    pub uri: String,
    /// The response's status code (0 when the log has none).
    pub code: u16,
}

impl ApiRequest {
    /// A list the API server served: a list request, or a watch that
    /// sends the objects first (a streaming list).
    pub fn lists(&self) -> bool {
        (self.verb == "list" || self.uri.contains("sendInitialEvents=true")) && self.code == 200
    }
}

/// etcd and kube-apiserver in a test's network namespace, killed on drop.
pub struct Kube {
    pub apiserver: Proc,
    pub etcd: Proc,
    /// A kubeconfig for an admin (group system:masters, by a static token),
    /// context `test`.
    pub kubeconfig: PathBuf,
    netns: String,
    kubectl: PathBuf,
    /// How the API server was started, to start it again.
    apiserver_command: (PathBuf, Vec<String>),
    dir: tempfile::TempDir,
    _etcd_data: tempfile::TempDir,
}

impl Kube {
    /// Starts etcd and kube-apiserver inside `ns` and waits (up to 120 s)
    /// until the API server is ready. Adds [`NODE_IP`] and [`COREDNS_IP`]
    /// to the namespace's `lo`.
    pub fn start(ns: &Netns) -> Kube {
        Kube::start_with(ns, etcd_bin(), &[])
    }

    /// [`Kube::start`] with an API server that serves streaming lists
    /// (WatchList): its feature gate on, and etcd 3.5 (`lab/kube/build
    /// etcd`, or `$ETCD35`), which reports watch progress as they need.
    pub fn start_streaming(ns: &Netns) -> Kube {
        let etcd = find_built("ETCD35", "ETCD35").unwrap_or_else(|why| panic!("{why}"));
        Kube::start_with(ns, etcd, &["--feature-gates=WatchList=true".into()])
    }

    fn start_with(ns: &Netns, etcd: PathBuf, extra: &[String]) -> Kube {
        let (apiserver_bin, kubectl) = (
            k8s_bin("kube-apiserver", "KUBE_APISERVER"),
            k8s_bin("kubectl", "KUBECTL"),
        );
        ns.add_to_lo(&[NODE_IP, COREDNS_IP]);

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        make_pki(d);
        std::fs::write(
            d.join("tokens.csv"),
            format!(
                "{TOKEN},admin,admin,\"system:masters\"\n\
                 {NODENS_TOKEN},nodens,nodens,\"system:masters\"\n"
            ),
        )
        .unwrap();
        std::fs::write(d.join("audit-policy.yaml"), AUDIT_POLICY).unwrap();
        let kubeconfig = d.join("kubeconfig");
        write_kubeconfig(&kubeconfig, d, API, "admin", TOKEN);

        // etcd's data on tmpfs when there is one: no disk syncs to wait for.
        let etcd_data = tempfile::Builder::new()
            .prefix("nodens-etcd-")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let mut cmd = wrapped_command(&ns.exec(), &etcd);
        cmd.arg("--name=test")
            .arg(format!("--data-dir={}", etcd_data.path().display()))
            .arg(format!("--listen-client-urls={ETCD_CLIENT}"))
            .arg(format!("--advertise-client-urls={ETCD_CLIENT}"))
            .arg(format!("--listen-peer-urls={ETCD_PEER}"))
            .arg(format!("--initial-advertise-peer-urls={ETCD_PEER}"))
            .arg(format!("--initial-cluster=test={ETCD_PEER}"))
            .args(["--listen-metrics-urls=", "--log-level=warn"]);
        let etcd = Proc::spawn("etcd", cmd);

        let file = |n: &str| d.join(n).display().to_string();
        let apiserver_args: Vec<String> = [
            format!("--etcd-servers={ETCD_CLIENT}"),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=6443".into(),
            format!("--advertise-address={NODE_IP}"),
            format!("--cert-dir={}", file("certs")),
            format!("--tls-cert-file={}", file("server.crt")),
            format!("--tls-private-key-file={}", file("server.key")),
            format!("--token-auth-file={}", file("tokens.csv")),
            "--authorization-mode=RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", file("sa.pub")),
            format!("--service-account-signing-key-file={}", file("sa.key")),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--disable-admission-plugins=ServiceAccount".into(),
            // No endpoints for `kubernetes` (no node could reach it): nothing
            // but the test writes Services or EndpointSlices.
            "--endpoint-reconciler-type=none".into(),
            "--profiling=false".into(),
            format!("--audit-policy-file={}", file("audit-policy.yaml")),
            format!("--audit-log-path={}", file("audit.log")),
            "--audit-log-maxbackup=1".into(),
        ]
        .into_iter()
        .chain(extra.iter().cloned())
        .collect();
        let mut cmd = wrapped_command(&ns.exec(), &apiserver_bin);
        cmd.args(&apiserver_args);
        let apiserver = Proc::spawn("kube-apiserver", cmd);

        let mut kube = Kube {
            apiserver,
            etcd,
            kubeconfig,
            netns: ns.name.clone(),
            kubectl,
            apiserver_command: (apiserver_bin, apiserver_args),
            dir,
            _etcd_data: etcd_data,
        };
        kube.wait_ready(Duration::from_secs(120));
        kube
    }

    fn wait_ready(&mut self, timeout: Duration) {
        wait_until(timeout, "kube-apiserver /readyz", || {
            for p in [&mut self.etcd, &mut self.apiserver] {
                if let Some(st) = p.try_status() {
                    panic!("{} exited ({st}) before the API server was ready", p.name);
                }
            }
            let ready = self.try_kubectl(&["get", "--raw", "/readyz"], None).ok()? == "ok";
            let default = self.try_kubectl(&["get", "namespace", "default"], None);
            (ready && default.is_ok()).then_some(())
        });
    }

    /// Runs kubectl (inside the namespace, as admin) with `stdin`; its
    /// stdout, or its stderr if it failed. Each request is bounded (5 s).
    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut cmd = wrapped_command(&["ip", "netns", "exec", &self.netns], &self.kubectl);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!(
                "--cache-dir={}",
                self.dir.path().join("kubectl").display()
            ))
            .arg("--request-timeout=5s")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        let mut pipe = child.stdin.take().unwrap();
        // A kubectl that fails early may not read it: its stderr says why.
        let _ = pipe.write_all(stdin.unwrap_or("").as_bytes());
        drop(pipe);
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).to_string())
        }
    }

    /// A kubeconfig for user `nodens` that reaches the API server at
    /// `server` (a relay in front of it, say): the API server's certificate
    /// names 127.0.0.1, so `server` must be on it.
    pub fn nodens_kubeconfig(&self, server: SocketAddr) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("kubeconfig-nodens-{}", server.port()));
        write_kubeconfig(
            &path,
            self.dir.path(),
            &server.to_string(),
            "nodens",
            NODENS_TOKEN,
        );
        path
    }

    /// A TCP relay (tests/fixtures/tcp_relay.py, a process of its own) on
    /// `listen` in front of the API server, waited for until it listens.
    /// `SIGUSR1` resets every connection it relays and refuses new ones for
    /// `cut` (a connection reset, an API server failover).
    pub fn relay(&self, listen: SocketAddr, cut: Duration) -> Proc {
        const SCRIPT: &str = include_str!("../../fixtures/tcp_relay.py");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.netns, "python3", "-u", "-c", SCRIPT])
            .arg(listen.to_string())
            .arg(API)
            .arg(cut.as_secs_f64().to_string());
        let mut relay = Proc::spawn("tcp relay", cmd);
        relay.wait_for_line(0, Duration::from_secs(10), "the relay to listen", |l| {
            l == "ready"
        });
        relay
    }

    /// The lists and watches user `user` made so far, from the API
    /// server's audit log (each once: a watch is logged when it starts and
    /// again when it ends).
    pub fn requests_of(&self, user: &str) -> Vec<ApiRequest> {
        let log = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for line in log.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let field = |path: &[&str]| {
                path.iter()
                    .try_fold(&event, |v, k| v.get(k))
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            if field(&["user", "username"]) != user || !seen.insert(field(&["auditID"])) {
                continue;
            }
            out.push(ApiRequest {
                verb: field(&["verb"]),
                resource: field(&["objectRef", "resource"]),
                uri: field(&["requestURI"]),
                code: event
                    .get("responseStatus")
                    .and_then(|s| s.get("code"))
                    .and_then(|c| c.as_u64())
                    .map_or(0, |c| c as u16),
            });
        }
        out
    }

    /// Kills the API server (etcd keeps the objects).
    pub fn stop_apiserver(&mut self) {
        self.apiserver.kill();
    }

    /// Starts the API server again, as before, and waits until it is ready.
    pub fn start_apiserver(&mut self) {
        let (bin, args) = &self.apiserver_command;
        let mut cmd = wrapped_command(&["ip", "netns", "exec", &self.netns], bin);
        cmd.args(args);
        self.apiserver = Proc::spawn("kube-apiserver", cmd);
        self.wait_ready(Duration::from_secs(120));
    }

    /// `kubectl apply -f -` of `manifests`: creates or changes the objects.
    pub fn apply(&self, manifests: &str) {
        self.try_kubectl(&["apply", "-f", "-"], Some(manifests))
            .unwrap_or_else(|e| panic!("kubectl apply: {e}\n{manifests}"));
    }

    /// `kubectl create -f -` of `manifests` (YAML documents).
    pub fn create(&self, manifests: &str) {
        self.try_kubectl(&["create", "-f", "-"], Some(manifests))
            .unwrap_or_else(|e| panic!("kubectl create: {e}\n{manifests}"));
    }

    /// A Pod bound to `node` with `spec` (indented YAML lines) added, and
    /// the status a kubelet would write: Running, with `ips` as its
    /// `podIPs` (the first its `podIP`). There is no kubelet: the status
    /// is written through the status subresource.
    /// The `[kubernetes]` section of a nodens on `node` that watches this
    /// API server (its pods on `node`).
    pub fn pod_watch(&self, node: &str) -> String {
        format!(
            "[kubernetes]\nkubeconfig = \"{}\"\nnode_name = \"{node}\"\n",
            self.kubeconfig.display()
        )
    }

    pub fn create_pod(&self, namespace: &str, name: &str, ips: &[&str], node: &str, spec: &str) {
        self.create(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
             spec:\n  nodeName: {node}\n  containers: [{{name: c, image: registry.k8s.io/pause:3.10}}]\n{spec}"
        ));
        let host_ip = if spec.contains("hostNetwork") {
            ips[0]
        } else {
            "10.0.0.1"
        };
        let pod_ips: Vec<String> = ips
            .iter()
            .map(|ip| format!("{{\"ip\":\"{ip}\"}}"))
            .collect();
        let status = format!(
            "{{\"status\":{{\"phase\":\"Running\",\"hostIP\":\"{host_ip}\",\"hostIPs\":[{{\"ip\":\"{host_ip}\"}}],\
             \"podIP\":\"{}\",\"podIPs\":[{}]}}}}",
            ips[0],
            pod_ips.join(",")
        );
        self.try_kubectl(
            &[
                "-n",
                namespace,
                "patch",
                "pod",
                name,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status,
            ],
            None,
        )
        .unwrap_or_else(|e| panic!("status of pod {namespace}/{name}: {e}"));
    }
}

/// CoreDNS serving `cluster.local` and the reverse zones from a [`Kube`]
/// with the `kubernetes` plugin (`pods insecure`), logging every query, on
/// port 53 of every address in the namespace. Without a `bind`, the plugin
/// takes the namespace's address [`COREDNS_IP`] for its own, as in a pod:
/// `ns.dns.<zone>` answers with the Service whose endpoint that is.
pub struct KubeDns {
    pub proc: Proc,
    /// Where to ask it, inside the namespace.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl KubeDns {
    /// Starts CoreDNS in `ns`; it is ready once it answers (see the plugin's
    /// start-up sync: the caller waits for the objects it needs).
    pub fn start(ns: &Netns, kube: &Kube) -> KubeDns {
        KubeDns::start_with(ns, kube, "", "insecure")
    }

    /// [`KubeDns::start`] bound to [`COREDNS_IP`] only, leaving port 53 of
    /// the namespace's other addresses to other servers.
    pub fn start_bound(ns: &Netns, kube: &Kube) -> KubeDns {
        KubeDns::start_with(ns, kube, &format!("  bind {COREDNS_IP}\n"), "insecure")
    }

    /// [`KubeDns::start_bound`] with `pods verified`: the plugin watches
    /// every pod of the cluster, as its autopath needs.
    pub fn start_verified(ns: &Netns, kube: &Kube) -> KubeDns {
        KubeDns::start_with(ns, kube, &format!("  bind {COREDNS_IP}\n"), "verified")
    }

    /// [`KubeDns::start_bound`] with the plugin's `ttl` (kubeadm's Corefile
    /// sets 30; the plugin's default is 5).
    pub fn start_bound_ttl(ns: &Netns, kube: &Kube, ttl: u32) -> KubeDns {
        KubeDns::start_with(
            ns,
            kube,
            &format!("  bind {COREDNS_IP}\n"),
            &format!("insecure\n    ttl {ttl}"),
        )
    }

    /// [`KubeDns::start_bound_ttl`] behind CoreDNS's `cache` of the same
    /// TTL, as kubeadm's Corefile (`ttl 30`, `cache 30`): it gives an old
    /// answer until its cached copy expires.
    pub fn start_cached(ns: &Netns, kube: &Kube, ttl: u32) -> KubeDns {
        KubeDns::start_with(
            ns,
            kube,
            &format!("  bind {COREDNS_IP}\n  cache {ttl}\n"),
            &format!("insecure\n    ttl {ttl}"),
        )
    }

    fn start_with(ns: &Netns, kube: &Kube, extra: &str, pods: &str) -> KubeDns {
        let dir = tempfile::tempdir().unwrap();
        let corefile = format!(
            ".:53 {{\n{extra}  kubernetes cluster.local in-addr.arpa ip6.arpa {{\n    \
             kubeconfig {} test\n    pods {pods}\n  }}\n  log\n  errors\n}}\n",
            kube.kubeconfig.display()
        );
        let conf = dir.path().join("Corefile");
        std::fs::write(&conf, corefile).unwrap();
        let mut cmd = wrapped_command(&ns.exec(), &coredns_bin());
        cmd.arg("-conf").arg(&conf).current_dir(dir.path());
        KubeDns {
            proc: Proc::spawn("coredns kubernetes", cmd),
            addr: SocketAddr::new(COREDNS_IP.parse().unwrap(), 53),
            _dir: dir,
        }
    }

    /// Every query CoreDNS logged so far.
    pub fn queries(&self) -> Vec<LoggedQuery> {
        LoggedQuery::all_of(&self.proc)
    }

    /// How many queries for `name` (any case, with its final dot) and
    /// `qtype` ("A", "SRV", ...) reached CoreDNS.
    pub fn count_queries(&self, name: &str, qtype: &str) -> usize {
        self.queries()
            .iter()
            .filter(|q| q.name.eq_ignore_ascii_case(name) && q.qtype.eq_ignore_ascii_case(qtype))
            .count()
    }
}
