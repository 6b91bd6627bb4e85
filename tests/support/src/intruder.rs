//! Another process on the node (tests/fixtures/intruder.py): a squatter, a
//! socket thief, a fake predecessor. A real second process, so the kernel
//! sees its own pid and, when asked, another uid.

use std::process::Command;

use super::proc::Proc;

const SCRIPT: &str = include_str!("../../fixtures/intruder.py");

/// The system's python3: the script may run as a uid that cannot read a
/// per-user interpreter (pyenv) or the checkout (passed with -c instead).
fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Starts the intruder in `mode` with `args`, inside `wrapper` (e.g. `ip
/// netns exec NS`), as `uid` (and the same gid, no groups) when given.
pub fn intruder(wrapper: &[&str], uid: Option<u32>, mode: &str, args: &[&str]) -> Proc {
    let mut argv: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
    if let Some(uid) = uid {
        argv.extend([
            "setpriv".into(),
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
        ]);
    }
    argv.extend([python().into(), "-u".into(), "-c".into(), SCRIPT.into()]);
    argv.push(mode.into());
    argv.extend(args.iter().map(|s| s.to_string()));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).current_dir("/");
    Proc::spawn(&format!("intruder {mode}"), cmd)
}
