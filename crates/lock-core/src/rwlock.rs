//! A writer-preferring read-write lock built from a gate mutex and a semaphore of reader
//! slots, so every backend has it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::caller::{HolderMark, Holders};
use crate::semaphore::validate_permits;
use crate::{FencingToken, LockError, LockGuard, Locker, Permit, Result, Semaphore, validate_wait};

/// Default number of reader slots (readers that can hold an [`RwLock`] at once).
///
/// A writer takes the gate and every slot: `K + 1` acquisitions. On the session-bound SQL
/// backends each held lock pins one pooled connection (32 by default there), so a writer with
/// the default 16 slots leaves room in the pool for the process's other locks.
pub const DEFAULT_READER_SLOTS: u32 = 16;

/// Suffix of the gate key: `{name}#rw-gate`.
const GATE_SUFFIX: &str = "#rw-gate";
/// Suffix of the reader slot keys, before the slot number: `{name}#rw-r{i}`.
const READER_SUFFIX: &str = "#rw-r";

/// A read-write lock: many readers or one writer, across processes.
///
/// # How it works
/// Two kinds of ordinary locks per name: a **gate** (`{name}#rw-gate`), a mutex that writers
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
/// [`ReadGuard`]). A reader cannot upgrade to a writer: release the read lock and take the
/// write lock. A caller (a tokio task, or a thread outside any task) that asks this handle or a
/// clone for a side its own hold would block (the write side while it reads, either side while
/// it writes) gets [`LockError::WouldDeadlock`] at once instead of waiting for itself.
///
/// The suffixes `#rw-gate` and `#rw-r` followed by digits are reserved; the name may be at
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
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("backend", &self.locker.backend().name())
            .field("name", &self.name)
            .field("reader_slots", &self.readers.permits())
            .finish()
    }
}

impl RwLock {
    /// A read-write lock named `name` over `locker`'s backend, with
    /// [`DEFAULT_READER_SLOTS`] reader slots.
    ///
    /// # Errors
    /// [`LockError::InvalidKey`] when the name is empty, has a control character, or is too
    /// long for its derived keys.
    pub fn new(locker: &Locker, name: impl Into<String>) -> Result<Self> {
        let name: String = name.into();
        let prefix = format!("{name}{READER_SUFFIX}");
        let readers = Semaphore::with_prefix(locker, name.clone(), prefix, DEFAULT_READER_SLOTS)?;
        let gate = format!("{name}{GATE_SUFFIX}");
        crate::validate_key(&gate)?;
        Ok(RwLock {
            locker: locker.clone(),
            name: name.into(),
            gate: gate.into(),
            readers,
            no_inspect: Arc::default(),
            holders: Arc::default(),
        })
    }

    /// With `k` reader slots: at most `k` readers at once; a write takes `k + 1` locks. Every
    /// process must use the same `k` for a name: a writer with fewer slots than a reader's
    /// would not exclude that reader.
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

    /// The number of reader slots.
    pub fn reader_slots(&self) -> u32 {
        self.readers.permits()
    }

