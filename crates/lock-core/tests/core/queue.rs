//! The core's waiting for backends with a server-side queue of waiters (`LockBackend::queue`):
//! every attempt of one acquisition carries `wait_until` and the same owner, and the waiter
//! leaves the queue exactly when it gives up, also when its future is dropped. Paused time:
//! what matters here is the order of calls, not real durations.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, Capability, LockInfo, RenewItem};
use lock_core::backend::{Notify, WaitQueue};
use lock_core::{LockBackend, LockError, Locker, MemoryBackend, OwnerToken, Result, async_trait};

/// The memory backend, pretending to keep a queue: records what the core asks of it.
#[derive(Debug, Default)]
struct Queued {
    inner: MemoryBackend,
    /// (owner, wait_until given) per attempt.
    attempts: Mutex<Vec<(OwnerToken, bool)>>,
    left: Mutex<Vec<(String, OwnerToken)>>,
}

#[async_trait]
impl LockBackend for Queued {
    fn name(&self) -> &'static str {
        "queued"
    }
    fn capabilities(&self) -> Capability {
        let mut c = self.inner.capabilities();
        c.native_wait = false;
        c
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.attempts.lock().expect("attempts").push((req.owner, req.wait_until.is_some()));
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

    fn notify(&self) -> Option<&dyn Notify> {
        self.inner.notify()
    }

    lock_core::backend::hand_out!(queue);
}

#[async_trait]
impl WaitQueue for Queued {
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        self.left.lock().expect("left").push((key.to_owned(), owner));
        Ok(())
    }
}

fn setup() -> (Arc<Queued>, Locker) {
    let b = Arc::new(Queued::default());
    (b.clone(), Locker::new(b))
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_waiter_leaves_the_queue_once_with_its_own_owner() {
    let (b, l) = setup();
    let holder = l.lock("k").lease(Duration::from_secs(60)).try_acquire().await.expect("try").expect("free");
    b.attempts.lock().expect("attempts").clear();
    let err = l.lock("k").wait(Duration::from_secs(2)).acquire().await.expect_err("held");
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    let attempts = b.attempts.lock().expect("attempts").clone();
    assert!(attempts.len() >= 2, "the waiter came back before the deadline: {attempts:?}");
    assert!(attempts.iter().all(|(o, w)| *o == attempts[0].0 && *w), "one owner, every attempt queued");
    assert_eq!(*b.left.lock().expect("left"), vec![("k".to_owned(), attempts[0].0)]);
    holder.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_granted_waiter_does_not_leave_and_a_one_shot_attempt_does_not_queue() {
    let (b, l) = setup();
    let holder = l.lock("k").lease(Duration::from_secs(60)).try_acquire().await.expect("try").expect("free");
    assert!(l.try_lock("k").await.expect("try").is_none());
    assert!(b.attempts.lock().expect("attempts").iter().all(|(_, w)| !w), "try_acquire never queues");
    let waiter = tokio::spawn({
        let l = l.clone();
        async move { l.lock("k").wait(Duration::from_secs(30)).acquire().await }
    });
    while b.attempts.lock().expect("attempts").len() < 3 {
        tokio::task::yield_now().await;
    }
    holder.release().await.expect("release");
    let g = waiter.await.expect("task").expect("granted after the release");
    assert!(b.left.lock().expect("left").is_empty(), "a granted waiter has no place to leave");
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_leaves_the_queue_in_the_background() {
    let (b, l) = setup();
    let _holder = l.lock("k").lease(Duration::from_secs(60)).try_acquire().await.expect("try").expect("free");
    let waiter = tokio::spawn({
        let l = l.clone();
        async move { l.lock("k").acquire().await }
    });
    while b.attempts.lock().expect("attempts").len() < 3 {
        tokio::task::yield_now().await;
    }
    waiter.abort();
    assert!(waiter.await.expect_err("aborted").is_cancelled());
    for _ in 0..100 {
        if !b.left.lock().expect("left").is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(b.left.lock().expect("left").len(), 1, "the dropped waiter's place was left");
}
