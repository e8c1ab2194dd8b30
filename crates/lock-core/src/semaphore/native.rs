//! The semaphore kept by the store itself ([`Capability::permits`](crate::Capability)): one key,
//! the **pool** (`{name}#sp`), holding up to `permits` shared holds, each granted with its slot.
//! A permit costs one acquisition whichever permits are free, and a waiter is woken by every
//! release, instead of trying slot keys one by one and queueing on one of them.

use std::time::Duration;

use tokio::time::Instant;

use super::{Permit, Semaphore};
use crate::backend::Side;
use crate::parts::release_quietly;
use crate::{LockError, LockGuard, LockRequest, Result};

/// Suffix of the pool key after the slot prefix: `{name}#s` + `p`. Slot keys end in digits, so
/// it names no slot.
pub(super) const POOL_SUFFIX: &str = "p";

impl Semaphore {
    /// The key of the permits kept by the store (`{name}#sp`), used when
    /// [`is_native`](Self::is_native).
    pub fn pool_key(&self) -> String {
        format!("{}{POOL_SUFFIX}", self.prefix)
    }

    fn pool_request(&self, lease: Option<Duration>) -> LockRequest<'_> {
        let req = self.locker.lock(self.pool_key()).side(Side::Permit { of: self.permits });
        match lease {
            Some(l) => req.lease(l),
            None => req,
        }
    }

    /// A permit from the pool: one attempt sent together with the count check, then (unless
    /// `once`) a wait until `deadline`.
    pub(super) async fn take_pooled(
        &self,
        once: bool,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<Permit>> {
        let started = Instant::now();
        // A handle whose count is checked and that may wait goes straight to the waiting
        // request, whose first attempt is the same try: a try of its own first, refused, costs
        // a queue entry for nothing on a store that queues (ZooKeeper's gate: a create and a
        // delete, on a server whose writes bound the rate).
        if once || !self.count_known() {
            if let Some(guard) = self.checked_attempt(self.pool_request(lease), once, deadline).await? {
                return permit(guard).await.map(Some);
            }
            if once {
                return Ok(None);
            }
        }
        let mut req = self.pool_request(lease);
        if let Some(d) = deadline {
            req = req.wait(d.saturating_duration_since(Instant::now()));
        }
        match req.acquire().await {
            Ok(guard) => permit(guard).await.map(Some),
            Err(LockError::Timeout { .. }) => {
                Err(LockError::Timeout { key: self.name.to_string(), waited: started.elapsed() })
            }
            Err(e) => Err(e),
        }
    }

    /// Single attempts on the pool until `got` has `n` permits or one is refused.
    pub(super) async fn gather_pooled(
        &self,
        got: &mut Vec<Permit>,
        n: u32,
        lease: Option<Duration>,
    ) -> Result<()> {
        while got.len() < n as usize {
            match self.pool_request(lease).try_acquire().await? {
                Some(guard) => got.push(permit(guard).await?),
                None => break,
            }
        }
        Ok(())
    }

    /// Free permits of the pool: the count less the holds the store reports.
    pub(super) async fn available_pooled(&self) -> Result<u32> {
        let info = self.locker.backend().inspect(&self.pool_key()).await?;
        let held = u32::try_from(info.readers.unwrap_or(0)).unwrap_or(u32::MAX);
        Ok(self.permits.saturating_sub(held))
    }
}

/// The permit of a pool grant, which names its slot; a grant without one breaks the
/// backend's contract and is given back.
async fn permit(guard: LockGuard) -> Result<Permit> {
    match guard.slot() {
        Some(slot) => Ok(Permit { slot, guard }),
        None => {
            let backend = guard.backend_name();
            release_quietly("a permit granted without its slot", guard.release()).await;
            Err(LockError::Unsupported { backend, what: "permits that name their slot" })
        }
    }
}
