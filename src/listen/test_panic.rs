//! Debug builds only (the tests' binary): triggers that panic a serving
//! loop on purpose, so that the tests can show what clients lose to a bug on
//! the request path. Release builds have none of them.
//!
//! - `$NODENS_TEST_PANIC_QNAME` (a name): a query for it panics the UDP
//!   worker or the TCP connection that reads it.
//! - `$NODENS_TEST_PANIC_ACCEPT_FROM` (an address): a TCP connection from it
//!   panics the acceptor that accepts it.

use std::net::IpAddr;
use std::sync::LazyLock;

static QNAME: LazyLock<Option<Vec<u8>>> = LazyLock::new(|| {
    let text = std::env::var("NODENS_TEST_PANIC_QNAME").ok()?;
    crate::wire::name::from_text(&text).ok()
});

static ACCEPT_FROM: LazyLock<Option<IpAddr>> = LazyLock::new(|| {
    std::env::var("NODENS_TEST_PANIC_ACCEPT_FROM")
        .ok()?
        .parse()
        .ok()
});

/// Panics if `packet` asks the trigger's name.
pub(super) fn on_query(packet: &[u8]) {
    let Some(name) = QNAME.as_deref() else {
        return;
    };
    if packet.len() >= 12 + name.len() && packet[12..12 + name.len()].eq_ignore_ascii_case(name) {
        panic!("NODENS_TEST_PANIC_QNAME asked");
    }
}

/// Panics if a connection from `peer` was accepted.
pub(super) fn on_accept(peer: IpAddr) {
    if *ACCEPT_FROM == Some(peer) {
        panic!("NODENS_TEST_PANIC_ACCEPT_FROM connected");
    }
}
