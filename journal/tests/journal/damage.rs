//! Test damage shared by the journal's tests and `haptic-journalctl`'s (which include this file
//! with `#[path]`, having no dependency on the journal's test crate).

/// Flips one byte in the middle of every occurrence of `marker` in the file.
#[allow(clippy::unwrap_used, dead_code)]
pub fn flip_marker(path: &std::path::Path, marker: &[u8]) -> usize {
    let mut bytes = std::fs::read(path).unwrap();
    let mut hits = 0;
    let mut i = 0;
    while i + marker.len() <= bytes.len() {
        if &bytes[i..i + marker.len()] == marker {
            bytes[i + marker.len() / 2] ^= 0x01;
            hits += 1;
            i += marker.len();
        } else {
            i += 1;
        }
    }
    std::fs::write(path, bytes).unwrap();
    hits
}
