//! The optional capabilities of a store, each a trait the backend hands out through its
//! [`LockBackend`] accessor, and the calls on `dyn LockBackend` that reach them (answering
//! [`LockError::Unsupported`](crate::LockError::Unsupported) where the store has none).

use async_trait::async_trait;

use super::{LockBackend, Record, RecordOp, Subscription, unsupported};
use crate::{FencingToken, OwnerToken, Result};

/// Longest note accepted by [`Notes::set_note`], in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// Release notifications ([`LockBackend::notify`]): a waiter sleeps until a release of its key
/// instead of polling.
#[async_trait]
pub trait Notify: Send + Sync {
    /// Subscribe to release notifications for `key`, before an acquisition attempt, so a
    /// release between the attempt and the wait is not missed. `None` when this key has no
    /// notifications after all (the core then polls with backoff).
    ///
    /// # Errors
    /// Backend failures.
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>>;

    /// Whether this client hears releases of `key` already (a subscription of an earlier
    /// waiter is still live on the server): [`subscribe`](Self::subscribe) then answers at once,
    /// so the core subscribes before a waiting attempt instead of after it, and a refused
    /// attempt needs no second one to cover a release that ran before the subscription.
    fn listening(&self, key: &str) -> bool {
        let _ = key;
        false
    }
}

/// A server-side queue of waiters ([`LockBackend::queue`]): waiters keep a place between
/// attempts (a fair queue with heartbeats). The core then sends every attempt of one
/// acquisition with [`AcquireRequest::wait_until`](super::AcquireRequest::wait_until) set and
/// the same owner, sleeps between attempts on the subscription or the `retry_after` hint, and
/// calls [`leave_queue`](Self::leave_queue) when the acquisition ends without a grant
/// (deadline, error, or its future dropped).
#[async_trait]
pub trait WaitQueue: Send + Sync {
    /// The acquisition by `owner` that sent attempts with `wait_until` ended without a grant:
    /// leave the server's queue of waiters for `key`. Never releases a hold.
    ///
    /// # Errors
    /// Backend failures (the waiter's place then expires by its own timeout).
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()>;
}

/// Notes on a hold ([`LockBackend::notes`]): a holder attaches a short public note (a leader's
/// identity) that anyone can read while the hold lasts.
#[async_trait]
pub trait Notes: Send + Sync {
    /// Attach `note` to `owner`'s current hold of `key`, replacing any earlier note; anyone can
    /// read it with [`note`](Self::note) while that hold lasts. The note is public: never put a
    /// secret in it. Validated by the core (at most [`MAX_NOTE_BYTES`], no control characters)
    /// before it reaches the backend.
    ///
    /// A permit of a semaphore kept by the store ([`Side::Permit`](super::Side::Permit) on the
    /// pool key) is its holder's hold: a backend with
    /// [`Capability::permits`](super::Capability::permits) stores the note with that permit and
    /// shows it in [`PermitInfo::holder`](super::PermitInfo::holder). The core never notes a
    /// reader ([`Side::Read`](super::Side::Read)): readers are many, so their holds take no
    /// note.
    ///
    /// # Behavior
    /// `Ok(true)` when `owner` held `key` and the note is stored with that hold; `Ok(false)`
    /// when it did not hold it (nothing stored). A note never outlives its hold as far as
    /// [`note`](Self::note) can tell: a later holder's readers see its note or none, never an
    /// earlier holder's.
    ///
    /// # Errors
    /// Backend failures.
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool>;

    /// The note the current holder of `key` attached with [`set_note`](Self::set_note);
    /// `None` when the key is free or its holder attached none.
    ///
    /// # Errors
    /// Backend failures.
    async fn note(&self, key: &str) -> Result<Option<String>>;
}

