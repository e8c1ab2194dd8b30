//! A counting semaphore built from ordinary locks: permit `i` of a name is the lock on one
//! slot key, so every backend has it, and each permit has its own lease, watchdog, fencing
//! token and lost signal.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures_util::future::join_all;

#[cfg(doc)]
use crate::LockGuard;
use crate::{LockError, Locker, Result, validate_key};

mod count;
mod many;
mod native;
mod permit;
mod slots;

pub use many::Permits;
pub use permit::{Permit, PermitRequest};

/// Most permits a [`Semaphore`] (and reader slots an [`RwLock`](crate::RwLock)) may have.
///
/// Each permit is a key on the server; a waiter that finds them all taken may wait on every
/// one at once (one subscription each) and
/// [`available`](Semaphore::available) inspects each. 256 keeps both a bounded fan-out of one
/// request while covering the "limit how many copies of a job run at once" use; above that a
/// counter in the store would be the better tool. It also bounds the reserved key suffix to
/// three digits.
pub const MAX_PERMITS: u32 = 256;

/// Suffix of a semaphore's slot keys, before the slot number: `{name}#s{i}`.
const SLOT_SUFFIX: &str = "#s";

/// A counting semaphore: at most `permits` holders of `name` at once, across every process
/// that uses the same name and permit count on the same backend.
///
/// # How it works
/// Where the store keeps permits itself ([`Capability::permits`](crate::Capability): memory,
/// Redis, ZooKeeper in Curator's `InterProcessSemaphoreV2` layout;
/// [`is_native`](Self::is_native)) the semaphore is one key, [`pool_key`](Self::pool_key)
/// (`{name}#sp`): a permit is one acquisition of a [`Side::Permit`](crate::backend::Side)
/// hold, granted with the lowest free slot and a fence of its own, and every release wakes a
/// waiter. It keeps everything below (lease, watchdog, lost signal, the stored count);
/// the slot keys are not used.
///
/// Elsewhere permit `i` is an ordinary lock on the slot key `{name}#s{i}` (`0 <= i < permits`), taken
/// through the [`Locker`]. A permit therefore has everything a [`LockGuard`] has: a lease
/// renewed by the watchdog (or a fixed one), a fencing token of its slot, a lost signal; and a
/// holder that dies gives its permit back when its lease or session ends, so permits never
/// leak. An acquisition first tries one slot picked at random (cheap while some are free),
/// then inspects the others at once and tries those found free. When all are held, a waiter on
/// a backend with release notifications only (memory) waits on every slot at once, keeps the
/// first grant and abandons the other waits (a dropped lock acquisition leaves nothing held);
/// where waiting takes a place in a server-side queue (Redis, MySQL, PostgreSQL, ZooKeeper,
/// etcd) it queues on one random slot for up to half a second at a time and looks at every
/// slot between slices, so a grant never goes to a waiter that has just won elsewhere.
///
/// The suffixes `#sp` and `#s` followed by digits are reserved: do not lock `{name}#s0` as a mutex as well.
/// The name may be at most [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) minus 5 bytes, so that
/// every slot key of any permit count fits.
///
/// # The permit count
/// Where the store keeps records ([`LockBackend::records`](crate::backend::LockBackend::records): memory, Redis,
/// PostgreSQL, MySQL/MariaDB, ZooKeeper, etcd, files), the count is stored with the semaphore (the
/// record `{name}#s-n`) by the first handle that takes a permit, and a handle built with
/// another count is refused at its first acquisition with [`LockError::PermitsMismatch`].
/// [`resize`](Self::resize) changes it for everyone; handles that checked before keep their
/// count until rebuilt. Elsewhere (a Redlock quorum) the count is a property of the handle
/// alone. A handle with `n` permits only ever grants slots `0..n`; a change of
/// count acts as follows:
/// - **Growing** to `n`: slots up to `n` are used at once.
/// - **Shrinking** to `n` while more permits are held: holders of slots `>= n` keep them until
///   they release (or lose them); new grants through the smaller handle only use slots below
///   `n`, so once those holders are gone at most `n` permits are held.
///   [`available`](Self::available) counts free slots below `n`: never more than `n` minus the
///   permits held below `n`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::{sync::Arc, time::Duration};
/// use lock_core::{Locker, MemoryBackend, Semaphore};
///
/// let locker = Locker::new(Arc::new(MemoryBackend::new()));
/// let jobs = Semaphore::new(&locker, "nightly-export", 2)?;
/// let a = jobs.acquire().wait(Duration::from_secs(1)).acquire().await?;
/// let b = jobs.acquire().try_acquire().await?.expect("a second permit is free");
/// assert!(jobs.acquire().try_acquire().await?.is_none(), "only two at once");
/// assert_eq!(jobs.available().await?, 0);
/// a.release().await?;
/// b.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    locker: Locker,
    name: Arc<str>,
    /// Slot `i`'s key is this prefix followed by `i`.
    prefix: Arc<str>,
    permits: u32,
    /// The backend answered `inspect` with `Unsupported`: attempt every slot instead.
    no_inspect: Arc<AtomicBool>,
    /// The permit count is stored with the semaphore (a read-write lock stores its reader
    /// slots' count the same way, under its own suffix).
    counted: bool,
    /// Suffix of the record holding the count, after the name (see `count.rs`).
    count_suffix: &'static str,
    /// This handle's count was checked against the stored one (see `count.rs`).
    checked: Arc<std::sync::OnceLock<()>>,
    /// The store keeps the permits in one key (see `native.rs`).
    native: bool,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("backend", &self.locker.backend().name())
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish()
    }
}

