//! `config::resolv_conf_nameservers` on any file content: never panics;
//! an accepted file gives port-53 addresses, each the address of one of its
//! `nameserver` lines, in order; a refused one gives a message naming the
//! file.
//!
//! Input: the bytes of a resolv.conf file, written to a file of this
//! process under the temporary directory (the function takes a path).
#![no_main]

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nodens::config::resolv_conf_nameservers;

fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("nodens-fuzz-resolv-{}.conf", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = path();
    std::fs::write(path, data).expect("write the temporary resolv.conf");
    let result = resolv_conf_nameservers(path);
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(result.is_err(), "non-UTF-8 file accepted");
        return;
    };
    // The address words of the nameserver lines, zone index removed.
    let candidates: Vec<IpAddr> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next()? != "nameserver" {
                return None;
            }
            let word = words.next()?;
            let ip = word.split_once('%').map_or(word, |(ip, _)| ip);
            ip.parse().ok()
        })
        .collect();
    match result {
        Ok(servers) => {
            assert!(!servers.is_empty(), "Ok with no server");
            assert!(servers.iter().all(|s| s.port() == 53), "{servers:?}");
            let ips: Vec<IpAddr> = servers.iter().map(|s| s.ip()).collect();
            assert_eq!(
                ips, candidates,
                "servers are not the nameserver lines' addresses"
            );
        }
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(
                candidates.is_empty(),
                "refused a file with nameservers {candidates:?}: {message}"
            );
        }
    }
});
