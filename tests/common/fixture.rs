//! The set-up most tests share, started in one call: a loopback block, a
//! CoreDNS upstream, and nodens forwarding a zone to it.

use std::time::Duration;

use super::config::{Cfg, Zone};
use super::coredns::CoreDns;
use super::net::Net;
use super::nodens::Nodens;
use super::silent::Silent;

/// A running test set-up. Destructure it as `let Setup { net, core, nodens }`
/// (in that order: nodens is then stopped first and the block released last).
pub struct Setup {
    pub net: Net,
    pub core: CoreDns,
    pub nodens: Nodens,
}

impl Setup {
    /// CoreDNS serving the standard `test.` zone on `net.upstream(0)`, and
    /// nodens with the zone `test.` forwarding to it.
    pub fn new() -> Setup {
        Setup::with(|c, z| c.zone(z))
    }

    /// [`Setup::new`], the configuration made by `cfg` from the defaults and
    /// the `test.` zone (which it must add: `|c, z| c.zone(z.max_fails(3))`).
    pub fn with(cfg: impl FnOnce(Cfg, Zone) -> Cfg) -> Setup {
        Setup::custom(|net| CoreDns::test_zone(net.upstream(0), ""), cfg)
    }

    /// [`Setup::with`] with the CoreDNS `core` starts on the block.
    pub fn custom(core: impl FnOnce(&Net) -> CoreDns, cfg: impl FnOnce(Cfg, Zone) -> Cfg) -> Setup {
        let net = Net::alloc();
        let core = core(&net);
        let zone = Zone::new("test.", &[core.addr]);
        let nodens = Nodens::start(&cfg(Cfg::new(&net), zone));
        Setup { net, core, nodens }
    }
}

/// A silent upstream first and CoreDNS second: every miss waits out the
/// silent one (`upstream_timeout` 1 s, `query_timeout` 4 s) before CoreDNS
/// answers. Destructure as `let SilentFirst { net, silent, core, nodens }`.
pub struct SilentFirst {
    pub net: Net,
    pub silent: Silent,
    pub core: CoreDns,
    pub nodens: Nodens,
}

impl SilentFirst {
    pub fn new() -> SilentFirst {
        let net = Net::alloc();
        let silent = Silent::bind(net.silent(0));
        let core = CoreDns::test_zone(net.upstream(0), "");
        let nodens = Nodens::start(
            &Cfg::new(&net)
                .query_timeout(Duration::from_secs(4))
                .zone(Zone::new("test.", &[silent.addr, core.addr]).upstream_timeout(secs(1))),
        );
        SilentFirst {
            net,
            silent,
            core,
            nodens,
        }
    }
}

/// `Duration::from_secs`, short for configurations.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `Duration::from_millis`, short for configurations.
pub fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
