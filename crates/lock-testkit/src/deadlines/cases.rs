//! The rows of the deadline table: per operation, what it needs prepared while the store still
//! answers, then the cut and the timed call.

use std::fmt;
use std::time::Duration;

use lock_core::{CountDownLatch, LeaderElection, MultiLock, RwLock, Semaphore};

use super::{Case, WAIT};

fn answer<T, E: fmt::Debug>(r: Result<T, E>) -> Result<(), String> {
    r.map(|_| ()).map_err(|e| format!("{e:?}"))
}

macro_rules! case {
    ($op:literal, |$s:ident| $body:expr) => {
        Case { op: $op, run: |$s| Box::pin(async move { $body }) }
    };
}

/// Every operation of the deadline promise that a table can drive on any store.
pub const CASES: &[Case] = &[
    case!("Locker::try_lock", |s| {
        s.cut();
        (None, answer(s.locker.try_lock(&s.key).await))
    }),
    case!("Locker::with_lock", |s| {
        s.cut();
        (Some(WAIT), answer(s.locker.with_lock(&s.key, WAIT, |_| async {}).await))
    }),
    case!("LockRequest::acquire", |s| {
        s.cut();
        (Some(WAIT), answer(s.locker.lock(&s.key).wait(WAIT).acquire().await))
    }),
    case!("LockRequest::try_acquire", |s| {
        s.cut();
        (None, answer(s.locker.lock(&s.key).try_acquire().await))
    }),
    case!("LockRequest::run", |s| {
        s.cut();
        (Some(WAIT), answer(s.locker.lock(&s.key).wait(WAIT).run(|_| async {}).await))
    }),
    case!("LockGuard::release", |s| {
        let g = s.locker.try_lock(&s.key).await.expect("try").expect("free");
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("LockGuard::renew", |s| {
        let g = s.locker.try_lock(&s.key).await.expect("try").expect("free");
        s.cut();
        let r = answer(g.renew(Duration::from_secs(5)).await);
        g.abandon();
        (None, r)
    }),
    case!("MultiLock::acquire", |s| {
        let m =
            MultiLock::new().with(&s.locker, format!("{}-a", s.key)).with(&s.locker, format!("{}-b", s.key));
        s.cut();
        (Some(WAIT), answer(m.acquire(WAIT, None).await))
    }),
    case!("MultiGuard::release", |s| {
        let m =
            MultiLock::new().with(&s.locker, format!("{}-a", s.key)).with(&s.locker, format!("{}-b", s.key));
        let g = m.acquire(WAIT, None).await.expect("both free");
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("ReadRequest::acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (Some(WAIT), answer(rw.read().wait(WAIT).acquire().await))
    }),
    case!("ReadRequest::try_acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (None, answer(rw.read().try_acquire().await))
    }),
    case!("WriteRequest::acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (Some(WAIT), answer(rw.write().wait(WAIT).acquire().await))
    }),
    case!("WriteRequest::try_acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (None, answer(rw.write().try_acquire().await))
    }),
    case!("ReadGuard::release", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let g = rw.read().try_acquire().await.expect("try").expect("free");
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("WriteGuard::release", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let g = rw.write().try_acquire().await.expect("try").expect("free");
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("UpgradeableRequest::acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (Some(WAIT), answer(rw.upgradeable_read().wait(WAIT).acquire().await))
    }),
    case!("UpgradeableRequest::try_acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (None, answer(rw.upgradeable_read().try_acquire().await))
    }),
    case!("UpgradeableReadGuard::upgrade", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let Some(mut g) = rw.upgradeable_read().try_acquire().await.ok().flatten() else {
            return (None, Ok(())); // a store that cannot upgrade answers at once; nothing to time
        };
        s.cut();
        let r = answer(g.upgrade(WAIT).await);
        g.abandon();
        (Some(WAIT), r)
    }),
    case!("UpgradeableReadGuard::try_upgrade", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let Some(mut g) = rw.upgradeable_read().try_acquire().await.ok().flatten() else {
            return (None, Ok(()));
        };
        s.cut();
        let r = answer(g.try_upgrade().await);
        g.abandon();
        (None, r)
    }),
    case!("UpgradeableReadGuard::release", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let Some(g) = rw.upgradeable_read().try_acquire().await.ok().flatten() else {
            return (None, Ok(()));
        };
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("Semaphore::try_acquire", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.try_acquire().await))
    }),
    case!("Semaphore::available", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.available().await))
    }),
    case!("Semaphore::resize", |s| {
        let mut sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.resize(3).await))
    }),
    case!("Semaphore::stored_permits", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.stored_permits().await))
    }),
    case!("PermitRequest::acquire", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (Some(WAIT), answer(sem.acquire().wait(WAIT).acquire().await))
    }),
    case!("PermitRequest::try_acquire", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.acquire().try_acquire().await))
    }),
    case!("PermitRequest::acquire_many", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 3).expect("semaphore");
        s.cut();
        (Some(WAIT), answer(sem.acquire().wait(WAIT).acquire_many(2).await))
    }),
    case!("PermitRequest::try_acquire_many", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 3).expect("semaphore");
        s.cut();
        (None, answer(sem.acquire().try_acquire_many(2).await))
    }),
    case!("Permit::release", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        let p = sem.try_acquire().await.expect("try").expect("free");
        s.cut();
        (None, answer(p.release().await))
    }),
    case!("Permits::release", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 3).expect("semaphore");
        let p = sem.acquire().try_acquire_many(2).await.expect("try").expect("free");
        s.cut();
        (None, answer(p.release().await))
    }),
    case!("CountDownLatch::set_count", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        s.cut();
        (None, answer(latch.set_count(2).await))
    }),
    case!("CountDownLatch::count_down", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        latch.set_count(2).await.expect("set");
        s.cut();
        (None, answer(latch.count_down().await))
    }),
    case!("CountDownLatch::count", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        latch.set_count(2).await.expect("set");
        s.cut();
        (None, answer(latch.count().await))
    }),
    case!("CountDownLatch::wait", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        latch.set_count(2).await.expect("set");
        s.cut();
        (Some(WAIT), answer(latch.wait(WAIT).await))
    }),
    case!("CountDownLatch::delete", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        latch.set_count(2).await.expect("set");
        s.cut();
        (None, answer(latch.delete().await))
    }),
    case!("LeaderElection::leader", |s| {
        let e = LeaderElection::new(&s.locker, &s.key, "me").expect("election");
        s.cut();
        (None, answer(e.leader().await))
    }),
    case!("Candidate::resign", |s| {
        let e = LeaderElection::new(&s.locker, &s.key, "me").expect("election");
        let c = e.campaign().expect("campaign");
        c.until_leader().await.expect("the only candidate leads");
        s.cut();
        (None, answer(c.resign().await))
    }),
    case!("LockBackend::inspect", |s| {
        s.cut();
        (None, answer(s.locker.backend().inspect(&s.key).await))
    }),
    case!("LockBackend::list", |s| {
        s.cut();
        (None, answer(s.locker.backend().list(&s.key, 10).await))
    }),
    case!("LockBackend::evict", |s| {
        let g = s.locker.try_lock(&s.key).await.expect("try").expect("free");
        let fence = g.fence().unwrap_or(lock_core::FencingToken(1));
        s.cut();
        let r = answer(s.locker.backend().evict(&s.key, fence).await);
        g.abandon();
        (None, r)
    }),
];
