//! The semaphore cases that count the backend calls of an acquisition (a hooked backend).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Locker, Semaphore};

use crate::factory::{Factory, key, skip};
use crate::hooked::{counting, hooked};
use crate::poll::{eventually, within};
use lock_core::faults::Op;

/// A waiting acquisition on a native semaphore whose handle checked its count is one waiting
/// request: at most three backend attempts from the call to the grant after a release (where
/// waking is by notification: the refused one, the one right after subscribing, the one after
/// the wake-up; one where the server queues), not a refused try of its own before them (on a
/// queueing store, a queue entry for nothing).
pub async fn sem_waiter_sends_no_try_of_its_own<F: Factory + ?Sized>(f: &F) {
    let case = "sem_waiter_sends_no_try_of_its_own";
    let (hooked, tries) = counting(f.client().await.backend.clone(), Op::TryAcquire);
    let s = Semaphore::new(&Locker::new(Arc::new(hooked)), key("sem_direct"), 1).expect("semaphore");
    if !s.is_native() {
        return skip(
            &f.label(),
            case,
            "slot keys: a waiter tries a random slot, then the others it finds free",
        );
    }
    let held = s.try_acquire().await.expect("try").expect("free: the handle's count is checked");
    tries.store(0, Ordering::SeqCst);
    let waiter = s.clone();
    let waiting = tokio::spawn(async move { waiter.acquire().wait(Duration::from_secs(10)).acquire().await });
    eventually(Duration::from_secs(5), "the waiter's first attempt", || async {
        tries.load(Ordering::SeqCst) >= 1
    })
    .await;
    held.release().await.expect("release");
    let p = within(Duration::from_secs(5), "the waiter after the release", waiting)
        .await
        .expect("task")
        .expect("granted");
    let sent = tries.load(Ordering::SeqCst);
    assert!(sent <= 3, "{sent} backend attempts for one waited permit");
    p.release().await.expect("release");
}

