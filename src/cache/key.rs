//! Cache keys: the question name folded to lower case, type, class, and the
//! DO and CD bits (a DNSSEC-aware client must not get an answer stripped of
//! signatures, nor a validating one an answer fetched with CD set).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::LazyLock;

use equivalent::Equivalent;

use crate::wire::name::{self, MAX_NAME_LEN};
use crate::wire::query::Query;

pub(crate) const FLAG_DO: u8 = 1;
pub(crate) const FLAG_CD: u8 = 2;
/// The flag byte's bits above DO and CD hold the view (the cache partition,
/// see `upstream::views`): keys of different views never compare equal, and
/// the hit path compares nothing more than it did.
const VIEW_SHIFT: u8 = 2;

/// An owned key, stored in the cache and in the in-flight table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    name: Box<[u8]>,
    qtype: u16,
    qclass: u16,
    flags: u8,
}

/// A key borrowed from a stack buffer, so a lookup allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct KeyRef<'a> {
    pub name: &'a [u8],
    pub qtype: u16,
    pub qclass: u16,
    pub flags: u8,
}

/// Room for a folded question name, filled by [`KeyRef::from_query`].
pub type NameBuf = [u8; MAX_NAME_LEN];

impl<'a> KeyRef<'a> {
    pub fn from_query(q: &Query<'_>, buf: &'a mut NameBuf) -> KeyRef<'a> {
        let n = name::fold_into(q.name(), buf);
        let mut flags = 0;
        if q.dnssec_ok() {
            flags |= FLAG_DO;
        }
        if q.checking_disabled() {
            flags |= FLAG_CD;
        }
        KeyRef {
            name: &buf[..n],
            qtype: q.qtype,
            qclass: q.qclass,
            flags,
        }
    }

    /// The key in `view`'s partition of the cache (0: no views).
    #[inline]
    pub(crate) fn in_view(self, view: u8) -> KeyRef<'a> {
        KeyRef {
            flags: self.flags | view << VIEW_SHIFT,
            ..self
        }
    }

    /// The view this key belongs to (0: no views).
    pub(crate) fn view(&self) -> u8 {
        self.flags >> VIEW_SHIFT
    }

    pub fn to_owned(&self) -> Key {
        Key {
            name: self.name.into(),
            qtype: self.qtype,
            qclass: self.qclass,
            flags: self.flags,
        }
    }
}

impl Key {
    pub fn as_ref(&self) -> KeyRef<'_> {
        KeyRef {
            name: &self.name,
            qtype: self.qtype,
            qclass: self.qclass,
            flags: self.flags,
        }
    }

    /// A key from its parts: the folded name, type, class and flags.
    pub(crate) fn from_parts(name: &[u8], qtype: u16, qclass: u16, flags: u8) -> Key {
        Key {
            name: name.into(),
            qtype,
            qclass,
            flags,
        }
    }

    pub(crate) fn flags(&self) -> u8 {
        self.flags
    }

    /// The folded question name in wire form.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    pub fn qtype(&self) -> u16 {
        self.qtype
    }

    pub fn qclass(&self) -> u16 {
        self.qclass
    }

    /// The view this key belongs to (0: no views).
    pub(crate) fn view(&self) -> u8 {
        self.flags >> VIEW_SHIFT
    }

    pub fn dnssec_ok(&self) -> bool {
        self.flags & FLAG_DO != 0
    }

    pub fn checking_disabled(&self) -> bool {
        self.flags & FLAG_CD != 0
    }

    /// The question section this key stands for, in wire form (lower case).
    pub fn question(&self) -> Vec<u8> {
        let mut q = Vec::with_capacity(self.name.len() + 4);
        q.extend_from_slice(&self.name);
        q.extend(self.qtype.to_be_bytes());
        q.extend(self.qclass.to_be_bytes());
        q
    }

    /// Bytes this key occupies, for the cache's weight.
    pub fn weight(&self) -> usize {
        self.name.len() + std::mem::size_of::<Key>()
    }
}

/// The key of the process's key hash, random per process: query names are
/// chosen by clients, who must not be able to pile them into one bucket.
static SEED: LazyLock<ahash::RandomState> = LazyLock::new(ahash::RandomState::new);

/// Both key forms must hash the same bytes in the same order.
fn keyed_hash(name: &[u8], qtype: u16, qclass: u16, flags: u8) -> u64 {
    let mut state = SEED.build_hasher();
    state.write(name);
    // One word for the rest: each write is a round of the hash.
    state.write_u64(u64::from(qtype) << 24 | u64::from(qclass) << 8 | u64::from(flags));
    state.finish()
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(keyed_hash(&self.name, self.qtype, self.qclass, self.flags));
    }
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hashed().hash);
    }
}

impl<'a> KeyRef<'a> {
    /// The key with its hash, to look it up in several tables for the
    /// price of one hash.
    pub fn hashed(self) -> Hashed<'a> {
        Hashed {
            hash: keyed_hash(self.name, self.qtype, self.qclass, self.flags),
            key: self,
        }
    }
}

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        self.qtype == key.qtype
            && self.qclass == key.qclass
            && self.flags == key.flags
            && self.name == &*key.name
    }
}

/// A key and its hash, computed once.
#[derive(Debug, Clone, Copy)]
pub struct Hashed<'a> {
    key: KeyRef<'a>,
    hash: u64,
}

impl Hash for Hashed<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Equivalent<Key> for Hashed<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        self.key.equivalent(key)
    }
}

/// The hasher of the tables keyed by [`Key`]: a key hashes itself (keyed,
/// see [`SEED`]) into one `u64`, which this passes through. So a key
/// hashed once ([`Hashed`]) costs nothing more per table it is looked up in.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KeyHashing;

impl BuildHasher for KeyHashing {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}

/// See [`KeyHashing`].
#[derive(Debug)]
pub(crate) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    /// Only keys hash into this, with `write_u64`; anything else is
    /// mixed in all the same rather than lost.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn h<T: Hash>(t: &T) -> u64 {
        let mut s = DefaultHasher::new();
        t.hash(&mut s);
        s.finish()
    }

    #[test]
    fn borrowed_and_owned_agree() {
        let r = KeyRef {
            name: b"\x01a\x00",
            qtype: 1,
            qclass: 1,
            flags: FLAG_DO,
        };
        let k = r.to_owned();
        assert_eq!(h(&r), h(&k));
        assert_eq!(h(&r.hashed()), h(&k));
        assert!(r.hashed().equivalent(&k));
        assert!(r.equivalent(&k));
        let other = KeyRef { flags: 0, ..r };
        assert!(!other.equivalent(&k));
        let viewed = r.in_view(5);
        assert!(!viewed.equivalent(&k), "another view, another entry");
        assert_ne!(h(&viewed), h(&k));
        assert!(viewed.to_owned().dnssec_ok() && viewed.to_owned().view() == 5);
    }
}
