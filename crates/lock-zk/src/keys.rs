//! Lock keys as ZooKeeper node names, and where a semaphore keeps its nodes.

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

// Where a semaphore keeps its nodes under its key's directory, as Curator's
// `InterProcessSemaphoreV2` does: a gate (a mutex every permit request queues on) and the
// leases. The queue store and the permits both find their nodes here.

/// The gate's directory under a semaphore's: Curator's `InterProcessSemaphoreV2` mutex.
pub(crate) const GATE_SUFFIX: &str = "/locks";
/// The leases' directory under a semaphore's.
const LEASES: &str = "leases";

/// The gate's directory of the semaphore in `dir`.
pub(crate) fn gate_dir(dir: &str) -> String {
    format!("{dir}{GATE_SUFFIX}")
}

/// The leases' directory of the semaphore in `dir`.
pub(crate) fn leases_dir(dir: &str) -> String {
    format!("{dir}/{LEASES}")
}

/// Whether `children` of a lock directory are a semaphore's (Curator's or ours).
pub(crate) fn is_semaphore(children: &[String]) -> bool {
    children.iter().any(|c| c == LEASES)
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