/// On slot keys, a permit taken while one slot is free looks at the other slots first only
/// where a refused attempt writes to the store (`Capability::refusal_writes`: then two
/// attempts, the random slot and the free one); elsewhere it attempts them straight away,
/// with no inspection (PostgreSQL's is a `pg_locks` scan dearer than an attempt).
pub async fn sem_slot_scan_inspects_only_where_refusals_write<F: Factory + ?Sized>(f: &F) {
    let case = "sem_slot_scan_inspects_only_where_refusals_write";
    let tries = Arc::new(AtomicUsize::new(0));
    let looks = Arc::new(AtomicUsize::new(0));
    let (t, l) = (tries.clone(), looks.clone());
    let backend = f.client().await.backend.clone();
    let writes = backend.capabilities().refusal_writes;
    let hooked = hooked(backend, move |call| {
        match call {
            Op::TryAcquire => t.fetch_add(1, Ordering::SeqCst),
            Op::Inspect => l.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
        Ok(())
    });
    let s = Semaphore::new(&Locker::new(Arc::new(hooked)), key("sem_scan"), 3).expect("semaphore");
    if s.is_native() {
        return skip(&f.label(), case, "the store keeps the permits: one attempt, no slot scan");
    }
    // Hold two slots, then ask for a third until the random first attempt lands on a held slot
    // (each round has a 2 in 3 chance), so that the scan runs.
    let a = s.try_acquire().await.expect("try").expect("first permit");
    let b = s.try_acquire().await.expect("try").expect("second permit");
    for _ in 0..40 {
        tries.store(0, Ordering::SeqCst);
        looks.store(0, Ordering::SeqCst);
        let p = s.try_acquire().await.expect("try").expect("the third slot is free");
        let (sent, seen) = (tries.load(Ordering::SeqCst), looks.load(Ordering::SeqCst));
        p.release().await.expect("release");
        if sent == 1 && seen == 0 {
            continue; // the random slot was the free one: nothing scanned
        }
        if writes {
            assert_eq!(sent, 2, "the random slot and the one found free ({seen} inspections)");
            assert!(seen >= 1, "no inspection before attempting slots on a store whose refusals write");
        } else {
            assert_eq!(seen, 0, "{seen} inspections before attempting slots ({sent} attempts)");
            assert!((2..=3).contains(&sent), "{sent} attempts for three slots");
        }
        a.release().await.expect("release");
        b.release().await.expect("release");
        return;
    }
    panic!("40 random first attempts all landed on the free slot");
}

/// A handle whose permit count disagrees with the stored one never obtains a hold: its count
/// check is answered before its first attempt is sent, for a single permit and for several.
/// (The check once ran beside the first attempt, to save a round trip: a refused handle then
/// held a permit beyond the stored count until it gave it back.)
pub async fn sem_mismatched_handle_sends_no_attempt<F: Factory + ?Sized>(f: &F) {
    let case = "sem_mismatched_handle_sends_no_attempt";
    let backend = f.client().await.backend.clone();
    if backend.records().is_none() {
        return skip(&f.label(), case, "backend keeps no records: the count is the handle's");
    }
    let name = key("sem_mismatch");
    let two = Semaphore::new(&Locker::new(backend.clone()), &name, 2).expect("semaphore");
    two.try_acquire().await.expect("try").expect("free").release().await.expect("release");
    let (hooked, tries) = counting(backend, Op::TryAcquire);
    let locker = Locker::new(Arc::new(hooked));
    let three = Semaphore::new(&locker, &name, 3).expect("semaphore");
    let refused = three.try_acquire().await;
    assert!(matches!(refused, Err(lock_core::LockError::PermitsMismatch { .. })), "{refused:?}");
    let waited = Semaphore::new(&locker, &name, 3).expect("semaphore");
    let refused = waited.acquire().wait(Duration::from_secs(1)).acquire().await;
    assert!(matches!(refused, Err(lock_core::LockError::PermitsMismatch { .. })), "{refused:?}");
    let many = Semaphore::new(&locker, &name, 3).expect("semaphore");
    let refused = many.acquire().try_acquire_many(2).await;
    assert!(matches!(refused, Err(lock_core::LockError::PermitsMismatch { .. })), "{refused:?}");
    assert_eq!(tries.load(Ordering::SeqCst), 0, "attempts sent by handles whose count was refused");
}

/// A waiting acquisition whose count check fails for a temporary reason (a busy store answering
/// a record read late) retries it until its deadline, as it retries its attempts; a try reports
/// it. (A waiter with 60 s left once failed at its first count check under contention.)
pub async fn sem_waiter_retries_a_failed_count_check<F: Factory + ?Sized>(f: &F) {
    let case = "sem_waiter_retries_a_failed_count_check";
    let backend = f.client().await.backend.clone();
    if backend.records().is_none() {
        return skip(&f.label(), case, "backend keeps no records: there is no count to check");
    }
    let failing = |backend: std::sync::Arc<dyn lock_core::LockBackend>| {
        let failed = Arc::new(AtomicUsize::new(0));
        let hooked = hooked(backend, move |call| {
            if call == Op::Record && failed.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(lock_core::LockError::temporary("test", "a record read answered too late"));
            }
            Ok(())
        });
        Locker::new(Arc::new(hooked))
    };
    let name = key("sem_check_retry");
    let waiting = Semaphore::new(&failing(backend.clone()), &name, 2).expect("semaphore");
    let permit = within(Duration::from_secs(10), "a wait past a failed count check", async {
        waiting.acquire().wait(Duration::from_secs(5)).acquire().await
    })
    .await
    .expect("a temporary failure of the count check is retried within the wait");
    permit.release().await.expect("release");
    let many = Semaphore::new(&failing(backend.clone()), &name, 2).expect("semaphore");
    let permits = many.acquire().wait(Duration::from_secs(5)).acquire_many(2).await.expect("retried too");
    permits.release().await.expect("release");
    let once = Semaphore::new(&failing(backend), &name, 2).expect("semaphore");
    let tried = once.try_acquire().await;
    assert!(matches!(&tried, Err(e) if e.is_temporary()), "a try reports the failed check: {tried:?}");
}
