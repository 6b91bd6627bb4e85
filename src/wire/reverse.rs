//! Reverse names (RFC 1035 3.5 `in-addr.arpa.`, RFC 3596 2.5 `ip6.arpa.`):
//! the address a PTR question is about. The local records, the hosts files
//! and the cache's watch of the API's addresses all read them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address a reverse name (`4.3.2.1.in-addr.arpa.`, 32 nibbles under
/// `ip6.arpa.`) stands for, in folded wire form; none for another name.
pub(crate) fn address(wire: &[u8]) -> Option<IpAddr> {
    let mut labels = Vec::new();
    let mut at = 0;
    while at < wire.len() && wire[at] != 0 {
        let len = wire[at] as usize;
        labels.push(wire.get(at + 1..at + 1 + len)?);
        at += 1 + len;
    }
    let n = labels.len();
    if n == 6 && labels[4] == b"in-addr" && labels[5] == b"arpa" {
        let mut octets = [0u8; 4];
        for (i, label) in labels[..4].iter().enumerate() {
            let text = std::str::from_utf8(label).ok()?;
            if text.is_empty() || text.len() > 3 || !text.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            octets[3 - i] = text.parse().ok()?;
        }
        return Some(IpAddr::V4(Ipv4Addr::from(octets)));
    }
    if n == 34 && labels[32] == b"ip6" && labels[33] == b"arpa" {
        let mut bits: u128 = 0;
        for label in labels[..32].iter().rev() {
            let [digit] = label else { return None };
            let nibble = (*digit as char).to_digit(16)?;
            bits = (bits << 4) | u128::from(nibble);
        }
        return Some(IpAddr::V6(Ipv6Addr::from(bits)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::name;

    #[test]
    fn reverse_names() {
        let v4 = name::from_text("4.3.2.10.in-addr.arpa").unwrap();
        assert_eq!(address(&v4), Some("10.2.3.4".parse().unwrap()));
        let short = name::from_text("3.2.10.in-addr.arpa").unwrap();
        assert_eq!(address(&short), None);
        let nibbles: String = format!("{:032x}", 0x2001_0db8_u128 << 96)
            .chars()
            .rev()
            .map(|c| format!("{c}."))
            .collect();
        let nibbles = nibbles.replacen('0', "1", 1);
        let v6 = name::from_text(&format!("{nibbles}ip6.arpa")).unwrap();
        assert_eq!(address(&v6), Some("2001:db8::1".parse().unwrap()));
        assert_eq!(address(&name::from_text("a.example").unwrap()), None);
    }
}