/// Raising the fence counter ([`LockBackend::fences`]).
#[async_trait]
pub trait RaiseFence: Send + Sync {
    /// Raise `key`'s fence counter to at least `floor`, so that the next grant's fencing token
    /// is greater than `floor` (a counter already at or above it is left alone). Only a holder
    /// calls this, while holding: a quorum writes the token it hands out back to the majority
    /// it locked, so any later majority, which shares a member with it, draws a larger one.
    ///
    /// # Behavior
    /// `Ok(true)` when `owner` still held `key` and the counter is now at least `floor`;
    /// `Ok(false)` when it did not hold it (nothing changed).
    ///
    /// # Errors
    /// Backend failures.
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool>;
}

/// Records ([`LockBackend::records`]): a number and a set of marks kept under a key outside any
/// lock (a semaphore's stored permit count, a count-down latch).
#[async_trait]
pub trait Records: Send + Sync {
    /// Apply `op` to the record under `key` and answer the record as stored afterwards.
    /// Records live apart from locks of the same key and outlive every lease and session, until
    /// deleted. Every operation is idempotent when sent twice.
    ///
    /// # Errors
    /// Backend failures.
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record>;
}

/// An operator's calls ([`LockBackend::admin`]): what `dlock list` and `dlock unlock` use.
#[async_trait]
pub trait Admin: Send + Sync {
    /// Keys whose names start with `prefix` that the store has a lock under now, at most
    /// `limit` of them, in no particular order: what `dlock list` shows after inspecting each
    /// (a key listed may be free by then, or free already where the store keeps a lock's
    /// directory after its release). A composite primitive's parts show under their own keys.
    ///
    /// # Errors
    /// [`LockError::Unsupported`](crate::LockError::Unsupported) where the store can take a
    /// hold from its holder but not enumerate its locks; backend failures.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>>;

    /// Take `key` away from its holder, an operator's force-unlock: the hold whose fence is
    /// `fence` (what [`inspect`](LockBackend::inspect) showed) is deleted on the server, its
    /// waiters are woken as by a release, the evicted holder's next renewal is refused (its
    /// lost signal fires) and every later grant draws a larger fence. A hold with another fence
    /// (the lock was released, or passed on, since it was inspected) is left alone, so a
    /// force-unlock never evicts a holder nobody looked at; a second copy of the request does
    /// nothing.
    ///
    /// # Behavior
    /// `Ok(true)` when that hold was evicted, `Ok(false)` when `key` is not held with `fence`.
    ///
    /// # Errors
    /// Permission errors where the server refuses; backend failures.
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool>;
}

/// Each capability's calls on any backend: the backend's own where it hands the capability
/// out, else [`LockError::Unsupported`](crate::LockError::Unsupported) (or what a store without
/// it answers: no subscription, nothing to leave, nobody listening).
impl dyn LockBackend {
    /// [`Notify::subscribe`], or `None` without notifications.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        match self.notify() {
            Some(n) => n.subscribe(key).await,
            None => Ok(None),
        }
    }

    /// [`Notify::listening`], or `false` without notifications.
    pub fn listening(&self, key: &str) -> bool {
        self.notify().is_some_and(|n| n.listening(key))
    }

    /// [`WaitQueue::leave_queue`], or nothing to do without a wait queue.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        match self.queue() {
            Some(q) => q.leave_queue(key, owner).await,
            None => Ok(()),
        }
    }

    /// [`Notes::set_note`].
    ///
    /// # Errors
    /// `Unsupported` without notes; backend failures.
    pub async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        self.notes()
            .ok_or_else(|| unsupported(self.name(), "notes on a hold"))?
            .set_note(key, owner, note)
            .await
    }

    /// [`Notes::note`].
    ///
    /// # Errors
    /// `Unsupported` without notes; backend failures.
    pub async fn note(&self, key: &str) -> Result<Option<String>> {
        self.notes().ok_or_else(|| unsupported(self.name(), "notes on a hold"))?.note(key).await
    }

    /// [`RaiseFence::raise_fence`].
    ///
    /// # Errors
    /// `Unsupported` where the fence counter cannot be raised; backend failures.
    pub async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        let fences = self.fences().ok_or_else(|| unsupported(self.name(), "raising the fence counter"))?;
        fences.raise_fence(key, owner, floor).await
    }

    /// [`Records::record`].
    ///
    /// # Errors
    /// `Unsupported` without records; backend failures.
    pub async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let records =
            self.records().ok_or_else(|| unsupported(self.name(), "records (stored counts, latches)"))?;
        records.record(key, op).await
    }

    /// [`Admin::list`].
    ///
    /// # Errors
    /// `Unsupported` where the store cannot enumerate its locks; backend failures.
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        self.admin()
            .ok_or_else(|| unsupported(self.name(), "listing the locks held"))?
            .list(prefix, limit)
            .await
    }

    /// [`Admin::evict`].
    ///
    /// # Errors
    /// `Unsupported` where the store cannot take a hold from another client; backend failures.
    pub async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let admin = self
            .admin()
            .ok_or_else(|| unsupported(self.name(), "taking a lock from its holder (force-unlock)"))?;
        admin.evict(key, fence).await
    }
}

