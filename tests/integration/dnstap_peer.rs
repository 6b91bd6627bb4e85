//! Who listens on dnstap's Unix socket: whoever can bind the path would
//! read every query of the node. A real second process of another uid
//! listens there; nodens refuses it (no frame, not even the handshake,
//! is written to it), counts the messages as dropped for want of a reader,
//! and answers every query as always.

use std::process::Command;

use support::*;

/// `python3 -c LISTEN_PY PATH`: listens on the Unix socket PATH (made
/// connectable by anyone), prints `listening`, then `accepted` and `got N`
/// for every connection and the bytes it sends.
const LISTEN_PY: &str = r#"
import os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o777)
s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    print("accepted", flush=True)
    c.settimeout(2)
    try:
        data = c.recv(4096)
    except OSError:
        data = b""
    print(f"got {len(data)}", flush=True)
    c.close()
"#;

#[test]
fn a_reader_of_another_uid_gets_nothing() {
    needs!(
        Need::Root,
        Need::CoreDns,
        Need::Tool("setpriv"),
        Need::Tool("/usr/bin/python3")
    );
    let dir = tempfile::tempdir().unwrap();
    // The reader's uid must be able to bind in the directory.
    Command::new("chmod")
        .arg("1777")
        .arg(dir.path())
        .status()
        .unwrap();
    let socket = dir.path().join("tap.sock");
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "/usr/bin/python3",
        "-u",
        "-c",
    ])
    .arg(LISTEN_PY)
    .arg(&socket)
    .current_dir("/");
    let mut reader = Proc::spawn("reader of uid 65534", cmd);
    reader.wait_for_line(0, secs(10), "the reader listening", |l| l == "listening");

    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let mut nodens = Nodens::start(
        &Cfg::new(&net)
            .log_level("info")
            .zone(Zone::new("test.", &[core.addr]))
            .raw(&format!(
                "[dnstap]\nsocket = \"unix:{}\"\n",
                socket.display()
            )),
    );
    for _ in 0..10 {
        let reply = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
        assert_eq!(reply.a(), vec![ipv4("192.0.2.1")]);
    }
    nodens.wait_metric(
        "nodens_dnstap_dropped_total",
        &[("reason", "no_reader")],
        20.0,
    );
    assert_eq!(nodens.metric("nodens_dnstap_sent_total", &[]), 0.0);
    nodens.proc.wait_for_line(0, secs(10), "the refusal", |l| {
        l.contains("runs as uid 65534")
    });
    let said = reader.lines();
    assert!(
        said.iter().all(|l| !l.starts_with("got ") || l == "got 0"),
        "the reader got bytes: {said:#?}"
    );
}
