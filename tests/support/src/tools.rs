//! Finding the programs the tests run (nodens, CoreDNS, `ip`, `ss`,
//! dnsmasq ...) and starting them, possibly under a wrapper command.

use std::ffi::OsString;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const INSTALL_HINT: &str = "run .ci/install-deps to install the test dependencies";

/// Finds an executable on PATH, or panics saying how to install it.
pub fn tool(name: &str) -> PathBuf {
    find_on_path(name).unwrap_or_else(|| panic!("`{name}` not found on PATH: {INSTALL_HINT}"))
}

pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/sbin:/usr/bin:/sbin:/bin"));
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The CoreDNS binary: $COREDNS, then PATH, then `$(go env GOPATH)/bin/coredns`.
pub fn coredns_bin() -> PathBuf {
    find_coredns().unwrap_or_else(|why| panic!("{why}: {INSTALL_HINT}"))
}

/// Where [`coredns_bin`] finds CoreDNS, or why it does not.
pub(crate) fn find_coredns() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("COREDNS") {
        let p = PathBuf::from(p);
        if !is_executable(&p) {
            return Err(format!("COREDNS={} is not an executable", p.display()));
        }
        return Ok(p);
    }
    if let Some(p) = find_on_path("coredns") {
        return Ok(p);
    }
    let gopath = Command::new("go")
        .args(["env", "GOPATH"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOME").ok().map(|h| format!("{h}/go")));
    if let Some(gopath) = gopath {
        let p = PathBuf::from(gopath).join("bin/coredns");
        if is_executable(&p) {
            return Ok(p);
        }
    }
    Err("coredns not found ($COREDNS, PATH, $(go env GOPATH)/bin)".to_string())
}

/// What `nodens convert-corefile PATH` printed.
pub struct Converted {
    pub toml: String,
    pub stderr: String,
    pub code: Option<i32>,
}

/// Runs `nodens convert-corefile` on the Corefile at `path`.
pub fn convert_corefile(path: &Path) -> Converted {
    let out = Command::new(nodens_bin())
        .arg("convert-corefile")
        .arg(path)
        .output()
        .unwrap();
    Converted {
        toml: String::from_utf8(out.stdout).expect("the configuration is UTF-8"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

/// The nodens binary cargo built for this test run. Cargo puts the test
/// binaries in `target/<profile>/deps/` and the package's binary one level
/// up (the harness is a crate of its own, so `CARGO_BIN_EXE_nodens` is not
/// set when it is compiled).
pub fn nodens_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("nodens"))
        .filter(|p| is_executable(p));
    bin.unwrap_or_else(|| {
        panic!(
            "no nodens binary next to {}: run the tests with `cargo test`",
            exe.display()
        )
    })
}

/// `[wrapper...] bin`: `bin` run directly, or under a wrapper such as
/// `ip netns exec NAME` or `taskset -c 0`.
pub fn wrapped_command(wrapper: &[&str], bin: &Path) -> Command {
    match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    }
}

/// A random-enough u64 without a dependency: std's per-process hash keys.
pub fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}

/// A temporary directory only its owner may enter (0700), as nodens wants
/// the directory of its handover socket and of its claim: tempfile's follow
/// the umask.
pub fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// A copy of the nodens binary that any uid can run (the build's may sit
/// under a home directory only root can enter), for tests where nodens
/// switches to a uid of its own and then runs itself (the supervised
/// server). Removed with the returned directory.
pub fn world_runnable_nodens() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("nodens");
    std::fs::copy(nodens_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, bin)
}

/// `setpriv` limiting what follows to the capabilities the Helm chart gives
/// nodens's container (`capabilities: drop: [ALL], add: [...]`): what a test
/// of `run_as_user` must run under, since a root shell has them all.
pub const AS_THE_CHART_RUNS_IT: [&str; 3] = [
    "setpriv",
    "--bounding-set=-all,+chown,+setuid,+setgid,+net_bind_service,+net_admin,+net_raw",
    "--",
];

/// `nodens doctor` against the nodens whose control socket is `socket`
/// (no probes, no node checks), reading `resolv_conf` as the pod's
/// resolv.conf: its report, and whether it exited 0 (no critical finding).
pub fn doctor_against(socket: &Path, resolv_conf: &str) -> (String, bool) {
    let out = run_doctor(socket, resolv_conf, &[]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{report}");
    (report, out.status.success())
}

/// [`doctor_against`]'s report as JSON (`--json`), and whether it exited 0.
pub fn doctor_json_against(socket: &Path, resolv_conf: &str) -> (serde_json::Value, bool) {
    let out = run_doctor(socket, resolv_conf, &["--json"]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor's JSON: {e}: {out:?}"));
    (report, out.status.success())
}

fn run_doctor(socket: &Path, resolv_conf: &str, extra: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, resolv_conf).expect("resolv.conf written");
    Command::new(nodens_bin())
        .args(["doctor", "--no-probes", "--no-node", "--resolv-conf"])
        .arg(&resolv)
        .arg("--control-socket")
        .arg(socket)
        .args(extra)
        .output()
        .expect("nodens doctor runs")
}

/// The finding `id` of a doctor report (from its `[SEVERITY]` line to the
/// next finding); panics, with the report, when there is none.
pub fn finding<'a>(report: &'a str, id: &str) -> &'a str {
    report
        .split("\n[")
        .find(|f| f.contains(&format!("({id})")))
        .unwrap_or_else(|| panic!("no {id} finding: {report}"))
}
