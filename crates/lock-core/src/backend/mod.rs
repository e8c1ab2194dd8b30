//! For backend authors: the trait every store implements and the toolkit shared by backends.
//!
//! Users of the library need only the crate root ([`Locker`](crate::Locker), guards, errors).
//! A backend crate implements [`LockBackend`] with one atomic attempt, compare-and-delete,
//! compare-and-extend and, where the store has them, notifications and a native wait; waiting,
//! retries, deadlines, guards, the watchdog and the lost signal come from the core. The
//! toolkit below is what every backend otherwise writes again: [`Cleanup`] for cancelled
//! attempts, the poison-tolerant [`Mutex`], [`UrlOptions`], [`redact`], [`NotifyHub`],
//! [`Backoff`] and [`millis`], for session-bound stores the keeper and hold table of
//! [`session`], and for stores that queue waiters by a sequence or revision the recipe of
//! [`queue`]; and the [`registry::Descriptor`] through which the facade, the command, the bench
//! and the docs know a store. `docs/ARCHITECTURE.md` has the recipe for a new backend.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::{FencingToken, LeaseSignal, LockError, OwnerToken, Result};

mod backoff;
mod cleanup;
mod contended;
mod info;
mod names;
mod notify;
mod options;
pub mod queue;
mod records;
pub mod redact;
pub mod registry;
mod runtime;
pub mod session;
mod sync;
#[cfg(feature = "tls")]
mod tls;

pub use backoff::{Backoff, jitter, retry_cleanup};
pub use cleanup::{Cleanup, settle_cleanups, spawn_cleanup};
pub use contended::{Contended, MIN_WAIT, may_wait};
pub use info::{LockInfo, PermitInfo};
pub use names::percent_decode;
pub use notify::{NotifyHub, Subscription};
pub use options::{UrlOptions, parse_duration};
pub use records::{LocalRecord, Record, RecordOp};
pub use runtime::DropInRuntime;
pub use sync::Mutex;
#[cfg(feature = "tls")]
pub use tls::ensure_tls_provider;

/// Most leases sent in one renew call (Redisson renews up to 100 keys per script call).
pub const RENEW_BATCH: usize = 100;

/// `d` in whole milliseconds, rounded up and at least 1 (for `PX`/`PEXPIRE` arguments, where 0
/// means "no expiry" or an error, and rounding down would shorten a lease).
pub fn millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

/// When a session-bound hold must be given up unless a later request has been answered: the
/// server ends a session `server_idle` after the last request it answered, and that request was
/// sent no earlier than `confirmed` (its send time); the core's drift margin covers the rates
/// of the two clocks.
pub fn session_give_up(confirmed: Instant, server_idle: Duration) -> Instant {
    let margin = crate::drift_margin(server_idle, crate::DRIFT_MARGIN_RATE, crate::DRIFT_MARGIN_FLOOR);
    confirmed + server_idle.saturating_sub(margin)
}

/// What a session-bound hold granted after a wait in the server's queue counts from: the
/// waiting request's send (`wait_sent`), or `None` when the grant must first be confirmed by a
/// request sent after it arrived (then that request's send is the anchor).
///
/// The server starts its idle clock when it sends the grant, somewhere between `wait_sent` and
/// the grant's arrival (`arrived`). The arrival is later than the server's send by the link's
/// one-way delay, which no drift margin covers: counting from it, a holder behind a slow link
/// would be told of the loss after the server freed the lock. `wait_sent` is the latest time
/// known to precede the server's clock, so it is the anchor. Answered within one keep-alive
/// period of it, the hold keeps the budget of any hold (its first ping due one period after
/// its anchor). A longer wait would leave little or nothing of the server's idle bound, so
/// the grant is handed out only once confirmed.
pub fn waited_grant_anchor(wait_sent: Instant, arrived: Instant, keepalive: Duration) -> Option<Instant> {
    (arrived < wait_sent + keepalive).then_some(wait_sent)
}

/// The error of a backend that cannot do `what` (such as inspecting a lock without taking it).
pub fn unsupported(backend: &'static str, what: &'static str) -> LockError {
    LockError::Unsupported { backend, what }
}

