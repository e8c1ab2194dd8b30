//! A writer-preferring read-write lock: the store's own shared holds where it has them
//! ([`Capability::shared`](crate::Capability)), else built from a gate mutex and a semaphore of
//! reader slots, so every backend has it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::caller::Holders;
use crate::semaphore::validate_permits;
use crate::{LockError, Locker, Result, Semaphore};

pub use guard::{ReadGuard, WriteGuard};
use request::Opts;
pub use request::{ReadRequest, WriteRequest};
pub use upgrade::{UpgradeableReadGuard, UpgradeableRequest};

mod acquire;
mod guard;
mod request;
mod upgrade;

/// Default number of reader slots (readers that can hold an [`RwLock`] at once).
///
/// A writer takes the gate and every slot: `K + 1` acquisitions. On the session-bound SQL
/// backends each held lock pins one pooled connection (32 by default there), so a writer with
/// the default 16 slots leaves room in the pool for the process's other locks.
pub const DEFAULT_READER_SLOTS: u32 = 16;

/// Suffix of the gate key: `{name}#rw-gate`.
const GATE_SUFFIX: &str = "#rw-gate";
/// Suffix of the upgrade gate key: `{name}#rw-up`.
const UPGRADE_SUFFIX: &str = "#rw-up";
/// Suffix of the reader slot keys, before the slot number: `{name}#rw-r{i}`.
const READER_SUFFIX: &str = "#rw-r";
/// Suffix of the record holding the number of reader slots: `{name}#rw-n`.
const SLOTS_SUFFIX: &str = "#rw-n";

/// A read-write lock: many readers or one writer, across processes.
///
/// # How it works
/// On a backend with [`Capability::shared`](crate::Capability) (see [`is_native`](Self::is_native))
/// it is one key, the gate: a reader takes a shared hold of it and a writer an exclusive one,
/// one acquisition each, and the store keeps new readers out while a writer waits. The reader
/// slots below are then not used, and readers are not limited in number.
///
/// Elsewhere it is built from two kinds of ordinary locks per name: a **gate** (`{name}#rw-gate`), a mutex that writers
/// take one at a time, and **K reader slots** (`{name}#rw-r0` .. `{name}#rw-r{K-1}`), a
/// [`Semaphore`] of K permits.
/// - A **reader** takes any free slot (waiting if all K are taken), then looks at the gate
///   ([`inspect`](crate::LockBackend::inspect), or on a backend that cannot inspect, a single
///   attempt on the gate released at once). If a writer holds the gate (holding it, or waiting
///   there for the readers to leave), the reader gives its slot back and queues for the gate
///   itself; once it has the gate it takes a slot and lets the gate go. So a waiting writer
///   blocks new readers (a stream of readers cannot starve writers), and readers that queued
///   behind a writer get in before the writers that queued after them (a stream of writers
///   cannot starve readers either, on backends that serve the gate's waiters in order).
/// - A **writer** takes the gate, then all K slots at once; on any failure it releases what it
///   took. Exclusion between writers and readers rests only on the slots (a writer holds every
///   one), so it does not depend on how fresh the gate check is; the gate gives writers
///   priority and makes them take turns.
///
/// So at most K readers hold the lock at once, and a write costs K + 1 acquisitions (and as
/// many releases): keep K as small as the read concurrency you need
/// ([`with_reader_slots`](Self::with_reader_slots), default [`DEFAULT_READER_SLOTS`]).
///
/// Every part has its own lease, watchdog and lost signal; a guard's
/// [`lost`](WriteGuard::lost) fires when any of its parts is lost. A writer's fencing token is
/// the gate's: strictly increasing across writers. Readers get none (see
/// [`ReadGuard`]). A plain reader cannot upgrade to a writer; an
/// [`upgradeable_read`](Self::upgradeable_read) can, where the store allows it. A caller (a tokio task, or a thread outside any task) that asks this handle or a
/// clone for a side its own hold would block (the write side while it reads, either side while
/// it writes) gets [`LockError::WouldDeadlock`] at once instead of waiting for itself.
///
/// The suffixes `#rw-gate`, `#rw-up`, `#rw-n` and `#rw-r` followed by digits are reserved; the name may be at
/// most [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) minus 8 bytes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::{sync::Arc, time::Duration};
/// use lock_core::{LockError, Locker, MemoryBackend, RwLock};
///
/// let locker = Locker::new(Arc::new(MemoryBackend::new()));
/// let config = RwLock::new(&locker, "config")?.with_reader_slots(4)?;
/// let r1 = config.read().wait(Duration::from_secs(1)).acquire().await?;
/// let r2 = config.read().wait(Duration::from_secs(1)).acquire().await?;
/// // This caller reads: its own write would wait for itself, and is refused at once.
/// assert!(matches!(config.write().try_acquire().await, Err(LockError::WouldDeadlock { .. })));
/// // Another task waits for the readers.
/// let other = config.clone();
/// let writer = tokio::spawn(async move { other.write().wait(Duration::from_secs(1)).acquire().await });
/// r1.release().await?;
/// r2.release().await?;
/// let w = writer.await.expect("writer task")?;
/// // Hand w.fence() to the store being written.
/// assert!(config.read().try_acquire().await?.is_none(), "the writer holds it");
/// w.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    locker: Locker,
    name: Arc<str>,
    gate: Arc<str>,
    readers: Semaphore,
    /// The backend answered `inspect` with `Unsupported`: check the gate by a single attempt.
    no_inspect: Arc<AtomicBool>,
    /// Who holds which side through this handle and its clones.
    holders: Arc<Holders>,
    /// The backend has shared holds: the gate alone is the lock.
    native: bool,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("backend", &self.locker.backend().name())
            .field("name", &self.name)
            .field("native", &self.native)
            .field("reader_slots", &self.readers.permits())
            .finish()
    }
}

