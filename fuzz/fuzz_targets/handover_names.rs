//! `listen::handover::parse_names` on any payload (the list of sockets the
//! previous process sends with their descriptors): never panics, accepts at
//! most 250 names (what one message can carry), refuses every JSON array
//! longer than that, and what it accepts round-trips through its own JSON.
//!
//! Input: the payload bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodens::parse_handover_names;

const MAX_FDS: usize = 250;
/// The longest list a new process reads (64 KiB).
const MAX_LIST: usize = 64 << 10;

fuzz_target!(|data: &[u8]| {
    let parsed = parse_handover_names(data);
    let array_len = match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(serde_json::Value::Array(items)) => Some(items.len()),
        _ => None,
    };
    match parsed {
        Ok(names) => {
            assert!(names.len() <= MAX_FDS, "{} names accepted", names.len());
            assert_eq!(array_len, Some(names.len()), "accepted what is no JSON array of as many items");
            let json = serde_json::to_vec(&names).unwrap();
            let again = parse_handover_names(&json).expect("its own JSON");
            let pairs = |v: &[nodens::HandedName]| {
                v.iter().map(|n| (n.addr, n.kind)).collect::<Vec<_>>()
            };
            assert_eq!(pairs(&names), pairs(&again));
        }
        Err(e) => {
            assert!(e.to_string().starts_with("handover refused: "), "unclear error: {e}");
            if let Some(n) = array_len {
                // An array refused for its length, for the payload's size, or
                // for an item that is no socket name.
                assert!(
                    n > MAX_FDS || data.len() > MAX_LIST || e.to_string().contains("bad list"),
                    "{n} items refused: {e}"
                );
            }
        }
    }
});
