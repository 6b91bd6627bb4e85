//! 0x20: the letter case of the question sent upstream is randomised and
//! must come back exactly (draft-vixie-dnsext-dns0x20). A forger who knows
//! the socket's port must then guess one bit per letter of the name on top
//! of the 16-bit ID.
//!
//! Servers that do not preserve case answer with another spelling: such an
//! answer is not trusted over UDP (a forger who guessed the ID looks the
//! same) and the query is asked again over TCP. After
//! [`FAILURES_BEFORE_FALLBACK`] such answers in a row with no answer in the
//! right case between them, randomisation is switched off for that upstream
//! for [`FALLBACK_FOR`], then tried again.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;

pub(crate) const FAILURES_BEFORE_FALLBACK: u32 = 3;
pub(crate) const FALLBACK_FOR: Duration = Duration::from_secs(600);

/// What one upstream's answers have shown about its case handling.
#[derive(Default)]
pub(crate) struct CaseMemory {
    failures_in_a_row: AtomicU32,
    off_until: Mutex<Option<Instant>>,
}

impl CaseMemory {
    /// Whether the next query to this upstream gets randomised case.
    pub(crate) fn randomise(&self) -> bool {
        if self.failures_in_a_row.load(Ordering::Relaxed) < FAILURES_BEFORE_FALLBACK {
            return true;
        }
        let mut off = crate::lock::lock(&self.off_until);
        match *off {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                // Time to try again: one more failure switches it off anew.
                *off = None;
                self.failures_in_a_row
                    .store(FAILURES_BEFORE_FALLBACK - 1, Ordering::Relaxed);
                true
            }
            None => true,
        }
    }

    /// An answer came back in the case it was asked in.
    pub(crate) fn preserved(&self) {
        if self.failures_in_a_row.load(Ordering::Relaxed) != 0 {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
        }
    }

    /// An answer came back with the right ID in another case. Returns true
    /// when this switches randomisation off.
    pub(crate) fn not_preserved(&self) -> bool {
        let failures = self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if failures != FAILURES_BEFORE_FALLBACK {
            return false;
        }
        *crate::lock::lock(&self.off_until) = Some(Instant::now() + FALLBACK_FOR);
        true
    }
}

/// Puts each ASCII letter of `question`'s name (a wire name, then type
/// and class) in a random case; the type and class are left alone. A
/// length byte is at most 63, below every letter, so the name's bytes can
/// be taken as they come: eight at a time, one random bit each, from one
/// random word per 64 bytes.
pub(crate) fn randomise(question: &mut [u8]) {
    let name_len = question.len().saturating_sub(4);
    let mut rng = rand::rng();
    let mut bits = 0u64;
    let mut next_flips = |chunk: usize| {
        if chunk % 8 == 0 {
            bits = rng.random();
        }
        let flips = spread_to_bit5(bits as u8);
        bits >>= 8;
        flips
    };
    let name = &mut question[..name_len];
    let mut count = 0;
    for chunk in name.chunks_exact_mut(8) {
        flip_word(chunk, next_flips(count));
        count += 1;
    }
    let rest = name_len % 8;
    if rest == 0 {
        return;
    }
    let flips = next_flips(count);
    if name_len >= 8 {
        // The last eight bytes, of which only the last `rest` (the high
        // ones of a little-endian word) are still to do.
        flip_word(
            &mut name[name_len - 8..],
            flips & (u64::MAX << (8 * (8 - rest))),
        );
    } else {
        for (byte, flip) in name.iter_mut().zip(flips.to_le_bytes()) {
            *byte = flip_letters(u64::from(*byte), u64::from(flip)) as u8;
        }
    }
}

/// A byte's value in each of a word's eight bytes, when multiplied by it.
const EACH: u64 = 0x0101_0101_0101_0101;

/// [`flip_letters`] on eight bytes in place.
fn flip_word(bytes: &mut [u8], flips: u64) {
    let word = u64::from_le_bytes((*bytes).try_into().expect("8 bytes"));
    bytes.copy_from_slice(&flip_letters(word, flips).to_le_bytes());
}

/// Bit `k` of `bits` as bit 5 (the case bit) of byte `k` of a word.
fn spread_to_bit5(bits: u8) -> u64 {
    // Byte k keeps bit k of its copy of `bits`; adding 0x7f then carries
    // into bit 7 exactly when that bit is set, and never past the byte.
    let isolated = (u64::from(bits) * EACH) & 0x8040_2010_0804_0201;
    ((isolated + 0x7f * EACH) & (0x80 * EACH)) >> 2
}

