//! Locks for code without an async runtime: the same locks, guards, fencing tokens and lost
//! signal as [`Locker`], driven by a small runtime of their own.
//!
//! The runtime has one worker thread, which keeps renewing leases (the watchdog) and watching
//! sessions while the calling thread works. Calls block the calling thread; do not call them
//! from inside an async task (use [`Locker`] there).
//!
//! ```
//! use std::time::Duration;
//! let locker = dlock::blocking::BlockingLocker::connect("memory://blocking-doc")?;
//! let guard = locker.lock("report/daily").wait(Duration::from_secs(1)).acquire()?;
//! println!("fencing token {:?}", guard.fence());
//! assert!(!guard.is_lost());
//! guard.release()?;
//! # Ok::<(), dlock::LockError>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::{Builder, Runtime};

use crate::{FencingToken, LeaseState, LockError, LockGuard, Locker, OwnerToken, Result};

/// A [`Locker`] for plain threads. Cheap to clone; clones share the runtime and the watchdog.
#[derive(Clone)]
pub struct BlockingLocker {
    locker: Locker,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for BlockingLocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingLocker").field("locker", &self.locker).finish_non_exhaustive()
    }
}

fn runtime() -> Result<Runtime> {
    Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("dlock-blocking")
        .enable_all()
        .build()
        .map_err(|e| LockError::InvalidConfig { reason: format!("cannot start the lock runtime: {e}") })
}

impl BlockingLocker {
    /// Connects to the backend `url` names (see [`from_url`](crate::from_url)) on a new runtime.
    ///
    /// # Errors
    /// As [`from_url`](crate::from_url); [`LockError::InvalidConfig`] when no runtime can start.
    pub fn connect(url: &str) -> Result<Self> {
        let runtime = runtime()?;
        let backend = runtime.block_on(crate::from_url(url))?;
        Ok(BlockingLocker { locker: Locker::new(backend), runtime: Arc::new(runtime) })
    }

    /// Wraps a configured `Locker`, built with `make` on the new runtime (backends connect and
    /// spawn their tasks there): `BlockingLocker::new(|| async { Ok(Locker::new(backend)) })`.
    ///
    /// # Errors
    /// What `make` returns; [`LockError::InvalidConfig`] when no runtime can start.
    pub fn new<F, Fut>(make: F) -> Result<Self>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Locker>>,
    {
        let runtime = runtime()?;
        let locker = runtime.block_on(make())?;
        Ok(BlockingLocker { locker, runtime: Arc::new(runtime) })
    }

    /// The async locker underneath (its futures must run on [`runtime`](Self::runtime)).
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

    /// The runtime the locks run on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Start building a request for `key`.
    pub fn lock(&self, key: impl Into<String>) -> BlockingRequest<'_> {
        BlockingRequest { locker: self, request: self.locker.lock(key) }
    }

    /// One attempt with the watchdog lease: `Ok(None)` when someone else holds `key`.
    ///
    /// # Errors
    /// As [`Locker::try_lock`].
    pub fn try_lock(&self, key: impl Into<String>) -> Result<Option<BlockingGuard>> {
        self.lock(key).try_acquire()
    }

    /// Waits up to `wait` for `key`, runs `work` while holding it, then releases. `work` gets
    /// the guard, to read its fencing token or check [`is_lost`](BlockingGuard::is_lost).
    ///
    /// # Errors
    /// As [`Locker::with_lock`]: [`LockError::LeaseLost`] when the lease was lost meanwhile.
    pub fn with_lock<T>(
        &self,
        key: impl Into<String>,
        wait: Duration,
        work: impl FnOnce(&BlockingGuard) -> T,
    ) -> Result<T> {
        let guard = self.lock(key).wait(wait).acquire()?;
        let out = work(&guard);
        guard.release()?;
        Ok(out)
    }

    fn wrap(&self, guard: LockGuard) -> BlockingGuard {
        BlockingGuard { guard: Some(guard), runtime: self.runtime.clone() }
    }
}

/// A request being built: `locker.lock("k").wait(..).acquire()`. The async
/// [`LockRequest`](crate::LockRequest) underneath holds the settings; this only blocks on it.
#[derive(Debug)]
#[must_use = "a lock request does nothing until acquired"]
pub struct BlockingRequest<'a> {
    locker: &'a BlockingLocker,
    request: crate::LockRequest<'a>,
}

