//! Lock keys as bucket keys, and what a lock key's value says.
//!
//! A bucket key may hold only `[-/_=.A-Za-z0-9]`, and its dots separate subject tokens (an
//! empty token is refused): a lock key keeps its letters, digits, `-`, `_` and `/`, and every
//! other byte becomes `=XX` (upper-case hex), `=` and `.` included, so the encoding is
//! reversible and never makes a dot. Lock keys live under `l.`, so one watch of `l.>` hears
//! every lock and nothing else.

use std::fmt::Write as _;

use lock_core::OwnerToken;

/// The bucket key of the lock `key`.
pub(crate) fn lock_key(key: &str) -> String {
    format!("l.{}", encode_key(key))
}

/// The lock key of the bucket key `name` (`l.<encoded>`), if it is one.
pub(crate) fn lock_of(name: &str) -> Option<String> {
    decode_key(name.strip_prefix("l.")?)
}

/// `key` as a bucket-key token: see the module docs.
pub fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for &b in key.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "={b:02X}");
        }
    }
    out
}

/// The key [`encode_key`] made `token` from (`None` for a token it cannot have made).
pub(crate) fn decode_key(token: &str) -> Option<String> {
    let b = token.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'=' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What a held lock key's value says: `dlock1 <owner> <nonce> <fence|->` and, on a second
/// line, the holder's note.
///
/// The nonce is the acquisition attempt's: a cleanup deletes the key only while it holds its
/// own attempt's value, never a later attempt's of the same owner. The fence is the revision
/// of the create that granted the hold; it is written from the first renewal on (a create
/// cannot know its own revision: until then the entry's revision is the fence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Value {
    pub owner: OwnerToken,
    pub nonce: u64,
    pub fence: Option<u64>,
    pub note: Option<String>,
}

const TAG: &str = "dlock1";

impl Value {
    /// The bytes stored.
    pub fn encode(&self) -> bytes::Bytes {
        let fence = self.fence.map_or_else(|| "-".to_owned(), |f| f.to_string());
        let mut s = format!("{TAG} {} {:016x} {fence}", self.owner, self.nonce);
        if let Some(note) = &self.note {
            s.push('\n');
            s.push_str(note);
        }
        bytes::Bytes::from(s)
    }

    /// The value in `raw`, or `None` for bytes this crate did not write.
    pub fn parse(raw: &[u8]) -> Option<Value> {
        let text = std::str::from_utf8(raw).ok()?;
        let (head, note) = match text.split_once('\n') {
            Some((h, n)) => (h, Some(n.to_owned())),
            None => (text, None),
        };
        let mut parts = head.split(' ');
        if parts.next()? != TAG {
            return None;
        }
        let owner = OwnerToken::parse(parts.next()?)?;
        let nonce = u64::from_str_radix(parts.next()?, 16).ok()?;
        let fence = match parts.next()? {
            "-" => None,
            f => Some(f.parse().ok()?),
        };
        Some(Value { owner, nonce, fence, note })
    }

    /// The hold's fence, given the revision of the entry this value was read from.
    pub fn fence_at(&self, revision: u64) -> u64 {
        self.fence.unwrap_or(revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_without_dots_or_wildcards() {
        for key in ["a", "a.b", "x=y", "*", ">", "ünï cödé", "a/b-c_d", "..", " "] {
            let enc = encode_key(key);
            assert!(enc.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_/=".contains(&b)), "{enc}");
            assert_eq!(decode_key(&enc).as_deref(), Some(key));
            assert_eq!(lock_of(&lock_key(key)).as_deref(), Some(key));
        }
        assert_ne!(encode_key("a.b"), encode_key("a=2Eb"), "the escape itself is escaped");
        assert_eq!(decode_key("=Z1"), None);
        assert_eq!(lock_of("r.abc"), None);
    }

    #[test]
    fn values_round_trip() {
        let owner = OwnerToken::random();
        let v = Value { owner, nonce: 7, fence: None, note: None };
        assert_eq!(Value::parse(&v.encode()), Some(v.clone()));
        assert_eq!(v.fence_at(42), 42);
        let v = Value { fence: Some(5), note: Some("leader a\nb".into()), ..v };
        assert_eq!(Value::parse(&v.encode()), Some(v.clone()));
        assert_eq!(v.fence_at(42), 5);
        assert_eq!(Value::parse(b"something else"), None);
    }
}
