//! The set-up most tests share, started in one call: a loopback block, a
//! CoreDNS upstream, and nodens forwarding the zone `test.` to it.
//!
//! Each returns a tuple to destructure in order, `let (net, core, nodens) =
//! setup();`: locals drop in reverse order, so nodens stops first and the
//! block is released last.

use std::time::Duration;

use super::config::{Cfg, Zone};
use super::coredns::CoreDns;
use super::net::Net;
use super::nodens::Nodens;
use super::silent::Silent;

/// CoreDNS serving the standard `test.` zone on `net.upstream(0)`, and
/// nodens with the zone `test.` forwarding to it.
pub fn setup() -> (Net, CoreDns, Nodens) {
    setup_with(|c, z| c.zone(z))
}

/// [`setup`] with the configuration made by `cfg` from the defaults and the
/// `test.` zone, which it must add: `|c, z| c.zone(z.max_fails(3))`.
pub fn setup_with(cfg: impl FnOnce(Cfg, Zone) -> Cfg) -> (Net, CoreDns, Nodens) {
    setup_custom(|net| CoreDns::test_zone(net.upstream(0), ""), cfg)
}

/// [`setup_with`] with the CoreDNS that `core` starts in the block.
pub fn setup_custom(
    core: impl FnOnce(&Net) -> CoreDns,
    cfg: impl FnOnce(Cfg, Zone) -> Cfg,
) -> (Net, CoreDns, Nodens) {
    let net = Net::alloc();
    let core = core(&net);
    let zone = Zone::new("test.", &[core.addr]);
    let nodens = Nodens::start(&cfg(Cfg::new(&net), zone));
    (net, core, nodens)
}

/// A silent upstream first and CoreDNS second: every miss waits out the
/// silent one (`upstream_timeout` 1 s, `query_timeout` 4 s) before CoreDNS
/// answers.
pub fn silent_first() -> (Net, Silent, CoreDns, Nodens) {
    silent_first_with(secs(4), secs(1))
}

/// [`silent_first`] with these timeouts.
pub fn silent_first_with(
    query_timeout: Duration,
    upstream_timeout: Duration,
) -> (Net, Silent, CoreDns, Nodens) {
    let net = Net::alloc();
    let silent = Silent::bind(net.silent(0));
    let core = CoreDns::test_zone(net.upstream(0), "");
    let nodens =
        Nodens::start(&Cfg::new(&net).query_timeout(query_timeout).zone(
            Zone::new("test.", &[silent.addr, core.addr]).upstream_timeout(upstream_timeout),
        ));
    (net, silent, core, nodens)
}

/// `Duration::from_secs`, short for configurations.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `Duration::from_millis`, short for configurations.
pub fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// CoreDNS answering every A query under `delay.test.` after `delay`
/// ([`CoreDns::test_zone_delayed`]), and nodens sending the zone `test.` to
/// it over TCP (`force_tcp`) with these timeouts and pool limits.
pub fn delayed_force_tcp(
    delay: &str,
    query_timeout: Duration,
    upstream_timeout: Duration,
    pool: super::config::Pool,
) -> (Net, CoreDns, Nodens) {
    setup_custom(
        |net| CoreDns::test_zone_delayed(net.upstream(0), delay),
        |c, z| {
            c.query_timeout(query_timeout).zone(
                z.transport(super::config::Transport::ForceTcp)
                    .upstream_timeout(upstream_timeout)
                    .pool(pool),
            )
        },
    )
}