impl RwLock {
    /// Longest read-write lock name, in bytes: [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) minus
    /// the longest suffix of its keys (`#rw-gate`, and `#rw-r255` for the largest slot count).
    pub const MAX_NAME_BYTES: usize = crate::MAX_KEY_BYTES - 8;

    /// Check a read-write lock's name without a backend (before connecting): what
    /// [`new`](Self::new) refuses, with the limit for the lock rather than for a derived key.
    ///
    /// # Errors
    /// [`LockError::InvalidKey`] when the name is empty, has a control character, or is longer
    /// than [`MAX_NAME_BYTES`](Self::MAX_NAME_BYTES).
    pub fn validate_name(name: &str) -> Result<()> {
        crate::semaphore::validate_name(
            name,
            Self::MAX_NAME_BYTES,
            "a read-write lock's name is longer than 247 bytes (its keys add up to 8)",
        )
    }

    /// A read-write lock named `name` over `locker`'s backend, with
    /// [`DEFAULT_READER_SLOTS`] reader slots.
    ///
    /// # Errors
    /// [`LockError::InvalidKey`] when the name is empty, has a control character, or is too
    /// long for its derived keys.
    pub fn new(locker: &Locker, name: impl Into<String>) -> Result<Self> {
        let name: String = name.into();
        Self::validate_name(&name)?;
        let prefix = format!("{name}{READER_SUFFIX}");
        let readers = Semaphore::with_prefix(locker, name.clone(), prefix, DEFAULT_READER_SLOTS)?
            .counted_as(SLOTS_SUFFIX);
        let gate = format!("{name}{GATE_SUFFIX}");
        crate::validate_key(&gate)?;
        Ok(RwLock {
            locker: locker.clone(),
            name: name.into(),
            gate: gate.into(),
            readers,
            no_inspect: Arc::default(),
            holders: Arc::default(),
            native: locker.backend().capabilities().shared,
        })
    }

