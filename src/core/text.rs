//! Text shaping shared by every message the controller writes to Kubernetes.

/// `s` cut to at most `max_bytes` bytes on a character boundary, ending in `...` when cut (the
/// cut text plus the ellipsis is still at most `max_bytes`); unchanged when it fits.
/// Conditions' messages and Events' notes are kept to 1 KiB this way (the API server bounds a
/// note at 1 KiB).
///
/// # Panics
/// When `s` is too long and `max_bytes` is under 3 (no room for the ellipsis).
#[must_use]
pub fn truncate_with_ellipsis(mut s: String, max_bytes: usize) -> String {
    if s.len() > max_bytes {
        let mut end = max_bytes - 3;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::truncate_with_ellipsis;

    #[test]
    fn a_cut_ends_on_a_character_boundary_with_an_ellipsis_within_the_bound() {
        assert_eq!(truncate_with_ellipsis("short".into(), 10), "short");
        assert_eq!(
            truncate_with_ellipsis("0123456789".into(), 10),
            "0123456789"
        );
        assert_eq!(
            truncate_with_ellipsis("0123456789a".into(), 10),
            "0123456..."
        );
        // "é" is two bytes: the cut at 4 would split it, so it moves back to 3.
        let cut = truncate_with_ellipsis("abcé-tail".into(), 7);
        assert_eq!(cut, "abc...");
        assert!(cut.len() <= 7);
    }
}
