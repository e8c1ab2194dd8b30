//! Testing code that uses locks (`docs/TESTING.md` is the guide): a locker over a fresh
//! in-process table, [`take_away`], which takes a lock from its holder on any store that can
//! evict, so a test can check what the caller does when its lock is lost, and
//! [`FaultyBackend`], which makes any store's calls fail, stall or answer late and makes it
//! forget a hold, on demand (see [Faults on any store](#faults-on-any-store)).
//!
//! The in-process backend keeps time with tokio's clock, so under paused time
//! (`#[tokio::test(start_paused = true)]`) leases, renewals and waits run in virtual time: a
//! test of a 30 s lease takes microseconds.
//!
//! ```
//! use std::time::Duration;
//!
//! use dlock::{LockGuard, Locker};
//!
//! /// The code under test: writes until done, or stops as soon as its lock is lost.
//! async fn publish(locker: &Locker) -> Result<&'static str, dlock::LockError> {
//!     let guard: LockGuard = locker.lock("report").wait(Duration::from_secs(5)).acquire().await?;
//!     tokio::select! {
//!         _ = guard.lost() => Ok("stopped: lock lost"),
//!         _ = tokio::time::sleep(Duration::from_secs(60)) => {
//!             guard.release().await?;
//!             Ok("published")
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), dlock::LockError> {
//! // In a test: `#[tokio::test(start_paused = true)]`.
//! let (locker, _table) = dlock::testing::memory_locker();
//! let work = tokio::spawn({
//!     let locker = locker.clone();
//!     async move { publish(&locker).await }
//! });
//! // Once the code holds the lock, an operator (or a failing store) takes it away.
//! while !dlock::testing::take_away(locker.backend().as_ref(), "report").await? {
//!     tokio::task::yield_now().await;
//! }
//! // The watchdog's next renewal (a third of the 30 s lease, in virtual time) is refused.
//! assert_eq!(work.await.expect("task")?, "stopped: lock lost");
//! # Ok(())
//! # }
//! ```
//!
//! # Faults on any store
//!
//! [`FaultyBackend::wrap`] puts a backend (the in-process one, or the real store a test runs
//! against) behind a wrapper that changes nothing until a fault is armed on its [`Faults`]
//! handle: [`fail_next`](Faults::fail_next), [`fail_all`](Faults::fail_all) and
//! [`outage`](Faults::outage) answer temporary errors without reaching the store (and
//! [`fail_with`](Faults::fail_with) the error of the test's choosing, such as a refused
//! permission),
//! [`lose_answers`](Faults::lose_answers) applies the request and loses its answer,
//! [`stall`](Faults::stall), [`stall_forever`](Faults::stall_forever) and
//! [`latency`](Faults::latency) delay calls, [`lose`](Faults::lose) makes the store forget a
//! hold (the holder's next renewal is refused, so its `lost()` fires, and the key is free for
//! others; [`lose_all`](Faults::lose_all) forgets every hold, a semaphore's and a read-write
//! lock's parts included), and [`heal`](Faults::heal) clears them all. [`until_held`](Faults::until_held)
//! waits for the code under test to hold a key, so a test needs no sleeps.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//!
//! use dlock::testing::{FaultyBackend, Op};
//! use dlock::{Locker, MemoryBackend};
//!
//! /// The code under test: gives up on a store that does not answer within 2 s, and stops its
//! /// work as soon as its lock is lost.
//! async fn run_job(locker: &Locker) -> &'static str {
//!     let acquire = locker.lock("job").wait(Duration::from_secs(5)).acquire();
//!     let guard = match tokio::time::timeout(Duration::from_secs(2), acquire).await {
//!         Err(_) => return "gave up: store not answering",
//!         Ok(Err(_)) => return "gave up: no lock",
//!         Ok(Ok(guard)) => guard,
//!     };
//!     tokio::select! {
//!         _ = guard.lost() => "stopped: lock lost",
//!         _ = tokio::time::sleep(Duration::from_secs(60)) => "done",
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), dlock::LockError> {
//! // In a test: `#[tokio::test(start_paused = true)]`.
//! let (backend, faults) = FaultyBackend::wrap(Arc::new(MemoryBackend::new()));
//! let locker = Locker::new(Arc::new(backend));
//!
//! // The store hangs: the code's own timeout ends the wait.
//! faults.stall_forever(Op::TryAcquire);
//! assert_eq!(run_job(&locker).await, "gave up: store not answering");
//! faults.heal();
//!
//! // The store forgets the hold while the job runs: the code stops at the next renewal.
//! let job = tokio::spawn({
//!     let locker = locker.clone();
//!     async move { run_job(&locker).await }
//! });
//! faults.until_held("job").await;
//! assert_eq!(faults.lose("job").await?, 1);
//! assert_eq!(job.await.expect("task"), "stopped: lock lost");
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use lock_core::backend::LockBackend;
pub use lock_core::faults::{Faults, FaultyBackend, Op};
use lock_core::{Locker, MemoryBackend, Result};

/// A locker over a fresh in-process table of its own, and that table (whose
/// [`sever`](MemoryBackend::sever) deletes a lock behind its holder).
pub fn memory_locker() -> (Locker, MemoryBackend) {
    let table = MemoryBackend::new();
    (Locker::new(Arc::new(table.clone())), table)
}

/// Takes `key` from whoever holds it exclusively: the hold [`inspect`](LockBackend::inspect)
/// shows is evicted ([`Admin::evict`](lock_core::backend::Admin::evict)), so its holder's next renewal is refused and its
/// lost signal fires, and the next holder's fencing token is larger. `Ok(false)` when `key` is
/// free, held by readers or permits, or changed hands meanwhile.
///
/// # Errors
/// [`LockError::Unsupported`](crate::LockError) on stores that cannot evict (`GET_LOCK` and
/// pessimistic MySQL, lock files, Redlock; `dlock unlock --help` lists them), and backend
/// failures.
pub async fn take_away(backend: &dyn LockBackend, key: &str) -> Result<bool> {
    let info = backend.inspect(key).await?;
    match info.fence {
        Some(fence) if info.held && info.readers.is_none() => backend.evict(key, fence).await,
        _ => Ok(false),
    }
}