/// What a backend can do. Cases and callers branch on this, never on the backend's name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capability {
    /// `renew` extends the lease (compare-and-extend), or confirms the session for session-bound
    /// backends.
    pub renew: bool,
    /// Grants carry a strictly increasing [`FencingToken`].
    pub fencing: bool,
    /// `subscribe` delivers release notifications, so waiters do not poll.
    pub notify: bool,
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
    /// Waiters keep a place in a server-side queue between attempts (a fair queue with
    /// heartbeats). The core then sends every attempt of one acquisition with
    /// [`AcquireRequest::wait_until`] set and the same owner, sleeps between attempts on the
    /// subscription or the `retry_after` hint, and calls [`LockBackend::leave_queue`] when the
    /// acquisition ends without a grant (deadline, error, or its future dropped).
    pub queue: bool,
    /// [`LockBackend::set_note`] and [`LockBackend::note`] work: a holder can attach a short
    /// public note (a leader's identity) that anyone can read while the hold lasts.
    pub notes: bool,
    /// [`LockBackend::raise_fence`] works: the key's fence counter can be raised to a floor
    /// (what a quorum needs to keep fencing tokens increasing across majorities).
    pub raise_fence: bool,
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
    /// [`LockBackend::record`] works: a number and a set of marks kept under a key outside any
    /// lock (a semaphore's stored permit count, a count-down latch).
    pub records: bool,
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
        notify: false,
        native_wait: false,
        reentrant: false,
        fair: false,
        session_bound: false,
        failover_safe: false,
        queue: false,
        notes: false,
        raise_fence: false,
        early_grants: false,
        shared: false,
        records: false,
        permits: false,
        upgrade: false,
        refusal_writes: false,
    };
}

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
    /// `t` (then answers [`Attempt::Held`]); a `queue` backend joins or keeps its place in the
    /// server's queue of waiters and answers at once; other backends ignore it.
    pub wait_until: Option<Instant>,
    /// The holder's lost-lock signal; a backend that learns of a loss first (session expiry,
    /// connection death) calls [`LeaseSignal::mark_lost`] on it.
    pub signal: &'a LeaseSignal,
    /// The kind of hold asked for: [`Side::Read`] only ever towards a backend with
    /// [`Capability::shared`], [`Side::Permit`] only with [`Capability::permits`].
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
    /// wait for its read hold anyway. Only with [`Capability::upgrade`].
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
    /// With [`Capability::early_grants`] it may be shorter than the lease asked for: a hold
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

/// Longest note accepted by [`LockBackend::set_note`], in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

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

