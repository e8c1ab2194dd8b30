//! Key -> `GET_LOCK` name, exactly as .NET's DistributedLock (`MySqlDistributedLock`, its
//! `GetSafeName`) maps a lock name, so that the same key is the same server lock for both.
//!
//! A key that is already a valid name (at most 64 UTF-16 code units, no character that
//! lower-casing changes) is used as it is. Any other key becomes its lower-cased beginning
//! followed by a 32-character hash: SHA-512 of the key's UTF-8 bytes, its first 160 bits in
//! base32 (`a-z2-7`), 5 bits per character taken from the least significant bits of each byte
//! first. Lock names are documented as case-insensitive, and MySQL refuses names over 64
//! characters: the hash keeps `A` and `a`, and long keys that share a beginning, apart.

use sha2::{Digest, Sha512};

/// Longest `GET_LOCK` name MySQL accepts (in characters; .NET counts UTF-16 code units).
pub const MAX_LOCK_NAME: usize = 64;
/// Characters of the hash suffix: 160 bits, 5 per base32 character.
const HASH_CHARS: usize = 160 / 5;
const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// The `GET_LOCK` name of `key` in [`Mode::NamedLock`](crate::Mode::NamedLock): the name
/// .NET's `MySqlDistributedLock` (DistributedLock.MySql) uses for a lock of that name, so a
/// service on either side, or one calling `GET_LOCK` itself (pymysql), takes the same lock.
///
/// `lock_name("orders")` is `"orders"`; `lock_name("Orders")` is `"orders"` followed by 32
/// hash characters. There is no prefix: the key is the whole name.
pub fn lock_name(key: &str) -> String {
    let valid = to_valid_name(key);
    if valid == key && utf16_len(&valid) <= MAX_LOCK_NAME {
        return valid;
    }
    let hash = hash(key.as_bytes());
    // .NET keeps `MAX_LOCK_NAME - 32` UTF-16 code units of the lower-cased key in front.
    let mut name = utf16_prefix(&valid, MAX_LOCK_NAME - HASH_CHARS);
    name.push_str(&hash);
    name
}

/// .NET's `convertToValidName`: `"__empty__"` for an empty name, else `ToLowerInvariant()`.
fn to_valid_name(key: &str) -> String {
    if key.is_empty() {
        return "__empty__".to_owned();
    }
    // Character by character (no context such as a final sigma), one character each: .NET's
    // invariant lower-casing is the simple mapping. U+0130 (İ) is the one character whose full
    // lower case is two characters; its simple lower case is `i`.
    key.chars()
        .map(|c| match c {
            '\u{130}' => 'i',
            c => {
                let mut l = c.to_lowercase();
                match (l.next(), l.next()) {
                    (Some(one), None) => one,
                    _ => c,
                }
            }
        })
        .collect()
}

fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// The first `units` UTF-16 code units of `s`, as .NET's `Substring` cuts them. A cut through
/// a surrogate pair leaves .NET a lone high surrogate, which its UTF-8 encoder (MySqlConnector
/// sending the name) writes as U+FFFD: so does this.
fn utf16_prefix(s: &str, units: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        if used >= units {
            break;
        }
        if used + c.len_utf16() > units {
            out.push('\u{FFFD}');
            break;
        }
        used += c.len_utf16();
        out.push(c);
    }
    out
}

/// .NET's `ComputeHash`: SHA-512, first 160 bits, base32 least significant bits first.
fn hash(bytes: &[u8]) -> String {
    let digest = Sha512::digest(bytes);
    let mut out = String::with_capacity(HASH_CHARS);
    let (mut buffer, mut bits, mut next) = (0u32, 0u32, 0usize);
    for _ in 0..HASH_CHARS {
        if bits < 5 {
            buffer |= u32::from(digest[next]) << bits;
            next += 1;
            bits += 8;
        }
        out.push(char::from(BASE32[(buffer & 31) as usize]));
        buffer >>= 5;
        bits -= 5;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of DistributedLock's own compatibility test (`TestGetSafeLockNameCompat` in
    /// `MySqlDistributedLockTest.cs`): the names a .NET service uses.
    #[test]
    fn names_match_distributed_lock_dotnet() {
        assert_eq!(lock_name(""), "__empty__p6ad62yppho33ytkibum5wbqhqvbcsxa");
        assert_eq!(lock_name("abc"), "abc");
        assert_eq!(lock_name("ABC"), "abczj4qr6tvn4a3kmgq4bukhowqyfrlxsb3");
        assert_eq!(lock_name("\\"), "\\");
        assert_eq!(lock_name(&"a".repeat(64)), "a".repeat(64));
        assert_eq!(lock_name(&"\\".repeat(64)), "\\".repeat(64));
        assert_eq!(
            lock_name(&"x".repeat(65)),
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxgkd2zq6c6ey6mhs45clqg7vij6ycgo43"
        );
    }

    #[test]
    fn names_are_at_most_64_characters_and_distinct_keys_stay_distinct() {
        for key in ["é".repeat(64), "é".repeat(65), "🔒".repeat(40), "K".into(), "k".into(), "a ".into()]
        {
            let n = lock_name(&key);
            assert!(utf16_len(&n) <= MAX_LOCK_NAME, "{key:?} -> {n:?}");
        }
        // 64 characters pass as they are; emoji count two UTF-16 units each, as in .NET.
        assert_eq!(lock_name(&"é".repeat(64)), "é".repeat(64));
        assert_ne!(lock_name(&"🔒".repeat(40)), "🔒".repeat(40));
        // The cut through a surrogate pair (31 emoji = 62 units > 32) lands between pairs here.
        assert!(lock_name(&"🔒".repeat(40)).starts_with(&"🔒".repeat(16)));
        assert_eq!(utf16_prefix("a🔒", 2), "a\u{FFFD}");
        assert_ne!(lock_name("K"), lock_name("k"));
        assert_eq!(lock_name("İ"), format!("i{}", hash("İ".as_bytes())));
        let long = "x".repeat(100);
        assert_ne!(lock_name(&long), lock_name(&format!("{long}y")));
    }
}
