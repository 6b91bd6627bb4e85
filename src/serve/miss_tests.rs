//! Unit tests of `serve::miss`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use super::Start;
use crate::config::Config;
use crate::listen::{Handled, ListenerInfo, Proto, Service};
use crate::serve::{Job, Shared};

/// A query for `host.example.com. A`, recursion desired, no EDNS.
fn query() -> Vec<u8> {
    let mut packet = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    packet.extend_from_slice(b"\x04host\x07example\x03com\x00");
    packet.extend_from_slice(&[0, 1, 0, 1]);
    packet
}

/// A box of up to 1,024 bytes takes mimalloc's small-block path; a
/// larger one costs about 200 instructions more per miss (decision 50).
/// A miss boxes two futures: the one its listener awaits (`resolve`'s,
/// inside the listener's own box or task) and its upstream exchange
/// (`ask_upstream`'s, boxed by `fetch_or_refresh`). The comments on
/// "every miss's future" in serve/miss.rs, serve/search.rs,
/// serve/mod.rs and upstream/forward.rs say how they are kept small.
#[test]
fn the_miss_futures_fit_in_1024_bytes() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _main = runtime.enter();
    let config = Config::parse("[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:9\"]\n").unwrap();
    let shared = Arc::new(Shared::standalone(&config));
    let info = ListenerInfo::new("127.0.0.1:1053".parse().unwrap());
    let client = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 5353);
    let mut out = Vec::new();
    let Handled::Upstream(Job::Miss(miss)) = shared.handle(
        &query(),
        client,
        &info,
        Proto::Udp,
        crate::listen::Arrival::alone(Instant::now()),
        &mut out,
    ) else {
        panic!("a new name in an empty cache is a miss job");
    };
    let deadline = Instant::now();
    let ask = shared.ask_upstream(
        &miss.key,
        &miss.zone,
        &miss.settings,
        deadline,
        Start::LookAgain,
    );
    let ask_size = std::mem::size_of_val(&ask);
    drop(ask);
    let resolve = shared.resolve(Job::Miss(miss), &info, &mut out);
    let resolve_size = std::mem::size_of_val(&resolve);
    eprintln!("a miss's futures: resolve {resolve_size} bytes, ask_upstream {ask_size} bytes");
    for (name, size) in [("resolve", resolve_size), ("ask_upstream", ask_size)] {
        assert!(
            size <= 1024,
            "the miss's {name} future is {size} bytes, over 1,024: see decision 50 \
             and the comments on every miss's future (serve/miss.rs, serve/search.rs, \
             serve/mod.rs, upstream/forward.rs)"
        );
    }
}
