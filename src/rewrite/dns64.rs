//! DNS64 (RFC 6147), as CoreDNS's `dns64` plugin does it: an AAAA
//! question whose answer holds no AAAA record (and is not NXDOMAIN) is
//! asked again as A, and each A record becomes an AAAA record of the
//! prefix (RFC 6052) with the IPv4 address embedded.

use std::net::Ipv6Addr;

use super::message::{Message, Record};
use crate::wire::{rcode, rtype};

/// A zone's `[zone.dns64]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dns64 {
    pub(crate) prefix: Ipv6Addr,
    /// 32, 40, 48, 56, 64 or 96 (checked by the config).
    pub(crate) prefix_len: u8,
    /// Synthesize even when the answer has AAAA records (not RFC 6147
    /// 5.1.1; CoreDNS's `translate_all`).
    pub(crate) translate_all: bool,
}

impl Dns64 {
    /// Whether the AAAA answer `aaaa` is to be replaced by a synthesis.
    pub(crate) fn wanted(&self, aaaa: &Message) -> bool {
        if aaaa.rcode() == rcode::NXDOMAIN {
            return false;
        }
        self.translate_all || !aaaa.sections[0].iter().any(|r| r.rtype == rtype::AAAA)
    }

    /// The answer to the AAAA question of `aaaa` made from `a`, the answer
    /// to the same name's A question: A records become AAAA records, every
    /// other record is kept (RFC 6147 5.3.3), the authority and additional
    /// sections are A's. A synthesized record's TTL is the smaller of the
    /// A record's and the SOA's in `aaaa` (600 without one; 5.1.7).
    pub(crate) fn synthesize(&self, aaaa: &Message, a: Message) -> Message {
        let soa_ttl = aaaa.sections[1]
            .iter()
            .rev()
            .find(|r| r.rtype == rtype::SOA)
            .map_or(600, |r| r.ttl);
        let Message {
            id_flags,
            sections: [answer, authority, additional],
            ..
        } = a;
        let answer = answer
            .into_iter()
            .map(|r| match <[u8; 4]>::try_from(&r.rdata[..]) {
                Ok(v4) if r.rtype == rtype::A => Record {
                    rtype: rtype::AAAA,
                    ttl: r.ttl.min(soa_ttl),
                    rdata: self.embed(v4).octets().to_vec(),
                    ..r
                },
                _ => r,
            })
            .collect();
        let mut out = Message {
            // A's truncation bit, and the AAAA reply's other flags.
            id_flags: [
                aaaa.id_flags[0],
                aaaa.id_flags[1],
                (aaaa.id_flags[2] & !0x02) | (id_flags[2] & 0x02),
                aaaa.id_flags[3],
            ],
            question: aaaa.question.clone(),
            sections: [answer, authority, additional],
        };
        out.set_rcode(rcode::NOERROR);
        out
    }

    /// RFC 6052 section 2.2: the IPv4 address after the prefix, skipping
    /// bits 64 to 71.
    fn embed(&self, v4: [u8; 4]) -> Ipv6Addr {
        let mut v6 = self.prefix.octets();
        let mut i = usize::from(self.prefix_len / 8);
        for byte in v4 {
            if i == 8 {
                i += 1;
            }
            v6[i] = byte;
            i += 1;
        }
        if i <= 8 {
            v6[8] = 0;
        }
        Ipv6Addr::from(v6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns64(prefix: &str, len: u8) -> Dns64 {
        Dns64 {
            prefix: prefix.parse().unwrap(),
            prefix_len: len,
            translate_all: false,
        }
    }

    #[test]
    fn rfc_6052_examples() {
        // RFC 6052 section 2.4, the IPv4 address 192.0.2.33.
        let v4 = [192, 0, 2, 33];
        let cases = [
            ("2001:db8::", 32, "2001:db8:c000:221::"),
            ("2001:db8:100::", 40, "2001:db8:1c0:2:21::"),
            ("2001:db8:122::", 48, "2001:db8:122:c000:2:2100::"),
            ("2001:db8:122:300::", 56, "2001:db8:122:3c0:0:221::"),
            ("2001:db8:122:344::", 64, "2001:db8:122:344:c0:2:2100:0"),
            ("2001:db8:122:344::", 96, "2001:db8:122:344::192.0.2.33"),
            ("64:ff9b::", 96, "64:ff9b::192.0.2.33"),
        ];
        for (prefix, len, want) in cases {
            let got = dns64(prefix, len).embed(v4);
            assert_eq!(got, want.parse::<Ipv6Addr>().unwrap(), "{prefix}/{len}");
        }
    }
}