/// The accessors of the capabilities a backend always has, each handing out the backend itself:
/// `hand_out!(notify, notes, records);` inside `impl LockBackend for MyStore`, for a store that
/// implements [`Notify`], [`Notes`] and [`Records`]. A capability the store has only sometimes
/// gets its accessor written out, with the condition.
#[macro_export]
macro_rules! hand_out {
    ($($capability:ident),+ $(,)?) => { $( $crate::hand_out!(@one $capability); )+ };
    (@one notify) => {
        fn notify(&self) -> Option<&dyn $crate::backend::Notify> {
            Some(self)
        }
    };
    (@one queue) => {
        fn queue(&self) -> Option<&dyn $crate::backend::WaitQueue> {
            Some(self)
        }
    };
    (@one notes) => {
        fn notes(&self) -> Option<&dyn $crate::backend::Notes> {
            Some(self)
        }
    };
    (@one fences) => {
        fn fences(&self) -> Option<&dyn $crate::backend::RaiseFence> {
            Some(self)
        }
    };
    (@one records) => {
        fn records(&self) -> Option<&dyn $crate::backend::Records> {
            Some(self)
        }
    };
    (@one admin) => {
        fn admin(&self) -> Option<&dyn $crate::backend::Admin> {
            Some(self)
        }
    };
}

/// The capabilities a store's state implements in full, forwarded to it:
/// `forward_to!(MyStore, inner: notes, records);` beside `impl LockBackend for MyStore`, for a
/// store whose field `inner` has `set_note` and `note` (for [`Notes`]) and `record` (for
/// [`Records`]) with the traits' signatures (as inherent methods, on `self` or on an
/// `Arc<Self>`). Pair it with [`hand_out!`](crate::hand_out) for the accessors.
#[macro_export]
macro_rules! forward_to {
    ($store:ty, $field:ident: $($capability:ident),+ $(,)?) => {
        $( $crate::forward_to!(@one $store, $field, $capability); )+
    };
    (@one $store:ty, $field:ident, notes) => {
        #[$crate::async_trait]
        impl $crate::backend::Notes for $store {
            async fn set_note(&self, key: &str, owner: $crate::OwnerToken, note: &str) -> $crate::Result<bool> {
                self.$field.set_note(key, owner, note).await
            }

            async fn note(&self, key: &str) -> $crate::Result<::std::option::Option<::std::string::String>> {
                self.$field.note(key).await
            }
        }
    };
    (@one $store:ty, $field:ident, records) => {
        #[$crate::async_trait]
        impl $crate::backend::Records for $store {
            async fn record(
                &self,
                key: &str,
                op: $crate::backend::RecordOp<'_>,
            ) -> $crate::Result<$crate::backend::Record> {
                self.$field.record(key, op).await
            }
        }
    };
}
