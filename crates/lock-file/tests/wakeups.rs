//! Waiters sleep until a holder's lock file closes instead of polling: a waiter on a key held
//! for a second makes a handful of attempts (the first, the one after subscribing, the core's
//! fallback every 500 ms, the one the release wakes), where polling from 2 ms to 100 ms makes
//! more than a dozen.
//!
//! Run: `cargo test -p lock-file --test wakeups`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::backend::{
    AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RenewItem, Subscription,
};
use lock_core::{Locker, OwnerToken, Result, async_trait};
use lock_file::FileLock;

/// A `FileLock` that counts its acquisition attempts.
#[derive(Debug)]
struct Counting {
    inner: FileLock,
    attempts: AtomicUsize,
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
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(req).await
    }
    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.inner.release(key, owner).await
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.inner.renew(items).await
    }
    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        self.inner.inspect(key).await
    }
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        self.inner.subscribe(key).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter_without_polling() {
    let dir = tempfile::Builder::new().prefix("lock-file-wake-").tempdir().expect("temp dir");
    let holder = Locker::new(Arc::new(FileLock::new(dir.path()).expect("holder")));
    let waiting = Arc::new(Counting {
        inner: FileLock::new(dir.path()).expect("waiter"),
        attempts: AtomicUsize::new(0),
    });
    assert!(waiting.capabilities().notify, "Linux wakes file-lock waiters with inotify");
    let waiter = Locker::new(waiting.clone());
    let g = holder.try_lock("wake").await.expect("try").expect("free");
    let wait = tokio::spawn(async move { waiter.lock("wake").wait(Duration::from_secs(10)).acquire().await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    g.release().await.expect("release");
    let taken = wait.await.expect("waiter task").expect("the waiter takes the released lock");
    taken.release().await.expect("release");
    let attempts = waiting.attempts.load(Ordering::SeqCst);
    assert!(attempts <= 6, "{attempts} attempts in a one-second wait: the waiter polled");
}
