//! Label arithmetic on uncompressed wire names (already folded to lower
//! case by the caller): is a name under another, and what is left of it.

use crate::wire::name::label_starts;

/// The offset in `name` where `suffix` starts, when `name` is `suffix` or a
/// name below it (the match must start at a label boundary).
pub(crate) fn suffix_at(name: &[u8], suffix: &[u8]) -> Option<usize> {
    let at = name.len().checked_sub(suffix.len())?;
    (name.ends_with(suffix) && label_starts(name).any(|s| s == at)).then_some(at)
}

/// One label of a name: where its length byte is, and its letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label<'a> {
    pub at: usize,
    pub text: &'a [u8],
}

/// The labels of `name` left of `suffix`, left to right (none when `name`
/// is not below `suffix`).
pub(crate) fn labels_left_of<'a>(name: &'a [u8], suffix: &[u8]) -> Vec<Label<'a>> {
    let Some(end) = suffix_at(name, suffix) else {
        return Vec::new();
    };
    label_starts(name)
        .take_while(|&at| at < end)
        .map(|at| Label {
            at,
            text: &name[at + 1..at + 1 + name[at] as usize],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::name::from_text;

    #[test]
    fn suffixes_match_on_label_boundaries() {
        let w = |t: &str| from_text(t).unwrap();
        assert_eq!(
            suffix_at(&w("a.cluster.local"), &w("cluster.local")),
            Some(2)
        );
        assert_eq!(suffix_at(&w("cluster.local"), &w("cluster.local")), Some(0));
        assert_eq!(suffix_at(&w("xcluster.local"), &w("cluster.local")), None);
        assert_eq!(suffix_at(&w("local"), &w("cluster.local")), None);
        assert_eq!(suffix_at(&w("a.b"), &w(".")), Some(4));
        // "\x01x\x03abc" ends with "\x03abc\x00" only inside a label here
        let tricky = b"\x05a\x03abc\x00";
        assert_eq!(suffix_at(tricky, b"\x03abc\x00"), None);
    }

    #[test]
    fn labels_left_of_a_suffix() {
        let name = from_text("api.example.svc.cluster.local").unwrap();
        let labels = labels_left_of(&name, &from_text("cluster.local").unwrap());
        let texts: Vec<&[u8]> = labels.iter().map(|l| l.text).collect();
        assert_eq!(texts, [&b"api"[..], b"example", b"svc"]);
        assert_eq!(labels[1].at, 4);
        assert!(labels_left_of(&name, &from_text("other").unwrap()).is_empty());
        assert_eq!(labels_left_of(&name, b"\x00").len(), 5);
    }
}
