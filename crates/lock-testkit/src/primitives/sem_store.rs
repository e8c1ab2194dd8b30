//! Where the store keeps a semaphore: its stored count, checked against every handle's, and
//! its permits as holds of one pool key where the store keeps permits.

use lock_core::LockError;

use super::semaphore::sem;
use crate::factory::{Factory, key, skip};

/// The first handle to take a permit stores its count; a handle that disagrees is refused
/// with a typed error, and `resize` changes the count for everyone.
pub async fn sem_count_is_stored_and_checked<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_count");
    let three = sem(f, &name, 3).await;
    if three.locker().backend().records().is_none() {
        return skip(
            &f.label(),
            "sem_count_is_stored_and_checked",
            "backend keeps no records: the count is the handle's",
        );
    }
    three.try_acquire().await.expect("try").expect("free").release().await.expect("release");
    assert_eq!(three.stored_permits().await.expect("stored"), Some(3));
    match sem(f, &name, 5).await.try_acquire().await {
        Err(LockError::PermitsMismatch { name: n, stored: 3, asked: 5 }) => assert_eq!(n, name),
        other => panic!("a handle of 5 against a stored 3: {other:?}"),
    }
    let five = sem(f, &name, 5).await;
    assert!(matches!(five.acquire().try_acquire_many(2).await, Err(LockError::PermitsMismatch { .. })));
    let mut resized = sem(f, &name, 3).await;
    resized.resize(4).await.expect("resize");
    assert_eq!(resized.stored_permits().await.expect("stored"), Some(4));
    assert!(matches!(sem(f, &name, 3).await.try_acquire().await, Err(LockError::PermitsMismatch { .. })));
    sem(f, &name, 4).await.try_acquire().await.expect("try").expect("free").release().await.expect("release");
}

/// Where the store keeps permits ([`Semaphore::is_native`](lock_core::Semaphore::is_native)) every permit is a hold of the one
/// pool key, with its own slot and a fence above every earlier permit's (both listed by
/// `inspect`), and the slot keys stay untouched; elsewhere each permit holds its slot's key.
pub async fn sem_store_keeps_permits<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_pool");
    let s = sem(f, &name, 2).await;
    let caps = s.locker().backend().capabilities();
    assert_eq!(s.is_native(), caps.permits, "a native semaphore exactly where the store keeps permits");
    let p1 = s.try_acquire().await.expect("try").expect("free");
    let p2 = sem(f, &name, 2).await.try_acquire().await.expect("try").expect("free");
    assert_ne!(p1.slot(), p2.slot(), "two permits, two slots");
    if !s.is_native() {
        assert_eq!(p1.key(), s.slot_key(p1.slot()));
        p1.release().await.expect("release");
        return p2.release().await.expect("release");
    }
    assert_eq!((p1.key(), p2.key()), (s.pool_key().as_str(), s.pool_key().as_str()));
    if let (Some(a), Some(b)) = (p1.fence(), p2.fence()) {
        assert!(b > a, "a later permit's fence {b:?} is above {a:?}");
    }
    for slot in 0..2 {
        assert!(
            !s.locker().backend().inspect(&s.slot_key(slot)).await.expect("inspect").held,
            "slot key {slot}"
        );
    }
    assert_eq!(s.available().await.expect("available"), 0);
    // `inspect` of the pool names each permit: its slot and fence.
    let info = s.locker().backend().inspect(&s.pool_key()).await.expect("inspect");
    let listed: Vec<(u32, Option<lock_core::FencingToken>)> =
        info.permits.iter().map(|p| (p.slot, Some(p.fence))).collect();
    let mut held = vec![(p1.slot(), p1.fence()), (p2.slot(), p2.fence())];
    held.sort();
    if held.iter().all(|(_, f)| f.is_some()) {
        assert_eq!(listed, held, "the permits inspect lists");
    }
    let lowest = p1.slot().min(p2.slot());
    let (low, high) = if p1.slot() == lowest { (p1, p2) } else { (p2, p1) };
    let fence = high.fence();
    low.release().await.expect("release");
    let again = s.try_acquire().await.expect("try").expect("the freed permit");
    assert_eq!(again.slot(), lowest, "the lowest free slot");
    if let (Some(a), Some(b)) = (fence, again.fence()) {
        assert!(b > a, "a new permit's fence {b:?} is above every earlier one's ({a:?})");
    }
    again.release().await.expect("release");
    high.release().await.expect("release");
    assert_eq!(s.available().await.expect("available"), 2);
}
