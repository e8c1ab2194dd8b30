//! Store names back to lock keys: the stores that percent-encode a key into a node or key name
//! (ZooKeeper, etcd) decode it with [`percent_decode`] when they list their locks.

/// The key a percent-encoded name stands for: every `%XX` (hex, either case) is the byte `XX`,
/// every other character itself. `None` for a malformed escape or bytes that are not UTF-8 (a
/// name no key of ours encodes to).
pub fn percent_decode(name: &str) -> Option<String> {
    let mut out = Vec::with_capacity(name.len());
    let mut bytes = name.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            let hex = std::str::from_utf8(&hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn escapes_decode_and_malformed_names_do_not() {
        assert_eq!(percent_decode("a%2Fb%2Ec%25").as_deref(), Some("a/b.c%"));
        assert_eq!(percent_decode("%C3%BC-ok").as_deref(), Some("ü-ok"));
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
        assert_eq!(percent_decode("ключ%2F").as_deref(), Some("ключ/"));
        for bad in ["%", "%2", "%zz", "%FF"] {
            assert_eq!(percent_decode(bad), None, "{bad:?}");
        }
    }
}