impl BlockingRequest<'_> {
    /// A fixed lease without the watchdog (see [`LockRequest::lease`](crate::LockRequest::lease)).
    pub fn lease(self, lease: Duration) -> Self {
        BlockingRequest { request: self.request.lease(lease), ..self }
    }

    /// Wait at most `wait` in [`acquire`](Self::acquire).
    pub fn wait(self, wait: Duration) -> Self {
        BlockingRequest { request: self.request.wait(wait), ..self }
    }

    /// Acquire as `owner` (a nested acquisition on a reentrant backend).
    pub fn owner(self, owner: OwnerToken) -> Self {
        BlockingRequest { request: self.request.owner(owner), ..self }
    }

    /// Stop the watchdog after `max_hold` (see [`LockRequest::max_hold`](crate::LockRequest::max_hold)).
    pub fn max_hold(self, max_hold: Duration) -> Self {
        BlockingRequest { request: self.request.max_hold(max_hold), ..self }
    }

    /// One attempt: `Ok(None)` if someone else holds the key.
    ///
    /// # Errors
    /// As [`LockRequest::try_acquire`](crate::LockRequest::try_acquire).
    pub fn try_acquire(self) -> Result<Option<BlockingGuard>> {
        let got = self.locker.runtime.block_on(self.request.try_acquire())?;
        Ok(got.map(|g| self.locker.wrap(g)))
    }

    /// Acquire, blocking up to the request's wait.
    ///
    /// # Errors
    /// As [`LockRequest::acquire`](crate::LockRequest::acquire).
    pub fn acquire(self) -> Result<BlockingGuard> {
        let guard = self.locker.runtime.block_on(self.request.acquire())?;
        Ok(self.locker.wrap(guard))
    }
}

/// A held lock. [`release`](Self::release) it; dropping it releases it too, blocking the
/// dropping thread until the backend answered (or, inside an async context, in the background).
#[must_use = "dropping the guard releases the lock"]
pub struct BlockingGuard {
    guard: Option<LockGuard>,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for BlockingGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BlockingGuard").field(&self.guard).finish()
    }
}

impl BlockingGuard {
    fn inner(&self) -> &LockGuard {
        // Taken only by `release(self)` and `drop`.
        self.guard.as_ref().unwrap_or_else(|| unreachable!("guard used after release"))
    }

    /// The async guard underneath.
    pub fn as_async(&self) -> &LockGuard {
        self.inner()
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        self.inner().key()
    }

    /// The owner token (for a nested acquisition).
    pub fn owner(&self) -> OwnerToken {
        self.inner().owner()
    }

    /// The fencing token (see [`LockGuard::fence`]).
    pub fn fence(&self) -> Option<FencingToken> {
        self.inner().fence()
    }

    /// Whether the lease is known lost: check it between steps of the protected work.
    pub fn is_lost(&self) -> bool {
        self.inner().is_lost()
    }

    /// Held, uncertain or lost.
    pub fn state(&self) -> LeaseState {
        self.inner().state()
    }

    /// Blocks until the lease is lost or `timeout` passes; true if lost. A watcher thread can
    /// sit here and stop the work when it returns true.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let lost = self.inner().lost();
        self.runtime.block_on(async { tokio::time::timeout(timeout, lost).await.is_ok() })
    }

    /// Extends the lease to `lease` from now.
    ///
    /// # Errors
    /// As [`LockGuard::renew`].
    pub fn renew(&self, lease: Duration) -> Result<()> {
        self.runtime.block_on(self.inner().renew(lease))
    }

    /// Releases the lock.
    ///
    /// # Errors
    /// As [`LockGuard::release`]: [`LockError::LeaseLost`] if the lease had been lost.
    pub fn release(mut self) -> Result<()> {
        match self.guard.take() {
            Some(g) => self.runtime.block_on(g.release()),
            None => Ok(()),
        }
    }
}

impl Drop for BlockingGuard {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else { return };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Blocking here would stall (or panic in) the caller's runtime: the async guard's
            // drop releases in the background instead.
            drop(guard);
            return;
        }
        if let Err(e) = self.runtime.block_on(guard.release()) {
            tracing::debug!(error = %e, "release of a dropped blocking guard failed; the lease frees it");
        }
    }
}