    /// The gate's lock key (`{name}#rw-gate`): held by the writer, and by a writer waiting
    /// for readers to leave.
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
            (true, true, _) => "it holds a read lock and asks to write (a read lock is not upgraded)",
            (true, false, true) => "it holds the write lock and asks for it again",
            (false, _, true) => "it holds the write lock and asks to read",
            _ => return Ok(()),
        };
        Err(LockError::WouldDeadlock { key: self.name.to_string(), reason })
    }

    async fn read_inner(&self, once: bool, opts: Opts) -> Result<Option<ReadGuard>> {
        self.not_blocked_by_caller(false)?;
        let marked = |permit| ReadGuard { permit, _mark: self.holders.mark(false) };
        let started = Instant::now();
        let deadline = opts.deadline(started)?;
        let permit = match self.readers.take(once, deadline, opts.lease).await {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(None),
            Err(LockError::Timeout { .. }) => return Err(self.timeout(started)),
            Err(e) => return Err(e),
        };
        let busy = match self.gate_busy(opts.lease).await {
            Ok(b) => b,
            Err(e) => {
                release_quietly(permit.release()).await;
                return Err(e);
            }
        };
        if !busy {
            return Ok(Some(marked(permit)));
        }
        // A writer holds or waits: step aside and queue at the gate behind it. Once through,
        // take the slot while still holding the gate, so that the writers queued after this
        // reader cannot turn it away again (readers would starve under a stream of writers).
        release_quietly(permit.release()).await;
        if once {
            return Ok(None);
        }
        let mut req = self.gate_request(opts.lease);
        if let Some(d) = deadline {
            req = req.wait(d.saturating_duration_since(Instant::now()));
        }
        let gate = match req.acquire().await {
            Ok(g) => g,
            Err(LockError::Timeout { .. }) => return Err(self.timeout(started)),
            Err(e) => return Err(e),
        };
        // Only readers hold slots while the gate is held here: they leave in time.
        let permit = self.readers.take(false, deadline, opts.lease).await;
        release_quietly(gate.release()).await;
        match permit {
            Ok(Some(permit)) => Ok(Some(marked(permit))),
            Ok(None) => unreachable!("take(false) returns a permit or an error"),
            Err(LockError::Timeout { .. }) => Err(self.timeout(started)),
            Err(e) => Err(e),
        }
    }

    async fn write_inner(&self, once: bool, opts: Opts) -> Result<Option<WriteGuard>> {
        self.not_blocked_by_caller(true)?;
        let started = Instant::now();
        let deadline = opts.deadline(started)?;
        let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let gate = if once {
            match self.gate_request(opts.lease).try_acquire().await? {
                Some(g) => g,
                None => return Ok(None),
            }
        } else {
            let mut req = self.gate_request(opts.lease);
            if let Some(w) = remaining() {
                req = req.wait(w);
            }
            match req.acquire().await {
                Ok(g) => g,
                Err(LockError::Timeout { .. }) => return Err(self.timeout(started)),
                Err(e) => return Err(e),
            }
        };
        // Holding the gate, this writer now takes every reader slot at once: new readers step
        // aside (they see the gate held), current ones finish and release.
        let k = self.readers.permits();
        let mut parts: FuturesUnordered<_> = (0..k)
            .map(|slot| {
                let mut req = self.readers.slot_request(slot, opts.lease);
                let w = if once { Some(Duration::ZERO) } else { remaining() };
                if let Some(w) = w {
                    req = req.wait(w);
                }
                async move { (slot, req.try_acquire_or_wait(once).await) }
            })
            .collect();
        let mut slots = Vec::with_capacity(k as usize);
        let mut failure: Option<Option<LockError>> = None;
        while let Some((slot, result)) = parts.next().await {
            match result {
                Ok(Some(guard)) => slots.push(Permit::new(slot, guard)),
                // Let the other single attempts finish rather than cut them off: a cut-off
                // attempt is undone in the background, and until then it can stand in the way
                // of the next acquisition.
                Ok(None) => failure = Some(None),
                Err(LockError::Timeout { .. }) => {
                    failure = Some(Some(self.timeout(started)));
                    break;
                }
                Err(e) => {
                    failure = Some(Some(e));
                    break;
                }
            }
        }
        // Dropping the unfinished acquisitions leaves nothing held.
        drop(parts);
        if let Some(failure) = failure {
            join_all(slots.into_iter().map(|p| release_quietly(p.release()))).await;
            release_quietly(gate.release()).await;
            return match failure {
                None => Ok(None),
                Some(e) => Err(e),
            };
        }
        slots.sort_by_key(Permit::slot);
        Ok(Some(WriteGuard { gate, slots, _mark: self.holders.mark(true) }))
    }
}

/// Release a part, logging (not returning) a failure: its lease frees it anyway.
async fn release_quietly(release: impl Future<Output = Result<()>>) {
    if let Err(e) = release.await {
        tracing::debug!(error = %e, "releasing part of a read-write lock failed; its lease frees it");
    }
}

impl crate::LockRequest<'_> {
    /// One attempt when `once`, else an acquisition with the request's wait.
    async fn try_acquire_or_wait(self, once: bool) -> Result<Option<LockGuard>> {
        if once { self.try_acquire().await } else { self.acquire().await.map(Some) }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Opts {
    wait: Option<Duration>,
    lease: Option<Duration>,
}

impl Opts {
    fn deadline(&self, started: Instant) -> Result<Option<Instant>> {
        match self.wait {
            Some(w) => {
                validate_wait(w)?;
                Ok(Some(started + w))
            }
            None => Ok(None),
        }
    }
}

macro_rules! request_settings {
    () => {
        /// Wait at most `wait` in `acquire` (default: without a bound).
        pub fn wait(mut self, wait: Duration) -> Self {
            self.opts.wait = Some(wait);
            self
        }

        /// A fixed lease for every part: no watchdog; the parts expire after `lease` unless
        /// renewed (default: the watchdog lease, renewed while held).
        pub fn lease(mut self, lease: Duration) -> Self {
            self.opts.lease = Some(lease);
            self
        }
    };
}

/// A read request being built: `rw.read().wait(..).acquire().await`.
#[derive(Debug)]
#[must_use = "a read request does nothing until acquired"]
pub struct ReadRequest<'a> {
    rw: &'a RwLock,
    opts: Opts,
}

