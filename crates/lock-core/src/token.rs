//! Owner and fencing tokens.

use std::fmt;

use uuid::Uuid;

/// Who holds a lock: 128 random bits per acquisition (never a thread or process id).
///
/// Reentrant backends accept a nested acquisition that presents the same owner token.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerToken(Uuid);

impl OwnerToken {
    /// A fresh random token.
    pub fn random() -> Self {
        OwnerToken(Uuid::new_v4())
    }

    /// Rebuild a token from its 128 bits (for backends that store it).
    pub fn from_u128(v: u128) -> Self {
        OwnerToken(Uuid::from_u128(v))
    }

    /// The token's 128 bits.
    pub fn as_u128(&self) -> u128 {
        self.0.as_u128()
    }

    /// The 32-hex-digit form [`Display`](fmt::Display) writes, in `buf`: no allocation, for a
    /// backend that sends the token with every request.
    pub fn encode<'b>(&self, buf: &'b mut [u8; 32]) -> &'b str {
        self.0.simple().encode_lower(buf)
    }

    /// Parse the 32-hex-digit form written by [`Display`](fmt::Display).
    pub fn parse(s: &str) -> Option<Self> {
        Uuid::try_parse(s).ok().map(OwnerToken)
    }
}

impl fmt::Display for OwnerToken {
    /// 32 lowercase hex digits: what backends store.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.simple(), f)
    }
}

impl fmt::Debug for OwnerToken {
    // Short form: enough to correlate logs, not enough to forge a release from a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.simple().to_string();
        write!(f, "OwnerToken({}…)", &s[..8])
    }
}

/// A number that strictly increases with every acquisition of one key, across clients,
/// expiries and crashes. Pass it to the protected resource so it can refuse stale writers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_token_round_trips_and_hides_in_debug() {
        let t = OwnerToken::random();
        let s = t.to_string();
        assert_eq!(s.len(), 32);
        assert_eq!(OwnerToken::parse(&s), Some(t));
        assert_eq!(OwnerToken::from_u128(t.as_u128()), t);
        assert!(!format!("{t:?}").contains(&s));
        assert_ne!(OwnerToken::random(), t);
    }
}
