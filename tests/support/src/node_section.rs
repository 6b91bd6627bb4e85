//! The `[node]` section of a test's configuration, setting by setting.

use std::time::Duration;

/// Where tests keep the claim on the node setup: not the default
/// `/run/nodens`, which a chart on this machine (lab/kube) makes its own
/// uid's. Claims are per network namespace, so parallel tests share it.
pub const TEST_STATE_DIR: &str = "/run/nodens-test";

/// The `[node]` section, setting by setting; only what is set is written.
/// [`NodeSection::new`] starts with `setup = true`.
#[derive(Clone, Debug)]
pub struct NodeSection {
    keys: Vec<(&'static str, String)>,
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

impl Default for NodeSection {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeSection {
    pub fn new() -> NodeSection {
        NodeSection { keys: Vec::new() }
            .setup(true)
            .state_dir(TEST_STATE_DIR)
    }
    pub fn state_dir(self, dir: &str) -> Self {
        self.set("state_dir", quoted(dir))
    }
    fn set(mut self, key: &'static str, value: String) -> Self {
        self.keys.retain(|(k, _)| *k != key);
        self.keys.push((key, value));
        self
    }
    pub fn setup(self, on: bool) -> Self {
        self.set("setup", on.to_string())
    }
    pub fn interface(self, name: &str) -> Self {
        self.set("interface", quoted(name))
    }
    pub fn link_kind(self, kind: &str) -> Self {
        self.set("link_kind", quoted(kind))
    }
    pub fn backend(self, backend: &str) -> Self {
        self.set("backend", quoted(backend))
    }
    pub fn reconcile_interval(self, d: Duration) -> Self {
        self.set(
            "reconcile_interval",
            quoted(&format!("{}ms", d.as_millis())),
        )
    }
    pub fn keep_on_exit(self, on: bool) -> Self {
        self.set("keep_on_exit", on.to_string())
    }
    pub fn to_toml(&self) -> String {
        let mut s = String::from("[node]\n");
        for (k, v) in &self.keys {
            s.push_str(&format!("{k} = {v}\n"));
        }
        s
    }
}
