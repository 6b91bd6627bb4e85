//! Where the names are inside a record's RDATA.
//!
//! RFC 3597 section 4: names in the RDATA of the types of RFC 1035 may be
//! compressed, and receivers should decompress those of RP, AFSDB, RT and
//! SRV too. Both the cache's walk of a response ([`super::response`]) and
//! the autopath reply ([`super::chain`]) read them with this one table, so
//! a record the cache accepts is one the chain can rewrite.

/// How the names inside a type's RDATA are laid out: the bytes before the
/// first name and how many names follow (bytes may follow them).
pub(crate) fn names(rtype: u16) -> Option<(usize, usize)> {
    Some(match rtype {
        // NS, MD, MF, CNAME, MB, MG, MR, PTR, DNAME
        2..=5 | 7..=9 | 12 | 39 => (0, 1),
        // SOA, MINFO, RP: two names (SOA's counters follow them)
        6 | 14 | 17 => (0, 2),
        // MX, AFSDB, RT, KX: a preference, then a name
        15 | 18 | 21 | 36 => (2, 1),
        // SRV: priority, weight, port, then a name
        33 => (6, 1),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::rtype;

    #[test]
    fn names_follow_each_type_s_fixed_prefix() {
        assert_eq!(names(rtype::CNAME), Some((0, 1)));
        assert_eq!(names(rtype::SOA), Some((0, 2)));
        assert_eq!(names(rtype::MX), Some((2, 1)));
        assert_eq!(names(18), Some((2, 1))); // AFSDB
        assert_eq!(names(rtype::SRV), Some((6, 1)));
        assert_eq!(names(rtype::A), None);
        assert_eq!(names(rtype::TXT), None);
    }
}