    /// With `k` reader slots: at most `k` readers at once; a write takes `k + 1` locks. Every
    /// process must use the same `k` for a name: a writer with fewer slots than a reader's
    /// would not exclude that reader. Where the store keeps records
    /// ([`LockBackend::records`](crate::backend::LockBackend::records)) the first handle to take either side
    /// stores its `k` with the lock (the record `{name}#rw-n`, also where the lock is native,
    /// so that the store tells a read-write lock by its name), and a handle with another `k`
    /// is refused at its first acquisition with [`LockError::InvalidConfig`].
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when `k` is 0 or over [`MAX_PERMITS`](crate::MAX_PERMITS).
    pub fn with_reader_slots(mut self, k: u32) -> Result<Self> {
        validate_permits(k, "the number of reader slots")?;
        self.readers = self.readers.with_permits(k)?;
        Ok(self)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the lock is the store's own (readers share the gate key, a write is one
    /// acquisition), rather than built from a gate and reader slots.
    pub fn is_native(&self) -> bool {
        self.native
    }

    /// The number of reader slots (not used when [`is_native`](Self::is_native)).
    pub fn reader_slots(&self) -> u32 {
        self.readers.permits()
    }

    /// The key of the record holding the number of reader slots (`{name}#rw-n`, where the
    /// store keeps records: read it with [`Records::record`](crate::backend::Records::record)).
    pub fn slots_key(&self) -> String {
        self.readers.count_key()
    }

    /// Store this handle's number of reader slots with the lock, or check it against the one
    /// stored: once per handle (and its clones), before its first acquisition of either side.
    async fn check_slots(&self, once: bool, deadline: Option<Instant>) -> Result<()> {
        self.readers.check_count_by(once, deadline).await.map_err(|e| match e {
            LockError::PermitsMismatch { name, stored, asked } => LockError::InvalidConfig {
                reason: format!(
                    "read-write lock {name:?} has {stored} reader slots on the server, not {asked} as this \
                     handle says"
                ),
            },
            e => e,
        })
    }

    /// The gate's lock key (`{name}#rw-gate`): held by the writer, and by a writer waiting
    /// for readers to leave; when native, the one key, shared by the readers.
    pub fn gate_key(&self) -> &str {
        &self.gate
    }

    /// The lock key of reader slot `slot` (`{name}#rw-r{slot}`).
    pub fn reader_slot_key(&self, slot: u32) -> String {
        self.readers.slot_key(slot)
    }

    /// Start building a read request: `rw.read().wait(..).acquire().await`.
    pub fn read(&self) -> ReadRequest<'_> {
        ReadRequest { rw: self, opts: Opts::default() }
    }

    /// Start building a write request: `rw.write().wait(..).acquire().await`.
    pub fn write(&self) -> WriteRequest<'_> {
        WriteRequest { rw: self, opts: Opts::default() }
    }

    fn gate_request(&self, lease: Option<Duration>) -> crate::LockRequest<'_> {
        let req = self.locker.lock(self.gate.to_string());
        match lease {
            Some(l) => req.lease(l),
            None => req,
        }
    }

    fn timeout(&self, started: Instant) -> LockError {
        LockError::Timeout { key: self.name.to_string(), waited: started.elapsed() }
    }

    /// Whether a writer holds the gate (or waits in its queue).
    async fn gate_busy(&self, lease: Option<Duration>) -> Result<bool> {
        if !self.no_inspect.load(Ordering::Relaxed) {
            match self.locker.backend().inspect(&self.gate).await {
                Ok(info) => return Ok(info.held || info.waiters.is_some_and(|w| w > 0)),
                Err(LockError::Unsupported { .. }) => self.no_inspect.store(true, Ordering::Relaxed),
                Err(e) => return Err(e),
            }
        }
        match self.gate_request(lease).try_acquire().await? {
            Some(g) => {
                g.release().await?;
                Ok(false)
            }
            None => Ok(true),
        }
    }

    /// Refuses a request the caller's own hold would block for good.
    fn not_blocked_by_caller(&self, write: bool) -> Result<()> {
        let held = self.holders.of_caller();
        let reason = match (write, held.reads > 0, held.writes > 0) {
            (true, true, _) => "it holds a read lock and asks to write (take an upgradeable read to upgrade)",
            (true, false, true) => "it holds the write lock and asks for it again",
            (false, _, true) => "it holds the write lock and asks to read",
            _ => return Ok(()),
        };
        Err(LockError::WouldDeadlock { key: self.name.to_string(), reason })
    }
}
