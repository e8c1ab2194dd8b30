//! The semaphore cases of several permits in one request (`acquire_many`, `try_acquire_many`).

use std::time::Duration;

use lock_core::LockError;

use super::semaphore::sem;
use crate::factory::{Factory, key, skip};
use crate::poll::{outlasting_its_lease, within};

/// `n` permits in one request, all or none: a single pass that finds too few free holds none
/// afterwards, a granted request holds `n` distinct slots, a waiting one gets them once enough
/// are released, and `n` of 0 or above the permits is refused.
pub async fn sem_many_all_or_none<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_many");
    let (a, b) = (sem(f, &name, 3).await, sem(f, &name, 3).await);
    let one = a.try_acquire().await.expect("try").expect("free");
    assert!(b.acquire().try_acquire_many(3).await.expect("try").is_none(), "3 of 3 while one is held");
    let two =
        b.acquire().try_acquire_many(2).await.expect("try").expect("the failed pass gave its permits back");
    let mut slots: Vec<u32> = two.permits().iter().map(|p| p.slot()).collect();
    slots.push(one.slot());
    slots.sort();
    assert_eq!(slots, [0, 1, 2], "distinct slots");
    let waiter = tokio::spawn(async move {
        let c = b;
        let p = c.acquire().wait(Duration::from_secs(10)).acquire_many(3).await;
        (c, p)
    });
    two.release().await.expect("release");
    one.release().await.expect("release");
    let (c, all) = within(Duration::from_secs(15), "acquire_many(3)", waiter).await.expect("task");
    let all = all.expect("3 permits once released");
    assert_eq!(all.len(), 3);
    assert!(a.try_acquire().await.expect("try").is_none(), "every permit is held");
    all.release().await.expect("release");
    for n in [0, 4] {
        let e = c.acquire().try_acquire_many(n).await.expect_err("bad count");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{n}: {e:?}");
    }
}

/// Two requests of 3 permits out of 4, waiting at once while 2 are held elsewhere: without the
/// many gate each could gather 2 and wait for the other forever. Both are granted in turn.
pub async fn sem_many_waiters_do_not_deadlock<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_many_dl");
    let holder = sem(f, &name, 4).await;
    let held = holder.acquire().try_acquire_many(2).await.expect("try").expect("free");
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let s = sem(f, &name, 4).await;
        tasks.push(tokio::spawn(async move {
            let p = s.acquire().wait(Duration::from_secs(20)).acquire_many(3).await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            p.release().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // give both the chance to gather, if they could
    held.release().await.expect("release");
    for t in tasks {
        within(Duration::from_secs(30), "a multi-permit request", t)
            .await
            .expect("task")
            .expect("both requests are granted in turn");
    }
}

/// A waiting request for several permits with a fixed lease holds what it gathered while it
/// waits for the rest; a gathered permit whose lease runs out meanwhile is lost, and may even
/// be taken again by the same request. The request is granted only live permits on distinct
/// slots. Found by the generative checker on MySQL's optimistic mode: the request returned a
/// lost permit next to a fresh one on the same slot, 5 holders of 3 permits.
pub async fn sem_many_grants_only_live_permits<F: Factory + ?Sized>(f: &F) {
    let case = "sem_many_grants_only_live_permits";
    let name = key("sem_many_live");
    let (a, b) = (sem(f, &name, 2).await, sem(f, &name, 2).await);
    let held = a.try_acquire().await.expect("try").expect("free");
    match a.available().await {
        Ok(n) => assert_eq!(n, 1, "one of two permits held"),
        Err(e @ LockError::Unsupported { .. }) => return skip(&f.label(), case, e),
        Err(e) => panic!("available: {e}"),
    }
    // The store's short lease: on NATS a lost hold's key stays for the bucket's TTL, and a
    // shorter fixed lease would run out again while the request waits that long.
    let lease = f.lease();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.acquire().lease(lease).wait(Duration::from_secs(15)).acquire_many(2).await }
    });
    let gathered = || async { b.available().await.expect("available") == 0 };
    let got = outlasting_its_lease("acquire_many(2)", lease, waiter, gathered, held.release()).await;
    let mut slots: Vec<u32> = got.permits().iter().map(|p| p.slot()).collect();
    slots.dedup();
    assert_eq!(slots.len(), 2, "two distinct slots: {:?}", got.permits());
    assert!(!got.is_lost(), "granted a permit already lost: {:?}", got.permits());
    let e = got.release().await;
    assert!(e.is_ok(), "releasing live permits: {e:?}");
}
