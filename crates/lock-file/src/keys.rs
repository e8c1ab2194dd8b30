//! The files of a key: `<name>` (the one the lock is taken on), `<name>.fence` (the
//! counter) and `<name>.note`, all in the lock directory.

use sha2::{Digest, Sha256};

/// Longest file-name stem spelled out from the key; longer keys end in a digest instead, so
/// every name stays under the usual 255-byte limit of a file name.
const MAX_SPELLED: usize = 150;

/// The file-name stem of `key`: the key with every byte outside `[A-Za-z0-9_-]` written `%XX`
/// (so `/` never makes a path and `.` never hides a file), or, when that is long, its first
/// part and a SHA-256 digest of the whole key.
pub(crate) fn stem(key: &str) -> String {
    let mut s = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    if s.len() <= MAX_SPELLED {
        return s;
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    let mut cut = MAX_SPELLED - hex.len() - 1;
    // never end the spelled part inside a `%XX`
    while s.as_bytes()[..cut].iter().rev().take(2).any(|&b| b == b'%') {
        cut -= 1;
    }
    format!("{}~{hex}", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::stem;

    #[test]
    fn keys_become_flat_file_names() {
        assert_eq!(stem("orders-42"), "orders-42");
        assert_eq!(stem("a/b.c"), "a%2Fb%2Ec");
        assert_eq!(stem("ü"), "%C3%BC");
        assert_ne!(stem("a/b"), stem("a%2Fb"), "a '%' is encoded too");
    }

    #[test]
    fn long_keys_end_in_a_digest() {
        let long = "k".repeat(255);
        let other = format!("{}x", "k".repeat(254));
        let (a, b) = (stem(&long), stem(&other));
        assert!(a.len() <= 150 && b.len() <= 150, "{a}");
        assert_ne!(a, b);
        assert_eq!(a, stem(&long), "stable");
        let slashes = "/".repeat(200);
        assert!(!stem(&slashes).ends_with('%'));
    }
}