/// A lock store. Object-safe: use it as `Arc<dyn LockBackend>`.
///
/// Keys reach the backend validated by [`validate_key`](crate::validate_key); the backend must
/// carry any such key exactly (escape it, bind it, hash it), never interpret it.
/// Waiting, retries, guards, the watchdog and the lost signal live in the core, not here.
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug + 'static {
    /// Short name for errors and logs, such as `"redis"`.
    fn name(&self) -> &'static str;

    /// What this backend supports.
    fn capabilities(&self) -> Capability;

    /// The lock space this backend locks in, computed the same way by every process that
    /// shares it (scheme, sorted endpoints, database or prefix; never credentials), such as
    /// `redis://127.0.0.1:6379/0?prefix=dlock:`. [`MultiLock`](crate::MultiLock) orders keys by
    /// (key, identity), so two processes taking the same keys never wait on each other in a
    /// cycle. The default, the backend's name, is only canonical for a backend of which a
    /// process uses one lock space.
    fn identity(&self) -> String;

    /// One atomic acquisition attempt (or a wait in the server's queue, see
    /// [`AcquireRequest::wait_until`]).
    ///
    /// # Behavior
    /// Must be cancellation-safe: if the returned future is dropped, no lock may stay behind
    /// longer than the lease (arm the cleanup before sending the request).
    ///
    /// # Errors
    /// Backend failures, with `temporary` set for connection loss and timeouts.
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt>;

    /// Compare-and-delete: release `key` if `owner` holds it. Reentrant backends decrement the
    /// hold count and free the key at zero.
    ///
    /// # Behavior
    /// Returns `Ok(true)` when the owner held the key, `Ok(false)` when it did not (a foreign
    /// token, a second release, an expired lease); in that case nothing is changed.
    ///
    /// # Errors
    /// Backend failures.
    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool>;

    /// Compare-and-extend a batch of leases (one round trip where the backend can).
    ///
    /// # Behavior
    /// Returns one flag per item, in order: `true` if the owner still held the key and its lease
    /// now runs `lease` from the request, `false` if it was not held (lost).
    ///
    /// # Errors
    /// Backend failures; then nothing is known about any item.
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>>;

    /// Look at `key` without acquiring, waiting or changing anything.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] (see [`unsupported`]) when the
    /// backend cannot tell without taking the lock; backend failures.
    async fn inspect(&self, key: &str) -> Result<LockInfo>;

    /// The acquisition by `owner` that sent attempts with `wait_until` ended without a grant:
    /// leave the server's queue of waiters for `key` (see [`Capability::queue`]). Never
    /// releases a hold. Backends without such a queue return `Ok(())`.
    ///
    /// # Errors
    /// Backend failures (the waiter's place then expires by its own timeout).
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        let _ = (key, owner);
        Ok(())
    }

    /// Subscribe to release notifications for `key`, before an acquisition attempt, so a
    /// release between the attempt and the wait is not missed. `None` when the backend has no
    /// notifications (the core then polls with backoff).
    ///
    /// # Errors
    /// Backend failures.
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        let _ = key;
        Ok(None)
    }

    /// Whether this client hears releases of `key` already (a subscription of an earlier
    /// waiter is still live on the server): [`subscribe`](Self::subscribe) then answers at once,
    /// so the core subscribes before a waiting attempt instead of after it, and a refused
    /// attempt needs no second one to cover a release that ran before the subscription.
    fn listening(&self, key: &str) -> bool {
        let _ = key;
        false
    }

    /// Attach `note` to `owner`'s current hold of `key`, replacing any earlier note; anyone can
    /// read it with [`note`](Self::note) while that hold lasts (a leader's identity, for
    /// observers). The note is public: never put a secret in it. Validated by the core (at
    /// most [`MAX_NOTE_BYTES`], no control characters) before it reaches the backend.
    ///
    /// A permit of a semaphore kept by the store ([`Side::Permit`] on the pool key) is its
    /// holder's hold: a backend with [`Capability::permits`] stores the note with that permit
    /// and shows it in [`PermitInfo::holder`]. The core never notes a reader ([`Side::Read`]):
    /// readers are many, so their holds take no note.
    ///
    /// # Behavior
    /// `Ok(true)` when `owner` held `key` and the note is stored with that hold; `Ok(false)`
    /// when it did not hold it (nothing stored). A note never outlives its hold as far as
    /// [`note`](Self::note) can tell: a later holder's readers see its note or none, never an
    /// earlier holder's.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] (see [`unsupported`]) when the backend has no place for notes
    /// ([`Capability::notes`] is `false`); backend failures.
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let _ = (key, owner, note);
        Err(unsupported(self.name(), "notes on a hold"))
    }

    /// The note the current holder of `key` attached with [`set_note`](Self::set_note);
    /// `None` when the key is free or its holder attached none.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] (see [`unsupported`]) without [`Capability::notes`]; backend
    /// failures.
    async fn note(&self, key: &str) -> Result<Option<String>> {
        let _ = key;
        Err(unsupported(self.name(), "notes on a hold"))
    }

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
    /// [`LockError::Unsupported`] (see [`unsupported`]) without [`Capability::raise_fence`]; backend
    /// failures.
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        let _ = (key, owner, floor);
        Err(unsupported(self.name(), "raising the fence counter"))
    }

    /// Keys whose names start with `prefix` that the store has a lock under now, at most
    /// `limit` of them, in no particular order: what `dlock list` shows after inspecting each
    /// (a key listed may be free by then, or free already where the store keeps a lock's
    /// directory after its release). A composite primitive's parts show under their own keys.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] (see [`unsupported`]) where the store cannot enumerate its
    /// locks; backend failures.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let _ = (prefix, limit);
        Err(unsupported(self.name(), "listing the locks held"))
    }

    /// Take `key` away from its holder, an operator's force-unlock: the hold whose fence is
    /// `fence` (what [`inspect`](Self::inspect) showed) is deleted on the server, its waiters
    /// are woken as by a release, the evicted holder's next renewal is refused (its lost signal
    /// fires) and every later grant draws a larger fence. A hold with another fence (the lock
    /// was released, or passed on, since it was inspected) is left alone, so a force-unlock
    /// never evicts a holder nobody looked at; a second copy of the request does nothing.
    ///
    /// # Behavior
    /// `Ok(true)` when that hold was evicted, `Ok(false)` when `key` is not held with `fence`.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] (see [`unsupported`]) where the store cannot take a hold from
    /// another client; permission errors where the server refuses; backend failures.
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let _ = (key, fence);
        Err(unsupported(self.name(), "taking a lock from its holder (force-unlock)"))
    }

    /// Apply `op` to the record under `key` ([`Capability::records`]) and answer the record as
    /// stored afterwards. Records live apart from locks of the same key and outlive every
    /// lease and session, until deleted. Every operation is idempotent when sent twice.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] (see [`unsupported`]) without [`Capability::records`]; backend
    /// failures.
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let _ = (key, op);
        Err(unsupported(self.name(), "records (stored counts, latches)"))
    }
}
