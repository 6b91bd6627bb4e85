//! The resolver clients the search-list tests look names up with, built
//! from tests/fixtures/stub: getaddrinfo linked with musl, and Go's pure
//! resolver (glibc's is `getent ahosts`, already on the machine).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::netns::run_ok;
use super::tools::tool;

/// getaddrinfo(NAME, AF_UNSPEC) built with musl-gcc, in `dir`.
pub fn build_musl_lookup(dir: &Path) -> PathBuf {
    let out = dir.join("lookup-musl");
    run_ok(
        Command::new(tool("musl-gcc"))
            .args(["-static", "-O2", "-o"])
            .arg(&out)
            .arg("tests/fixtures/stub/lookup.c"),
    );
    out
}

/// `net.LookupIP(NAME)` built with Go, in `dir` (run it with
/// GODEBUG=netdns=go for the pure-Go resolver).
pub fn build_go_lookup(dir: &Path) -> PathBuf {
    let out = dir.join("lookup-go");
    run_ok(
        Command::new(tool("go"))
            .args(["build", "-o"])
            .arg(&out)
            .arg("tests/fixtures/stub/lookup.go")
            .env("CGO_ENABLED", "0")
            .env("GOFLAGS", ""),
    );
    out
}
