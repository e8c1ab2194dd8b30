//! The trait every store implements: the required calls, and the optional capabilities it
//! hands out.

use std::fmt;

use async_trait::async_trait;

use super::optional::{Admin, Notes, Notify, RaiseFence, Records, WaitQueue};
use super::{AcquireRequest, Attempt, Capability, LockInfo, RenewItem};
use crate::{OwnerToken, Result};

/// A lock store. Object-safe: use it as `Arc<dyn LockBackend>`.
///
/// Keys reach the backend validated by [`validate_key`](crate::validate_key); the backend must
/// carry any such key exactly (escape it, bind it, hash it), never interpret it.
/// Waiting, retries, guards, the watchdog and the lost signal live in the core, not here.
///
/// Seven calls are required. What a store can do beyond them is an optional capability the
/// backend hands out as a trait object ([`notify`](Self::notify), [`queue`](Self::queue),
/// [`notes`](Self::notes), [`fences`](Self::fences), [`records`](Self::records),
/// [`admin`](Self::admin)); `None`, the default, is a store without it. A wrapper backend
/// forwards the accessors and gets every capability's calls with them.
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug + 'static {
    /// Short name for errors and logs, such as `"redis"`.
    fn name(&self) -> &'static str;

    /// How this backend's holds behave.
    fn capabilities(&self) -> Capability;

    /// The lock space this backend locks in, computed the same way by every process that
    /// shares it (scheme, sorted endpoints, database or prefix; never credentials), such as
    /// `redis://127.0.0.1:6379/0?prefix=dlock:`. [`MultiLock`](crate::MultiLock) orders keys by
    /// (key, identity), so two processes taking the same keys never wait on each other in a
    /// cycle.
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
    /// [`LockError::Unsupported`](crate::LockError::Unsupported) (see
    /// [`unsupported`](super::unsupported)) when the backend cannot tell without taking the
    /// lock; backend failures.
    async fn inspect(&self, key: &str) -> Result<LockInfo>;

    /// Release notifications, so that waiters do not poll.
    fn notify(&self) -> Option<&dyn Notify> {
        None
    }

    /// A server-side queue of waiters that keeps each one's place between attempts.
    fn queue(&self) -> Option<&dyn WaitQueue> {
        None
    }

    /// Short public notes on a hold (a leader's identity).
    fn notes(&self) -> Option<&dyn Notes> {
        None
    }

    /// Raising a key's fence counter while holding it (what a quorum needs).
    fn fences(&self) -> Option<&dyn RaiseFence> {
        None
    }

    /// Records kept under a key outside any lock (a semaphore's count, a latch).
    fn records(&self) -> Option<&dyn Records> {
        None
    }

    /// An operator's calls: listing the locks held, and taking one from its holder.
    fn admin(&self) -> Option<&dyn Admin> {
        None
    }
}
