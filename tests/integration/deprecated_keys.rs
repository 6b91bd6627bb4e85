//! Deprecated configuration keys in a running nodens (docs/configuration.md,
//! "Deprecated keys"; `check-config`'s warnings are in lifecycle.rs).
//!
//! Proves that `nodens serve` logs each deprecated key the file writes at
//! warn level, with its line and replacement, once at start and once at
//! each reload that reads it; that `nodens_config_deprecated_keys` counts
//! those of the configuration in force; and that `nodens doctor` names them
//! from the control socket (`config-deprecated-keys`).

use std::time::Duration;

use serde_json::Value;
use support::*;

/// The log lines from `from` on that warn of a deprecated key.
fn warnings(nodens: &Nodens, from: usize) -> Vec<String> {
    nodens.proc.lines()[from..]
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("is deprecated since"))
        .cloned()
        .collect()
}

/// `nodens doctor`'s `config-deprecated-keys` finding, read from `socket`.
fn doctor_finding(socket: &std::path::Path) -> Option<Value> {
    let (report, passed) = doctor_json_against(socket, "nameserver 10.96.0.10\n");
    assert!(passed, "{report}");
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "config-deprecated-keys")
        .cloned()
}

#[test]
fn serve_logs_deprecated_keys_at_each_load_counts_them_and_doctor_names_them() {
    let net = Net::alloc();
    let dir = private_dir();
    let socket = dir.path().join("control.sock");
    let new = Cfg::new(&net)
        .server_option("control_socket", &format!("\"{}\"", socket.display()))
        .tcp_max_in_flight(8)
        .zone(Zone::new("test.", &[net.upstream(0)]).pool(Pool::new().max_in_flight(2)))
        .to_toml();
    let old = new
        .replace("tcp_max_in_flight = 8", "tcp_max_inflight = 8")
        .replace("max_in_flight = 2", "max_inflight = 2");
    assert_ne!(old, new);
    let line_of = |text: &str, key: &str| {
        1 + text
            .lines()
            .position(|l| l.contains(key))
            .expect("the key is written")
    };
    let mut nodens = Nodens::start_toml(&old);
    let file = nodens.config_path.display().to_string();
    let at_start = warnings(&nodens, 0);
    assert_eq!(at_start.len(), 2, "{at_start:#?}");
    for (warning, written, key, new_key) in [
        (
            &at_start[0],
            "tcp_max_inflight = 8",
            "tcp_max_inflight",
            "tcp_max_in_flight",
        ),
        (
            &at_start[1],
            "max_inflight = 2",
            "max_inflight",
            "max_in_flight",
        ),
    ] {
        let at = format!("{file}:{}:", line_of(&old, written));
        assert!(
            warning.contains(&at)
                && warning.contains(&format!("{key}` is deprecated"))
                && warning.contains(&format!("write `{new_key}` instead")),
            "{warning}"
        );
    }
    assert_eq!(nodens.metric("nodens_config_deprecated_keys", &[]), 2.0);
    let finding = doctor_finding(&socket).expect("doctor names the deprecated keys");
    assert_eq!(finding["severity"], "warning", "{finding}");
    let title = finding["title"].as_str().unwrap();
    assert!(
        title.contains("`[server] tcp_max_inflight`")
            && title.contains("`[zone.pool] max_inflight`"),
        "{title}"
    );

    // The new names: no warning, none counted, nothing for doctor.
    let reloaded = |nodens: &mut Nodens, text: &str| {
        let before = nodens.proc.line_count();
        nodens.reload(text);
        nodens.proc.wait_for_line(
            before,
            Duration::from_secs(10),
            "configuration reloaded",
            |l| l.contains("configuration reloaded"),
        );
        before
    };
    let before = reloaded(&mut nodens, &new);
    assert!(warnings(&nodens, before).is_empty());
    assert_eq!(nodens.metric("nodens_config_deprecated_keys", &[]), 0.0);
    assert!(doctor_finding(&socket).is_none());

    // The old names again: warned once more, once each.
    let before = reloaded(&mut nodens, &old);
    assert_eq!(warnings(&nodens, before).len(), 2);
    assert_eq!(nodens.metric("nodens_config_deprecated_keys", &[]), 2.0);
}