impl ReadRequest<'_> {
    request_settings!();

    /// Take the read lock, waiting up to the request's wait.
    ///
    /// # Errors
    /// [`LockError::Timeout`] (naming the lock) at the deadline; invalid input; backend errors.
    pub async fn acquire(self) -> Result<ReadGuard> {
        match self.rw.read_inner(false, self.opts).await? {
            Some(g) => Ok(g),
            None => unreachable!("read_inner(false) returns a guard or an error"),
        }
    }

    /// Take the read lock without waiting: `Ok(None)` when a writer holds or waits for it, or
    /// all reader slots are taken.
    ///
    /// # Errors
    /// Invalid input and backend errors.
    pub async fn try_acquire(self) -> Result<Option<ReadGuard>> {
        self.rw.read_inner(true, self.opts).await
    }
}

/// A write request being built: `rw.write().wait(..).acquire().await`.
#[derive(Debug)]
#[must_use = "a write request does nothing until acquired"]
pub struct WriteRequest<'a> {
    rw: &'a RwLock,
    opts: Opts,
}

impl WriteRequest<'_> {
    request_settings!();

    /// Take the write lock, waiting up to the request's wait (for the gate, then for the
    /// readers to leave).
    ///
    /// # Errors
    /// [`LockError::Timeout`] (naming the lock) at the deadline; invalid input; backend errors.
    pub async fn acquire(self) -> Result<WriteGuard> {
        match self.rw.write_inner(false, self.opts).await? {
            Some(g) => Ok(g),
            None => unreachable!("write_inner(false) returns a guard or an error"),
        }
    }

    /// Take the write lock without waiting: `Ok(None)` when anyone holds it.
    ///
    /// # Errors
    /// Invalid input and backend errors.
    pub async fn try_acquire(self) -> Result<Option<WriteGuard>> {
        self.rw.write_inner(true, self.opts).await
    }
}

/// A held read lock: one reader slot. Dropping it releases in the background.
///
/// Readers have no fencing token: they do not exclude each other, so no number could order
/// them, and a store cannot use a reader's token to refuse anything. Fence the writes with
/// [`WriteGuard::fence`].
#[derive(Debug)]
#[must_use = "dropping the guard releases the read lock in the background"]
pub struct ReadGuard {
    permit: Permit,
    _mark: HolderMark,
}

impl ReadGuard {
    /// The reader slot held.
    pub fn permit(&self) -> &Permit {
        &self.permit
    }

    /// Resolves when the read lock is known lost (its slot's lease).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.permit.lost()
    }

    /// Whether the read lock is known lost.
    pub fn is_lost(&self) -> bool {
        self.permit.is_lost()
    }

    /// Release the read lock.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] when its lease had been lost; backend errors.
    pub async fn release(self) -> Result<()> {
        self.permit.release().await
    }

    /// Forget the read lock without releasing it, as a crashed process would.
    pub fn abandon(self) {
        self.permit.abandon();
    }
}

/// A held write lock: the gate and every reader slot. Dropping it releases in the background.
#[derive(Debug)]
#[must_use = "dropping the guard releases the write lock in the background"]
pub struct WriteGuard {
    gate: LockGuard,
    slots: Vec<Permit>,
    _mark: HolderMark,
}

impl WriteGuard {
    /// The gate's fencing token: strictly greater than every earlier writer's (`None` without
    /// [`Capability::fencing`](crate::Capability)).
    pub fn fence(&self) -> Option<FencingToken> {
        self.gate.fence()
    }

    /// The gate's guard.
    pub fn gate(&self) -> &LockGuard {
        &self.gate
    }

    /// The reader slots held, by slot number.
    pub fn slots(&self) -> &[Permit] {
        &self.slots
    }

    fn tokens(&self) -> Vec<CancellationToken> {
        std::iter::once(self.gate.lost_token()).chain(self.slots.iter().map(Permit::lost_token)).collect()
    }

    /// Resolves when any part (the gate or a slot) is known lost: the writer may no longer
    /// exclude everyone.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let tokens = self.tokens();
        async move {
            select_all(tokens.into_iter().map(|t| Box::pin(t.cancelled_owned()))).await;
        }
    }

    /// Whether any part is known lost.
    pub fn is_lost(&self) -> bool {
        self.gate.is_lost() || self.slots.iter().any(Permit::is_lost)
    }

    /// Release the write lock: every part at once.
    ///
    /// # Errors
    /// The first error among the parts ([`LockError::LeaseLost`] when a part had been lost);
    /// every part is still released.
    pub async fn release(self) -> Result<()> {
        let slots = join_all(self.slots.into_iter().map(Permit::release));
        let (gate, slots) = tokio::join!(self.gate.release(), slots);
        std::iter::once(gate).chain(slots).collect::<Result<Vec<()>>>().map(drop)
    }

    /// Forget the write lock without releasing it, as a crashed process would.
    pub fn abandon(self) {
        self.gate.abandon();
        self.slots.into_iter().for_each(Permit::abandon);
    }
}
