//! CoreDNS running a Corefile exactly as given (the reference a converted
//! configuration is compared with), where [`crate::CoreDns`] writes its own
//! Corefile around zone files.

use super::proc::Proc;
use super::tools::{coredns_bin, wrapped_command};

/// A CoreDNS process running `Corefile` from a directory of its own (with
/// any files the Corefile names beside it), killed on drop.
pub struct CorefileServer {
    pub proc: Proc,
    _dir: tempfile::TempDir,
}

impl CorefileServer {
    /// Writes `corefile` and each `(relative path, text)` of `files` into a
    /// fresh directory and starts `[wrapper...] coredns -conf Corefile`
    /// there (relative paths in the Corefile, such as an `import` glob,
    /// resolve from it). Does not wait: readiness is the caller's query.
    pub fn launch(
        name: &str,
        wrapper: &[&str],
        corefile: &str,
        files: &[(&str, String)],
    ) -> CorefileServer {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let path = dir.path().join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap();
            }
            std::fs::write(&path, text).unwrap();
        }
        let conf = dir.path().join("Corefile");
        std::fs::write(&conf, corefile).unwrap();
        let mut cmd = wrapped_command(wrapper, &coredns_bin());
        cmd.arg("-conf").arg(&conf).current_dir(dir.path());
        CorefileServer {
            proc: Proc::spawn(name, cmd),
            _dir: dir,
        }
    }
}
