//! A pod on a test node: a network namespace of its own behind a veth from
//! the node's namespace, and the pod's resolv.conf (in `/etc/netns/NAME`,
//! which `ip netns exec` mounts): where glibc, musl and Go look names up
//! from, as in a pod.

use std::path::{Path, PathBuf};

use crate::netns::Netns;

/// A pod's network; its namespace and resolv.conf go on drop.
pub struct PodNet {
    pub ns: Netns,
    etc: PathBuf,
}

/// Where a [`PodNet`] is plugged in and which addresses it holds.
pub struct PodAddrs<'a> {
    /// The node's end of the veth, and its address (/24).
    pub veth: &'a str,
    pub node_side: &'a str,
    /// The pod's addresses: IPv4 (/24) and IPv6 (/64). An IPv6 address
    /// makes getaddrinfo's AI_ADDRCONFIG ask AAAA.
    pub ipv4: &'a str,
    pub ipv6: &'a str,
}

impl PodNet {
    /// A namespace named after `tag`, joined to `node` by a veth.
    pub fn create(node: &Netns, tag: &str, addrs: &PodAddrs<'_>) -> PodNet {
        let ns = Netns::create(tag);
        let (veth, pod) = (addrs.veth, ns.name.as_str());
        node.run(&[
            "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pod,
        ]);
        let node_side = format!("{}/24", addrs.node_side);
        node.run(&["ip", "addr", "add", &node_side, "dev", veth]);
        node.run(&["ip", "link", "set", veth, "up"]);
        let ipv4 = format!("{}/24", addrs.ipv4);
        ns.run(&["ip", "addr", "add", &ipv4, "dev", "eth0"]);
        let ipv6 = format!("{}/64", addrs.ipv6);
        ns.run(&["ip", "addr", "add", &ipv6, "dev", "eth0", "nodad"]);
        ns.run(&["ip", "link", "set", "eth0", "up"]);
        let etc = Path::new("/etc/netns").join(&ns.name);
        PodNet { ns, etc }
    }

    /// Writes the pod's resolv.conf.
    pub fn resolv_conf(&self, text: &str) {
        std::fs::create_dir_all(&self.etc).unwrap();
        std::fs::write(self.etc.join("resolv.conf"), text).unwrap();
    }

    /// Runs `program` in the pod with `env`; its output, or why it failed.
    pub fn run(&self, program: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
        let mut cmd = std::process::Command::new(crate::tool("ip"));
        cmd.args(["netns", "exec", &self.ns.name]).args(program);
        cmd.envs(env.iter().copied());
        let out = cmd.output().unwrap_or_else(|e| panic!("{program:?}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
        }
    }
}

impl Drop for PodNet {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}
