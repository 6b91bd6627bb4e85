//! A zone's `rewrite` and `dns64` (`upstream::rules`) over arbitrary
//! upstream answers: the answers they rebuild are cached and rendered as
//! the miss path does. The rebuilt names are written out whole and a write
//! back makes them longer, so a legal upstream answer over TCP can grow
//! past 65,535 bytes: whatever comes in, no message longer than that is
//! built, an entry is made of every rebuilt answer `layout` accepts, and
//! rendering it to any client limit stays within the limit (TC aside) and
//! never panics. Run with `-max_len=70000` (fuzz/run does).
//!
//! Input: 1 byte of parameters (dns64 prefix length, `translate_all`),
//! 2 bytes giving the length of the first answer, the first answer (the
//! rewrite's upstream answer and dns64's AAAA answer), then the A answer.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use nodens::wire::query;
use nodens::wire::response;
use nodens::{Entry, Freshness, TtlPolicy, fuzz_rebuild};
use nodens_fuzz::{HEADER_LEN, TC, u16_at};

const POLICY: TtlPolicy = TtlPolicy {
    min_ttl: 0,
    max_ttl: 86400,
    negative_max_ttl: 1800,
    failure_ttl: 5,
};
const LIMITS: [usize; 4] = [512, 1232, 4096, 65535];

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let first_len = usize::from(u16_at(data, 1)).min(data.len() - 3);
    let (first, a) = data[3..].split_at(first_len);
    for msg in fuzz_rebuild(data[0], first, a).into_iter().flatten() {
        assert!(msg.len() <= 65_535, "built a message of {} bytes", msg.len());
        let Ok(layout) = response::layout(&msg) else {
            continue;
        };
        let entry = Entry::from_response(&msg, &layout, &POLICY, Instant::now())
            .expect("a message layout accepts fits an entry");
        let question = &msg[HEADER_LEN..layout.question_end];
        for (i, limit) in LIMITS.into_iter().enumerate() {
            let mut packet = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, (i & 1) as u8];
            packet.extend_from_slice(question);
            if i & 1 == 1 {
                packet.extend([0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
            }
            let Ok(q) = query::parse(&packet) else {
                continue;
            };
            let mut out = Vec::new();
            entry.render(&q, Instant::now(), Freshness::Fresh, None, limit, &mut out);
            // Over the limit only when even the question does not fit it.
            let least = HEADER_LEN + question.len() + 11;
            assert!(
                out.len() <= limit.max(least),
                "rendered {} bytes for a limit of {limit}",
                out.len()
            );
            if out.len() > limit {
                assert_ne!(u16_at(&out, 2) & TC, 0, "cut without TC");
            }
        }
    }
});
