//! An SOA record lifted out of an upstream response, its names written out
//! in full, so nodens can put it in negative answers it makes itself
//! (RFC 2308 section 3: an NXDOMAIN carries the zone's SOA, whose TTL and
//! MINIMUM tell the client how long to cache the denial).

use super::name;
use super::response::sane_ttl;
use super::{read_u16, read_u32, rtype};

/// An SOA record with uncompressed names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Soa {
    /// The zone, as an uncompressed wire name folded to lower case.
    owner: Box<[u8]>,
    class: u16,
    ttl: u32,
    /// MNAME and RNAME uncompressed, then the five 32-bit fields.
    rdata: Box<[u8]>,
}

impl Soa {
    /// Reads the SOA record that starts at `at` in `msg` (an owner name, then
    /// type, class, TTL, RDLENGTH, RDATA). `None` if it is not a well-formed
    /// SOA record.
    pub fn read(msg: &[u8], at: usize) -> Option<Soa> {
        let mut owner = Vec::with_capacity(32);
        let at = name::read_into(msg, at, &mut owner).ok()?;
        let fixed = msg.get(at..at + 10)?;
        if read_u16(fixed, 0) != rtype::SOA {
            return None;
        }
        let class = read_u16(fixed, 2);
        let ttl = read_u32(fixed, 4);
        let rdata_start = at + 10;
        let rdata_end = rdata_start + read_u16(fixed, 8) as usize;
        if rdata_end > msg.len() {
            return None;
        }
        let mut rdata = Vec::with_capacity(64);
        let after_mname = name::read_into(msg, rdata_start, &mut rdata).ok()?;
        let after_rname = name::read_into(msg, after_mname, &mut rdata).ok()?;
        if after_rname + 20 != rdata_end {
            return None;
        }
        rdata.extend_from_slice(&msg[after_rname..rdata_end]);
        owner.make_ascii_lowercase();
        Some(Soa {
            owner: owner.into(),
            class,
            ttl,
            rdata: rdata.into(),
        })
    }

    /// An SOA for `zone` (uncompressed wire form) that no upstream sent:
    /// `ns.<zone> hostmaster.<zone> 1 7200 1800 86400 <minimum>`, as a
    /// CoreDNS `template` writes one, for answers nodens makes where it
    /// has learned none.
    pub fn synthesized(zone: &[u8], minimum: u32) -> Soa {
        let mut owner = zone.to_vec();
        owner.make_ascii_lowercase();
        let mut rdata = Vec::with_capacity(2 * owner.len() + 32);
        for label in [&b"\x02ns"[..], b"\x0ahostmaster"] {
            rdata.extend_from_slice(label);
            rdata.extend_from_slice(&owner);
        }
        for field in [1u32, 7200, 1800, 86400, minimum] {
            rdata.extend_from_slice(&field.to_be_bytes());
        }
        Soa {
            owner: owner.into(),
            class: super::class::IN,
            ttl: minimum,
            rdata: rdata.into(),
        }
    }

    /// The zone this SOA is the apex of (lower case, uncompressed wire form).
    pub fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// How long a denial under this zone may be cached: the smaller of the
    /// record's TTL and its MINIMUM field (RFC 2308 section 5).
    /// Values with the top bit set count as 0 (RFC 2181 section 8).
    pub fn negative_ttl(&self) -> u32 {
        let minimum = read_u32(&self.rdata, self.rdata.len() - 4);
        sane_ttl(self.ttl).min(sane_ttl(minimum))
    }

    /// Appends the record to `out` with `ttl` as its TTL.
    pub fn write(&self, ttl: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.owner);
        out.extend_from_slice(&rtype::SOA.to_be_bytes());
        out.extend_from_slice(&self.class.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&(self.rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.rdata);
    }

    /// The bytes [`Soa::write`] appends.
    pub fn wire_len(&self) -> usize {
        self.owner.len() + 10 + self.rdata.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response for `x.cluster.local. A` with the SOA of cluster.local in
    /// the authority section, its names compressed against the question.
    fn nxdomain_with_soa() -> Vec<u8> {
        let mut m = vec![0, 1, 0x81, 0x83, 0, 1, 0, 0, 0, 1, 0, 0];
        m.extend(b"\x01x\x07cluster\x05local\x00\x00\x01\x00\x01");
        // owner: pointer to "cluster.local" at offset 14
        m.extend([0xc0, 14]);
        m.extend([0, 6, 0, 1, 0, 0, 0, 30]);
        let rdata_at = m.len();
        m.extend([0, 0]);
        m.extend(b"\x02ns\x03dns\xc0\x0e"); // ns.dns.cluster.local
        m.extend(b"\x0ahostmaster\xc0\x0e");
        for v in [1u32, 7200, 1800, 86400, 5] {
            m.extend(v.to_be_bytes());
        }
        let rdlen = (m.len() - rdata_at - 2) as u16;
        m[rdata_at..rdata_at + 2].copy_from_slice(&rdlen.to_be_bytes());
        m
    }

    #[test]
    fn reads_compressed_soa_and_writes_it_whole() {
        let msg = nxdomain_with_soa();
        let soa = Soa::read(&msg, 12 + 21).expect("an SOA");
        assert_eq!(soa.owner(), b"\x07cluster\x05local\x00");
        assert_eq!(soa.negative_ttl(), 5);
        let mut out = Vec::new();
        soa.write(5, &mut out);
        assert_eq!(out.len(), soa.wire_len());
        // The written record reads back the same without the message.
        let mut framed = vec![0; 12];
        framed.extend(&out);
        let again = Soa::read(&framed, 12).unwrap();
        assert_eq!(again.owner(), soa.owner());
        assert_eq!(again.rdata, soa.rdata);
        assert_eq!(again.ttl, 5);
    }

    #[test]
    fn a_ttl_with_the_top_bit_set_denies_for_no_time() {
        let mut msg = nxdomain_with_soa();
        let ttl_at = 33 + 2 + 4;
        msg[ttl_at..ttl_at + 4].copy_from_slice(&0x8000_0000u32.to_be_bytes());
        assert_eq!(Soa::read(&msg, 33).unwrap().negative_ttl(), 0);
        let mut msg = nxdomain_with_soa();
        let minimum_at = msg.len() - 4;
        msg[minimum_at..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(Soa::read(&msg, 33).unwrap().negative_ttl(), 0);
    }

    #[test]
    fn refuses_what_is_not_a_whole_soa() {
        let msg = nxdomain_with_soa();
        // The question is not an SOA record.
        assert!(Soa::read(&msg, 12).is_none());
        // Cut short anywhere: never a panic, never an SOA.
        for cut in 12..msg.len() {
            assert!(Soa::read(&msg[..cut], 33).is_none(), "cut at {cut}");
        }
        // A forward pointer is refused.
        let mut bad = msg.clone();
        let at = 33 + 2 + 10 + 7; // the pointer inside MNAME
        bad[at + 1] = 200;
        assert!(Soa::read(&bad, 33).is_none());
    }
}
