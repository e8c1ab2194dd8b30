//! One acquisition attempt as a backend sees it, and what it answers.

use std::time::Duration;

use tokio::time::Instant;

#[cfg(doc)]
use super::LockBackend;
use crate::{FencingToken, LeaseSignal, OwnerToken};

/// One acquisition attempt.
#[derive(Debug)]
pub struct AcquireRequest<'a> {
    /// The validated key.
    pub key: &'a str,
    /// Who acquires; a reentrant backend nests when this owner already holds the key.
    pub owner: OwnerToken,
    /// Requested lease.
    pub lease: Duration,
    /// `None`: one attempt. `Some(t)`: a `native_wait` backend may wait in its own queue until
    /// `t` (then answers [`Attempt::Held`]); a backend with a wait queue ([`LockBackend::queue`](super::LockBackend::queue)) joins or
    /// keeps its place in the server's queue of waiters and answers at once; other backends ignore it.
    pub wait_until: Option<Instant>,
    /// The holder's lost-lock signal; a backend that learns of a loss first (session expiry,
    /// connection death) calls [`LeaseSignal::mark_lost`] on it.
    pub signal: &'a LeaseSignal,
    /// The kind of hold asked for: [`Side::Read`] only ever towards a backend with
    /// [`Capability::shared`](super::Capability::shared), [`Side::Permit`] only with [`Capability::permits`](super::Capability::permits).
    pub side: Side,
}

/// The kind of hold an acquisition asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Side {
    /// An exclusive hold: a mutex, a semaphore's permit, a leader's term.
    #[default]
    Exclusive,
    /// The read side of a read-write lock: any number of shared holds of the key at once, or
    /// one exclusive hold. The grant's fence is the key's latest exclusive grant's, or, where
    /// every hold draws one anyway (ZooKeeper's node ids, etcd's revisions), the reader's own:
    /// either way no larger than the next writer's.
    Read,
    /// The write side of a read-write lock: exclusive, like [`Side::Exclusive`]. It is told
    /// apart for stores whose read-write layout names writers differently from mutex holders
    /// (Curator's `__WRIT__` nodes on ZooKeeper), so that other clients of that layout see them.
    Write,
    /// One of `of` permits of a semaphore kept in one key: a shared hold of which at most `of`
    /// exist at once. The grant names its slot ([`Grant::slot`]) and draws a fence of its own
    /// from the key's counter (increasing across the key's permits; nothing is fenced across
    /// them, since they do not exclude each other). No exclusive hold ever takes such a key.
    Permit {
        /// The number of permits.
        of: u32,
    },
    /// The write side, asked by the holder of the read hold `reader` of the same key (an
    /// upgradeable reader upgrading): exclusive, except that this one read hold does not stand
    /// in its way and stays (the upgraded holder releases both). A waiting upgrade keeps new
    /// readers out as a waiting writer does, and goes before writers queued earlier, which
    /// wait for its read hold anyway. Only with [`Capability::upgrade`](super::Capability::upgrade).
    Upgrade {
        /// The owner of the read hold being upgraded.
        reader: OwnerToken,
    },
}

impl Side {
    /// A shared hold: [`Side::Read`], or a [`Side::Permit`] (shared up to its count).
    pub fn is_shared(self) -> bool {
        matches!(self, Side::Read | Side::Permit { .. })
    }

    /// The permit count of a [`Side::Permit`].
    pub fn permits(self) -> Option<u32> {
        match self {
            Side::Permit { of } => Some(of),
            _ => None,
        }
    }
}

/// Outcome of [`LockBackend::try_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempt {
    /// The caller now holds the lock.
    Acquired(Grant),
    /// Someone else holds it.
    Held {
        /// The holder's remaining lease if the backend knows it: a waiter never needs to
        /// sleep longer than this.
        retry_after: Option<Duration>,
    },
}

/// What the backend granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Fencing token of this acquisition (for a reentrant nesting: the outer acquisition's).
    pub fence: FencingToken,
    /// The lease the backend applied, counted from the start of the `try_acquire` call (the
    /// core's local deadline is call start + this, which can only be early, never late). A
    /// backend that waited in a server queue before the grant adds the time it waited.
    /// `None` for session-bound locks, which have no time-based expiry.
    ///
    /// With [`Capability::early_grants`](super::Capability::early_grants) it may be shorter than the lease asked for: a hold
    /// granted in advance (Redis hands a
    /// freed lock to the next waiter with a short claim window, and the waiter takes it without
    /// a round trip). The core then extends it to the lease asked for with a renewal: soon,
    /// from the watchdog, or before returning the guard if the drift margin would eat half of it
    /// or leave under 1 s.
    pub lease: Option<Duration>,
    /// The slot of a [`Side::Permit`] grant (`0..of`, the lowest free one when granted), so
    /// that each of `of` holders can tell its permit apart (`DLOCK_PERMIT_SLOT`). `None` for
    /// every other side.
    pub slot: Option<u32>,
}

/// One lease to renew.
#[derive(Debug, Clone, Copy)]
pub struct RenewItem<'a> {
    /// The key.
    pub key: &'a str,
    /// The owner that must still hold it.
    pub owner: OwnerToken,
    /// New lease from now.
    pub lease: Duration,
}