/// Check a primitive's name: a key itself, and at most `max` bytes so that every key derived
/// from it fits (`too_long` says so with the primitive's own limit, not the derived key's).
pub(crate) fn validate_name(name: &str, max: usize, too_long: &'static str) -> Result<()> {
    validate_key(name)?;
    if name.len() > max {
        return Err(LockError::InvalidKey { reason: too_long, len: name.len() });
    }
    Ok(())
}

/// Refuse a permit count outside `1..=MAX_PERMITS`.
pub(crate) fn validate_permits(permits: u32, what: &str) -> Result<()> {
    if permits == 0 || permits > MAX_PERMITS {
        return Err(LockError::InvalidConfig {
            reason: format!("{what} must be within 1..={MAX_PERMITS}, not {permits}"),
        });
    }
    Ok(())
}

impl Semaphore {
    /// Longest semaphore name, in bytes: [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) minus the
    /// longest suffix of its keys (`#s255`, a slot key of the largest count).
    pub const MAX_NAME_BYTES: usize = crate::MAX_KEY_BYTES - 5;

    /// Check a semaphore's name without a backend (before connecting): what [`new`](Self::new)
    /// refuses, with the limit for a semaphore rather than for the key it derives.
    ///
    /// # Errors
    /// [`LockError::InvalidKey`] when the name is empty, has a control character, or is longer
    /// than [`MAX_NAME_BYTES`](Self::MAX_NAME_BYTES).
    pub fn validate_name(name: &str) -> Result<()> {
        validate_name(
            name,
            Self::MAX_NAME_BYTES,
            "a semaphore's name is longer than 250 bytes (its keys add up to 5)",
        )
    }

    /// A semaphore of `permits` permits named `name`, over `locker`'s backend.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when `permits` is 0 or over [`MAX_PERMITS`];
    /// [`LockError::InvalidKey`] when the name is empty, has a control character, or is too
    /// long for its slot keys (more than [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) minus 5 bytes).
    pub fn new(locker: &Locker, name: impl Into<String>, permits: u32) -> Result<Self> {
        let name: String = name.into();
        Self::validate_name(&name)?;
        let prefix = format!("{name}{SLOT_SUFFIX}");
        let mut sem = Self::with_prefix(locker, name, prefix, permits)?;
        sem.counted = true;
        // Never for a read-write lock's reader slots: its writers take every slot key.
        sem.native = locker.backend().capabilities().permits;
        Ok(sem)
    }

    /// A semaphore whose slot keys are `prefix` followed by the slot number (the read-write
    /// lock's reader slots use their own prefix).
    pub(crate) fn with_prefix(locker: &Locker, name: String, prefix: String, permits: u32) -> Result<Self> {
        validate_permits(permits, "the number of permits")?;
        if name.is_empty() {
            return Err(LockError::InvalidKey { reason: "key is empty", len: 0 });
        }
        // The longest slot key any permit count can derive: valid for every count.
        validate_key(&format!("{prefix}{}", MAX_PERMITS - 1))?;
        Ok(Semaphore {
            locker: locker.clone(),
            name: name.into(),
            prefix: prefix.into(),
            permits,
            no_inspect: Arc::default(),
            counted: false,
            count_suffix: count::COUNT_SUFFIX,
            checked: Arc::default(),
            native: false,
        })
    }

    /// The same semaphore with `permits` permits (see "Changing the permit count" above).
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when `permits` is 0 or over [`MAX_PERMITS`].
    pub fn with_permits(mut self, permits: u32) -> Result<Self> {
        validate_permits(permits, "the number of permits")?;
        self.permits = permits;
        self.checked = Arc::default();
        Ok(self)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of permits of this handle.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Whether the store keeps the permits itself ([`Capability::permits`](crate::Capability)):
    /// then every permit is a shared hold of one key, [`pool_key`](Self::pool_key), granted
    /// with its slot, and the slot keys are not used.
    pub fn is_native(&self) -> bool {
        self.native
    }

    /// The lock key of slot `slot` (for monitoring: `dlock status` on it shows its holder).
    pub fn slot_key(&self, slot: u32) -> String {
        format!("{}{slot}", self.prefix)
    }

    /// The locker the permits are taken through.
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

    /// Start building a permit request: `sem.acquire().wait(..).acquire().await`.
    pub fn acquire(&self) -> PermitRequest<'_> {
        PermitRequest { sem: self, wait: None, lease: None }
    }

    /// One pass over the slots with the watchdog lease: `Ok(None)` when every permit is held.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        self.acquire().try_acquire().await
    }

    /// How many permits are free now: the slots below [`permits`](Self::permits) that nobody
    /// holds (one concurrent [`inspect`](crate::LockBackend::inspect) per slot). A snapshot:
    /// it may be stale by the time it is read.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] from a backend that cannot inspect a lock without taking it;
    /// backend errors.
    pub async fn available(&self) -> Result<u32> {
        if self.native {
            return self.available_pooled().await;
        }
        let backend = self.locker.backend();
        let keys: Vec<String> = (0..self.permits).map(|i| self.slot_key(i)).collect();
        let answers = join_all(keys.iter().map(|k| backend.inspect(k))).await;
        let mut free = 0;
        for a in answers {
            if !a?.held {
                free += 1;
            }
        }
        Ok(free)
    }
}
