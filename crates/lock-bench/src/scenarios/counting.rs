//! A decorator over a target's backend that counts what reaches it: acquisition attempts
//! (`try_acquire` calls, so wake-ups show as attempts per acquisition), subscriptions (so the
//! attempts that follow a wake-up can be told from the first attempt and the one after
//! subscribing) and renewals (calls and items). It forwards everything else unchanged, on the same `dyn` path users take.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use dlock::backend::{AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RenewItem, Subscription};
use dlock::{DynBackend, FencingToken, OwnerToken};

/// Counts calls going to the backend it wraps.
#[derive(Debug)]
pub struct Counting {
    inner: DynBackend,
    attempts: AtomicU64,
    subscribes: AtomicU64,
    renew_calls: AtomicU64,
    renew_items: AtomicU64,
}

impl Counting {
    /// Wrap `inner`, every counter at zero.
    pub fn new(inner: DynBackend) -> Arc<Self> {
        Arc::new(Counting {
            inner,
            attempts: AtomicU64::new(0),
            subscribes: AtomicU64::new(0),
            renew_calls: AtomicU64::new(0),
            renew_items: AtomicU64::new(0),
        })
    }

    /// `try_acquire` calls so far.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// `subscribe` calls so far.
    pub fn subscribes(&self) -> u64 {
        self.subscribes.load(Ordering::Relaxed)
    }

    /// `renew` calls and the items they carried so far.
    pub fn renewals(&self) -> (u64, u64) {
        (self.renew_calls.load(Ordering::Relaxed), self.renew_items.load(Ordering::Relaxed))
    }
}

#[async_trait]
impl LockBackend for Counting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capability {
        self.inner.capabilities()
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> dlock::Result<Attempt> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        self.inner.try_acquire(req).await
    }
    async fn release(&self, key: &str, owner: OwnerToken) -> dlock::Result<bool> {
        self.inner.release(key, owner).await
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> dlock::Result<Vec<bool>> {
        self.renew_calls.fetch_add(1, Ordering::Relaxed);
        self.renew_items.fetch_add(items.len() as u64, Ordering::Relaxed);
        self.inner.renew(items).await
    }
    async fn inspect(&self, key: &str) -> dlock::Result<LockInfo> {
        self.inner.inspect(key).await
    }
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> dlock::Result<()> {
        self.inner.leave_queue(key, owner).await
    }
    async fn subscribe(&self, key: &str) -> dlock::Result<Option<Subscription>> {
        self.subscribes.fetch_add(1, Ordering::Relaxed);
        self.inner.subscribe(key).await
    }
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> dlock::Result<bool> {
        self.inner.set_note(key, owner, note).await
    }
    async fn note(&self, key: &str) -> dlock::Result<Option<String>> {
        self.inner.note(key).await
    }
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> dlock::Result<bool> {
        self.inner.raise_fence(key, owner, floor).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use dlock::{Locker, MemoryBackend};

    use super::Counting;

    #[tokio::test]
    async fn every_attempt_reaching_the_backend_is_counted_once() -> Result<(), Box<dyn std::error::Error>> {
        let counting = Counting::new(Arc::new(MemoryBackend::new()));
        let l = Locker::new(counting.clone());
        let lease = Duration::from_secs(10);
        let g = l.lock("k").lease(lease).try_acquire().await?.ok_or("a free key was held")?;
        assert_eq!(counting.attempts(), 1);
        // A second acquisition finds the key held: one more attempt, no grant.
        assert!(l.lock("k").lease(lease).try_acquire().await?.is_none());
        assert_eq!(counting.attempts(), 2);
        g.release().await?;
        assert_eq!(counting.renewals(), (0, 0));
        Ok(())
    }
}
