use super::*;
use crate::LockBackend;
use crate::MemoryBackend;
use crate::backend::{Notes, Notify, RaiseFence, WaitQueue};

fn locker() -> Locker {
    Locker::new(Arc::new(MemoryBackend::new()))
}

#[test]
fn public_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<LeaderElection>();
    check::<Candidate>();
    check::<Leadership>();
}

#[test]
fn bad_input_is_typed() {
    let l = locker();
    assert!(matches!(LeaderElection::new(&l, "", "a"), Err(LockError::InvalidKey { .. })));
    assert!(matches!(LeaderElection::new(&l, "e", "a\nb"), Err(LockError::InvalidConfig { .. })));
    let long = "x".repeat(crate::backend::MAX_NOTE_BYTES + 1);
    assert!(matches!(LeaderElection::new(&l, "e", long), Err(LockError::InvalidConfig { .. })));
    let e = LeaderElection::new(&l, "e", "a").expect("valid");
    assert!(matches!(e.clone().lease(Duration::ZERO), Err(LockError::InvalidLease { .. })));
    assert!(matches!(e.campaign(), Err(LockError::InvalidConfig { .. })), "no runtime");
}

/// A memory backend whose acquisitions fail with a permanent error while `refuse` is set.
#[derive(Debug)]
struct Refusing {
    inner: MemoryBackend,
    refuse: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl LockBackend for Refusing {
    fn name(&self) -> &'static str {
        "refusing"
    }
    fn capabilities(&self) -> crate::Capability {
        self.inner.capabilities()
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    async fn try_acquire(&self, req: &crate::backend::AcquireRequest<'_>) -> Result<crate::backend::Attempt> {
        if self.refuse.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(LockError::permission_denied("refusing", "no grants today"));
        }
        self.inner.try_acquire(req).await
    }
    async fn release(&self, key: &str, owner: crate::OwnerToken) -> Result<bool> {
        self.inner.release(key, owner).await
    }
    async fn renew(&self, items: &[crate::backend::RenewItem<'_>]) -> Result<Vec<bool>> {
        self.inner.renew(items).await
    }
    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        self.inner.inspect(key).await
    }

    fn notify(&self) -> Option<&dyn Notify> {
        self.inner.notify()
    }

    fn queue(&self) -> Option<&dyn WaitQueue> {
        self.inner.queue()
    }

    fn notes(&self) -> Option<&dyn Notes> {
        self.inner.notes()
    }

    fn fences(&self) -> Option<&dyn RaiseFence> {
        self.inner.fences()
    }
}

#[tokio::test]
async fn campaign_errors_are_kept_and_retried() {
    let backend = Arc::new(Refusing { inner: MemoryBackend::new(), refuse: true.into() });
    let l = Locker::new(backend.clone());
    let c = LeaderElection::new(&l, "e", "a").expect("a").campaign().expect("a");
    let mut changes = c.changes();
    while c.last_error().is_none() {
        tokio::task::yield_now().await;
    }
    let e = c.last_error().expect("kept");
    assert!(matches!(*e, LockError::PermissionDenied { .. }), "{e:?}");
    assert!(!c.is_leader() && *changes.borrow_and_update() == Leadership::Follower);
    backend.refuse.store(false, std::sync::atomic::Ordering::SeqCst);
    c.until_leader().await;
    assert!(c.last_error().is_none(), "cleared by a term");
}

#[tokio::test]
async fn dropping_the_leader_hands_over() {
    let l = locker();
    let a = LeaderElection::new(&l, "e", "a").expect("a").campaign().expect("a");
    let ta = a.until_leader().await.expect("fenced");
    let b = LeaderElection::new(&l, "e", "b").expect("b").campaign().expect("b");
    drop(a);
    let tb = b.until_leader().await.expect("fenced");
    assert!(tb > ta);
    assert_eq!(b.election().leader().await.expect("note").as_deref(), Some("b"));
    b.resign().await.expect("resign");
    assert_eq!(b.election().leader().await.expect("note"), None);
    b.rejoin();
    assert!(b.until_leader().await.expect("fenced") > tb);
}
