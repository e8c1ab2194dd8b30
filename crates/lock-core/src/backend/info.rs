//! What a backend can tell about a lock without taking it: `inspect`'s answer.

use std::time::Duration;

use crate::FencingToken;
#[cfg(doc)]
use crate::backend::{Capability, Side};

/// What a backend can tell about a lock without taking it (`dlock status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Someone holds the key now.
    pub held: bool,
    /// The holder's remaining lease; `None` when free or session-bound.
    pub remaining: Option<Duration>,
    /// The holder's fencing token, where the backend stores it next to the hold.
    pub fence: Option<FencingToken>,
    /// How many clients wait in the server's queue, where there is one.
    pub waiters: Option<usize>,
    /// The holder as the backend records it, shortened so it identifies without being a
    /// capability: the first 8 hex digits of an owner token (the whole token would let anyone
    /// release the lock), or a ZooKeeper node name.
    pub owner: Option<String>,
    /// How many shared holds (readers) hold the key, on a backend with
    /// [`Capability::shared`]; `held` is then true and `owner` and `remaining` are empty.
    pub readers: Option<usize>,
    /// The held permits of a semaphore kept by the store ([`Side::Permit`]), by slot; empty
    /// otherwise.
    pub permits: Vec<PermitInfo>,
}

/// One held permit of a semaphore kept by the store ([`LockInfo::permits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitInfo {
    /// The permit's slot.
    pub slot: u32,
    /// Its fencing token.
    pub fence: FencingToken,
    /// Its remaining lease.
    pub remaining: Option<Duration>,
    /// Its holder, shortened as [`LockInfo::owner`].
    pub owner: String,
    /// The identity its holder noted on it (`Notes::set_note` on the pool key), if any.
    pub holder: Option<String>,
}

impl PermitInfo {
    /// A permit of `slot` (the struct is non-exhaustive outside this crate).
    pub fn new(slot: u32, fence: FencingToken, remaining: Option<Duration>, owner: String) -> Self {
        PermitInfo { slot, fence, remaining, owner, holder: None }
    }

    /// The same permit with the identity its holder noted.
    pub fn with_holder(mut self, holder: Option<String>) -> Self {
        self.holder = holder;
        self
    }
}

impl LockInfo {
    /// The first 8 characters of an owner token and an ellipsis: enough to correlate with logs
    /// (`OwnerToken`'s `Debug` shows the same), not enough to release the lock.
    pub fn short_owner(token: &str) -> String {
        format!("{}…", token.chars().take(8).collect::<String>())
    }

    /// A free key.
    pub fn free() -> Self {
        LockInfo::default()
    }

    /// A held key; set the optional fields you know.
    pub fn held() -> Self {
        LockInfo { held: true, ..LockInfo::default() }
    }
}
