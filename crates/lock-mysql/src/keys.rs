//! Key -> `GET_LOCK` name, as .NET's DistributedLock (`MySqlDistributedLock`, its
//! `GetSafeName`) maps an ASCII lock name, so that the same ASCII key is the same server lock
//! for both.
//!
//! An ASCII key that is already a valid name (no upper-case letter, at most 64 characters) is
//! used as it is. Any other key becomes its beginning, ASCII letters lower-cased, followed by a
//! 32-character hash: SHA-512 of the key's UTF-8 bytes, its first 160 bits in base32 (`a-z2-7`),
//! 5 bits per character taken from the least significant bits of each byte first. Lock names
//! are documented as case-insensitive, and MySQL refuses names over 64 characters: the hash
//! keeps `A` and `a`, and long keys that share a beginning, apart.
//!
//! A key with any non-ASCII character is always hashed, and only ASCII letters are ever
//! lower-cased: the name must not depend on a Unicode case table, which differs between Rust
//! releases, .NET versions and the server's collations, or two builds could take one key as
//! two locks. (.NET lower-cases every letter and hashes only keys that change, so it names a
//! non-ASCII key differently.)

use sha2::{Digest, Sha512};

/// Longest `GET_LOCK` name MySQL accepts (in characters; .NET counts UTF-16 code units).
pub const MAX_LOCK_NAME: usize = 64;
/// Characters of the hash suffix: 160 bits, 5 per base32 character.
const HASH_CHARS: usize = 160 / 5;
const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// The `GET_LOCK` name of `key` in [`Mode::NamedLock`](crate::Mode::NamedLock): for an ASCII
/// key, the name .NET's `MySqlDistributedLock` (DistributedLock.MySql) uses for a lock of that
/// name, so a service on either side, or one calling `GET_LOCK` itself (pymysql), takes the
/// same lock. A key with a non-ASCII character is always hashed (see the module docs).
///
/// `lock_name("orders")` is `"orders"`; `lock_name("Orders")` is `"orders"` followed by 32
/// hash characters; `lock_name("é")` is `"é"` followed by 32 hash characters. There is no
/// prefix: the key is the whole name.
pub fn lock_name(key: &str) -> String {
    let as_is = !key.is_empty()
        && key.is_ascii()
        && !key.bytes().any(|b| b.is_ascii_uppercase())
        && key.len() <= MAX_LOCK_NAME;
    if as_is {
        return key.to_owned();
    }
    // .NET's `convertToValidName` for an empty name.
    let valid = if key.is_empty() { "__empty__".to_owned() } else { key.to_ascii_lowercase() };
    // .NET keeps `MAX_LOCK_NAME - 32` UTF-16 code units of the lower-cased key in front.
    let mut name = utf16_prefix(&valid, MAX_LOCK_NAME - HASH_CHARS);
    name.push_str(&hash(key.as_bytes()));
    name
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

    fn utf16_len(s: &str) -> usize {
        s.chars().map(char::len_utf16).sum()
    }

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

    /// A key with any non-ASCII character is hashed, its ASCII letters lower-cased and every
    /// other character kept: the name never depends on a Unicode case table (Rust's, .NET's or
    /// the server's), so every build and language maps the key to one name. Computed
    /// independently (Python, `tests/interop/get_lock_peer.py`'s `lock_name`).
    #[test]
    fn non_ascii_keys_are_hashed_whatever_the_case_tables() {
        let vectors = [
            ("é", "é6ukendogshrcv66j4bhe3cyqcvgiub3v"),
            ("É", "É2sncthfelmh5dib3jxg5j2k4tqhrrrja"),
            ("İ", "İ6z4d3ofbpc6pfd4wnff73o4ymbhxraff"),
            ("Straße/Ärger", "straße/Ärgerggavh74oaz25aracufqtip76uu7xp7aa"),
            // KELVIN SIGN, which Unicode lower-cases to an ASCII `k`.
            ("\u{212a}", "\u{212a}cpjdqhizfieklkrxkx3orlwzq7o3jbke"),
            ("ǅ", "ǅmvf3nhs2zt5kc5a6skax3h3acyunlave"),
        ];
        for (key, name) in vectors {
            assert_eq!(lock_name(key), name, "{key:?}");
        }
        let lock = "🔒".repeat(40);
        assert_eq!(lock_name(&lock), format!("{}qsko2cdyq5va2xivr7kjfqb5buduvxfx", "🔒".repeat(16)));
    }

    #[test]
    fn names_are_at_most_64_characters_and_distinct_keys_stay_distinct() {
        for key in ["é".repeat(64), "é".repeat(65), "🔒".repeat(40), "K".into(), "k".into(), "a ".into()]
        {
            let n = lock_name(&key);
            assert!(utf16_len(&n) <= MAX_LOCK_NAME, "{key:?} -> {n:?}");
        }
        // Non-ASCII keys are hashed; emoji count two UTF-16 units each in the prefix, as in .NET.
        assert_ne!(lock_name(&"é".repeat(64)), "é".repeat(64));
        assert_ne!(lock_name(&"🔒".repeat(40)), "🔒".repeat(40));
        // The cut through a surrogate pair (31 emoji = 62 units > 32) lands between pairs here.
        assert!(lock_name(&"🔒".repeat(40)).starts_with(&"🔒".repeat(16)));
        assert_eq!(utf16_prefix("a🔒", 2), "a\u{FFFD}");
        assert_ne!(lock_name("K"), lock_name("k"));
        let long = "x".repeat(100);
        assert_ne!(lock_name(&long), lock_name(&format!("{long}y")));
    }
}
