//! What a backend's holds do: the flags the core and the suites branch on.

#[cfg(doc)]
use super::{AcquireRequest, Grant, LockBackend, Side};
#[cfg(doc)]
use crate::FencingToken;

/// How a backend's holds behave. Cases and callers branch on this, never on the backend's name.
///
/// Only what changes the meaning of the required calls is a flag here. What a store can do
/// beyond them (notifications, a wait queue, notes, records, raising the fence, listing and
/// evicting) is a capability the backend hands out ([`LockBackend::notify`] and the like), so
/// that a flag cannot disagree with a method and a wrapper has nothing to forget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capability {
    /// `renew` extends the lease (compare-and-extend), or confirms the session for session-bound
    /// backends.
    pub renew: bool,
    /// Grants carry a strictly increasing [`FencingToken`].
    pub fencing: bool,
    /// `try_acquire` honours [`AcquireRequest::wait_until`] by waiting in the server's own queue.
    pub native_wait: bool,
    /// A second acquisition by the same owner token nests instead of failing.
    pub reentrant: bool,
    /// Waiters are served in arrival order.
    pub fair: bool,
    /// The lease is a session or connection: it does not expire by time while the session
    /// lives, and ends when it dies.
    pub session_bound: bool,
    /// Exclusion and fencing survive the loss of any one server: the store commits every
    /// grant to a majority of replicas before answering (ZooKeeper), so a failover neither
    /// grants a key twice nor repeats a fencing token. `false` for a single server, for a
    /// primary with asynchronously replicated replicas (Redis, MariaDB: a promoted replica can
    /// miss the latest grants) and for a Redlock quorum (a master restarted without a synced
    /// append-only file forgets its grants). Each backend's README states the details.
    pub failover_safe: bool,
    /// A grant's [`Grant::lease`] may be shorter than asked because the store granted the hold
    /// in advance (Redis hands a freed lock to the next waiter for a claim window): the core
    /// tops it up to the lease asked for. Without it, a shorter lease is simply what the hold
    /// has (a quorum's validity after the time its members took).
    pub early_grants: bool,
    /// `try_acquire` honours [`Side::Read`] in [`AcquireRequest::side`]: a key is held by any number of shared
    /// holds or by one exclusive hold, and an exclusive request that waits keeps new shared
    /// holds out until it is granted or gives up (writers are not starved). Release, renewal
    /// and loss work per owner as for exclusive holds; notes and `raise_fence` are for
    /// exclusive holds only. The read-write lock is built on it where it is set.
    pub shared: bool,
    /// `try_acquire` honours [`Side::Permit`]: one key holds up to `of` shared holds at once,
    /// each granted with its slot and a fence of its own, and every release wakes a waiter.
    /// The semaphore is built on it where it is set (one acquisition per permit), else on one
    /// mutex per permit.
    pub permits: bool,
    /// `try_acquire` honours [`Side::Upgrade`]: the read-write lock's upgradeable read.
    pub upgrade: bool,
    /// An attempt writes to the store even when it is refused (a queue store creates its
    /// entry, then deletes it): looking at a key ([`LockBackend::inspect`]) costs less than
    /// attempting it while it is held. A semaphore of slot keys then inspects the slots
    /// before attempting them; elsewhere it attempts them straight away, which costs one round
    /// trip per slot where an inspection costs one as well (PostgreSQL's is a `pg_locks` scan).
    pub refusal_writes: bool,
}

impl Capability {
    /// No capabilities; set the fields you have (the struct is non-exhaustive outside this crate).
    pub const NONE: Capability = Capability {
        renew: false,
        fencing: false,
        native_wait: false,
        reentrant: false,
        fair: false,
        session_bound: false,
        failover_safe: false,
        early_grants: false,
        shared: false,
        permits: false,
        upgrade: false,
        refusal_writes: false,
    };
}
