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

pub const FAILURES_BEFORE_FALLBACK: u32 = 3;
pub const FALLBACK_FOR: Duration = Duration::from_secs(600);

/// What one upstream's answers have shown about its case handling.
#[derive(Default)]
pub struct CaseMemory {
    failures_in_a_row: AtomicU32,
    off_until: Mutex<Option<Instant>>,
}

impl CaseMemory {
    /// Whether the next query to this upstream gets randomised case.
    pub fn randomise(&self) -> bool {
        if self.failures_in_a_row.load(Ordering::Relaxed) < FAILURES_BEFORE_FALLBACK {
            return true;
        }
        let mut off = self.off_until.lock().expect("case memory lock");
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
    pub fn preserved(&self) {
        if self.failures_in_a_row.load(Ordering::Relaxed) != 0 {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
        }
    }

    /// An answer came back with the right ID in another case. Returns true
    /// when this switches randomisation off.
    pub fn not_preserved(&self) -> bool {
        let failures = self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if failures != FAILURES_BEFORE_FALLBACK {
            return false;
        }
        *self.off_until.lock().expect("case memory lock") = Some(Instant::now() + FALLBACK_FOR);
        true
    }
}

/// `question` (wire name, type, class) with each ASCII letter of the name
/// in a random case; the type and class after it are left alone.
pub fn randomise(question: &[u8]) -> Vec<u8> {
    let mut out = question.to_vec();
    let mut rng = rand::rng();
    let mut bits: u64 = rng.random();
    let mut left = 64;
    let mut at = 0;
    while at < out.len() && out[at] != 0 {
        let len = usize::from(out[at]);
        for byte in out.iter_mut().skip(at + 1).take(len) {
            if byte.is_ascii_alphabetic() {
                if left == 0 {
                    bits = rng.random();
                    left = 64;
                }
                if bits & 1 == 1 {
                    *byte ^= 0x20;
                }
                bits >>= 1;
                left -= 1;
            }
        }
        at += 1 + len;
    }
    out
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
            let r = randomise(q);
            assert!(r.eq_ignore_ascii_case(q));
            assert_eq!(r[27..39], q[27..39]);
            assert_eq!(&r[r.len() - 4..], &q[q.len() - 4..]);
            seen_upper |= r.iter().any(u8::is_ascii_uppercase);
        }
        assert!(seen_upper);
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
        *m.off_until.lock().unwrap() = Some(Instant::now());
        assert!(m.randomise(), "tried again after the fallback period");
        assert!(m.not_preserved(), "one more failure switches it off");
    }
}
