//! The test zone: the zone file text CoreDNS serves, and what is in it.

use std::fmt::Write as _;

/// A zone file for `origin` ("test."): SOA with TTL 3600 and MINIMUM 3 (so
/// negative answers are cached 3 s), NS, then `records` (relative names).
pub fn zone_file(origin: &str, records: &str) -> String {
    format!(
        "$ORIGIN {origin}\n$TTL 3600\n\
         @ 3600 IN SOA ns.{origin} hostmaster.{origin} 1 7200 3600 1209600 3\n\
         @ 3600 IN NS ns.{origin}\n\
         ns 3600 IN A 192.0.2.53\n\
         {records}\n"
    )
}

/// Number of records in the `big.test.` TXT RRset.
pub const BIG_TXT_COUNT: usize = 45;
/// Number of records in the `mid.test.` TXT RRset.
pub const MID_TXT_COUNT: usize = 8;

/// The records of the standard `test.` zone. Addresses are documentation
/// addresses (192.0.2.0/24, 2001:db8::/32): data only, never contacted.
///
/// - `www` A 192.0.2.1 and AAAA 2001:db8::1, TTL 300
/// - `short` / `short2` A 192.0.2.2 / .4, TTL 2 (expire during a test)
/// - `pf` / `pf2` A 192.0.2.5 / .6, TTL 8 (prefetch window tests)
/// - `mail` MX 10 mx, `mx` A 192.0.2.3
/// - `alias` CNAME `alias2` CNAME `www` (a chain)
/// - `x.slow` A 192.0.2.30 (tests route `slow.test.` through a silent upstream first)
/// - `mid` TXT: 8 x ~100 bytes (~900 bytes: over 512, under 1232)
/// - `big` TXT: 45 x ~100 bytes (~5 KB: over 4096 too, so CoreDNS truncates
///   it over UDP whatever EDNS size nodens advertises up to 4096)
/// - `nothere`, `nope`, `poison`: absent (NXDOMAIN)
pub fn test_records() -> String {
    let mut s = String::from(
        "www 300 IN A 192.0.2.1\n\
         www 300 IN AAAA 2001:db8::1\n\
         short 2 IN A 192.0.2.2\n\
         short2 2 IN A 192.0.2.4\n\
         pf 8 IN A 192.0.2.5\n\
         pf2 8 IN A 192.0.2.6\n\
         mail 300 IN MX 10 mx\n\
         mx 300 IN A 192.0.2.3\n\
         alias 300 IN CNAME alias2\n\
         alias2 300 IN CNAME www\n\
         x.slow 300 IN A 192.0.2.30\n",
    );
    for i in 0..MID_TXT_COUNT {
        writeln!(s, "mid 300 IN TXT \"{i:02}{}\"", "m".repeat(98)).unwrap();
    }
    for i in 0..BIG_TXT_COUNT {
        writeln!(s, "big 300 IN TXT \"{i:02}{}\"", "b".repeat(98)).unwrap();
    }
    s
}

/// The standard `test.` zone plus `extra` records.
pub fn test_zone(extra: &str) -> String {
    zone_file("test.", &format!("{}{extra}\n", test_records()))
}
