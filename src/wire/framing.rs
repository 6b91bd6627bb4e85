//! DNS over TCP framing (RFC 1035 4.2.2): each message behind a 2-byte length.

/// Cuts one whole length-prefixed message off the front of `pending`.
pub fn take_frame(pending: &mut Vec<u8>) -> Option<Vec<u8>> {
    if pending.len() < 2 {
        return None;
    }
    let len = u16::from_be_bytes([pending[0], pending[1]]) as usize;
    if pending.len() < 2 + len {
        return None;
    }
    let frame = pending[2..2 + len].to_vec();
    pending.drain(..2 + len);
    Some(frame)
}

/// `msg` behind its length, ready to write; false (and `out` empty) for a
/// message longer than two bytes can say, which is not sent at all rather
/// than sent with a wrapped length.
pub fn frame(msg: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let Ok(len) = u16::try_from(msg.len()) else {
        return false;
    };
    out.extend(len.to_be_bytes());
    out.extend_from_slice(msg);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_whole() {
        let mut p = vec![0, 3, 1, 2, 3, 0, 2, 9];
        assert_eq!(take_frame(&mut p), Some(vec![1, 2, 3]));
        assert_eq!(take_frame(&mut p), None);
        p.push(8);
        assert_eq!(take_frame(&mut p), Some(vec![9, 8]));
        assert!(p.is_empty());
        let mut out = Vec::new();
        assert!(frame(&[7, 7], &mut out));
        assert_eq!(out, vec![0, 2, 7, 7]);
        assert!(!frame(&vec![0; 65_536], &mut out));
        assert!(out.is_empty());
    }
}