/// `word`'s eight bytes with the case of each ASCII letter flipped where
/// bit 5 of the same byte of `flips` is set; other bytes unchanged.
fn flip_letters(word: u64, flips: u64) -> u64 {
    const HIGH: u64 = 0x80 * EACH;
    let lower = word | (0x20 * EACH);
    // Below 0x80 in every byte, so the sums below never carry into the next.
    let low7 = lower & !HIGH;
    let at_least_a = (low7 + (0x80 - b'a' as u64) * EACH) & HIGH;
    let past_z = (low7 + (0x80 - b'z' as u64 - 1) * EACH) & HIGH;
    let letter = at_least_a & !past_z & !(lower & HIGH);
    word ^ ((letter >> 2) & flips)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn randomises_letters_only() {
        // Type 65 (HTTPS) reads as 'A': only the name may change.
        let q = b"\x1aabcdefghijklmnopqrstuvwxyz\x0b0123456789-\x01x\x00\x00\x41\x00\x01";
        let mut seen_upper = false;
        for _ in 0..8 {
            let mut r = q.to_vec();
            randomise(&mut r);
            assert!(r.eq_ignore_ascii_case(q));
            assert_eq!(r[27..39], q[27..39]);
            assert_eq!(&r[r.len() - 4..], &q[q.len() - 4..]);
            seen_upper |= r.iter().any(u8::is_ascii_uppercase);
        }
        assert!(seen_upper);
    }

    #[test]
    fn flips_exactly_the_letters_whose_random_bit_is_set() {
        for byte in 0..=255u8 {
            for random in [0u8, 0x20, 0xff, 0xdf] {
                let word = u64::from(byte) << 24 | 0x41 << 8;
                let flipped = flip_letters(word, u64::from(random) << 24);
                let want = if byte.is_ascii_alphabetic() && random & 0x20 != 0 {
                    byte ^ 0x20
                } else {
                    byte
                };
                assert_eq!(flipped, u64::from(want) << 24 | 0x41 << 8, "byte {byte:#x}");
            }
        }
    }

    #[test]
    fn every_letter_comes_out_in_both_cases() {
        // Names of every length up to 20 bytes: whole words, a tail after
        // them, and names shorter than a word.
        for len in 1..=18 {
            let label = [&[len as u8][..], &vec![b'q'; len]].concat();
            let q = [label.as_slice(), b"\x00\x00\x01\x00\x01"].concat();
            let (mut upper, mut lower) = (vec![false; q.len()], vec![false; q.len()]);
            for _ in 0..64 {
                let mut r = q.clone();
                randomise(&mut r);
                assert!(r.eq_ignore_ascii_case(&q));
                for (i, b) in r.iter().enumerate() {
                    upper[i] |= *b == b'Q';
                    lower[i] |= *b == b'q';
                }
            }
            for i in 1..=len {
                assert!(upper[i] && lower[i], "length {len}, byte {i}");
            }
        }
    }

    #[test]
    fn spreads_each_bit_to_the_case_bit_of_its_byte() {
        for bits in 0..=255u8 {
            let spread = spread_to_bit5(bits).to_le_bytes();
            for (k, byte) in spread.iter().enumerate() {
                let want = if bits >> k & 1 == 1 { 0x20 } else { 0 };
                assert_eq!(*byte, want, "bits {bits:#x}, byte {k}");
            }
        }
    }

    #[test]
    fn randomises_letters_past_the_first_64_bytes_too() {
        let label = [b"\x28".as_slice(), &[b'a'; 40]].concat();
        let q = [label.as_slice(), &label, &label, b"\x00\x00\x01\x00\x01"].concat();
        let mut upper_late = false;
        for _ in 0..8 {
            let mut r = q.clone();
            randomise(&mut r);
            assert!(r.eq_ignore_ascii_case(&q));
            upper_late |= r[64..].iter().any(u8::is_ascii_uppercase);
        }
        assert!(upper_late);
    }

    #[test]
    fn falls_back_after_failures_in_a_row() {
        let m = CaseMemory::default();
        assert!(m.randomise());
        assert!(!m.not_preserved());
        m.preserved();
        for _ in 0..FAILURES_BEFORE_FALLBACK - 1 {
            assert!(!m.not_preserved());
            assert!(m.randomise());
        }
        assert!(m.not_preserved());
        assert!(!m.randomise());
        *crate::lock::lock(&m.off_until) = Some(Instant::now());
        assert!(m.randomise(), "tried again after the fallback period");
        assert!(m.not_preserved(), "one more failure switches it off");
    }
}
