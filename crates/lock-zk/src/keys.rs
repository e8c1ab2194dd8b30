//! Lock keys as ZooKeeper node names.

/// Encode a lock key as one ZooKeeper node name, exactly and without aliasing.
///
/// ASCII letters, digits, `-`, `_` and `~` are kept; every other byte of the UTF-8 key
/// (including `%`, `/` and `.`) becomes `%XX` with upper-case hex. The mapping is injective
/// (`%` itself is escaped), never yields `/`, `.`, `..` or an empty name, and never yields
/// the characters ZooKeeper refuses in node names (controls, surrogates, `\u{FFF0}`..).
pub fn encode_key(key: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode_key;

    #[test]
    fn odd_keys_become_distinct_single_names() {
        let keys = ["a", "a/b", "a%2Fb", ".", "..", "%", "ключ-🔒", "with space", "a.b", "a%2Eb", "A"];
        let mut seen = std::collections::HashSet::new();
        for k in keys {
            let e = encode_key(k);
            assert!(!e.contains('/') && e != "." && e != ".." && !e.is_empty(), "{k:?} -> {e:?}");
            assert!(e.chars().all(|c| c.is_ascii_graphic()), "{k:?} -> {e:?}");
            assert!(seen.insert(e), "{k:?} aliased another key");
        }
        assert_eq!(encode_key("a/b.c%"), "a%2Fb%2Ec%25");
        assert_eq!(encode_key("ü"), "%C3%BC");
    }
}
