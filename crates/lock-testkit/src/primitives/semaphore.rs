//! The semaphore suite (cases named `sem_*`).

/// Expand the semaphore suite into one `#[tokio::test]` per case (see
/// [`primitive_tests!`](crate::primitive_tests)).
#[macro_export]
macro_rules! semaphore_tests {
    ($factory:expr) => {
        $crate::semaphore_tests!(@cases $factory;
            sem_permits_shared_up_to_n,
            sem_count_never_exceeded,
            sem_waiter_wakes_on_release,
            sem_timeout_is_typed,
            sem_crashed_holder_permit_returns,
            sem_available_counts,
            sem_shrink_keeps_holders_and_limits_new_grants,
            sem_lost_signal_fires,
            sem_bad_input,
            sem_many_all_or_none,
            sem_many_waiters_do_not_deadlock,
            sem_many_grants_only_live_permits,
            sem_count_is_stored_and_checked,
            sem_mismatched_handle_sends_no_attempt,
            sem_waiter_retries_a_failed_count_check,
            sem_store_keeps_permits,
            sem_waiter_sends_no_try_of_its_own,
            sem_slot_scan_inspects_only_where_refusals_write,
            sem_permit_holders_noted,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::primitives::semaphore::$case(&factory).await;
            }
        )*
    };
}

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockError, MAX_KEY_BYTES, MAX_PERMITS, Semaphore};

pub use super::sem_calls::{
    sem_mismatched_handle_sends_no_attempt, sem_slot_scan_inspects_only_where_refusals_write,
    sem_waiter_retries_a_failed_count_check, sem_waiter_sends_no_try_of_its_own,
};
pub use super::sem_holder::sem_permit_holders_noted;
pub use super::sem_many::{
    sem_many_all_or_none, sem_many_grants_only_live_permits, sem_many_waiters_do_not_deadlock,
};
pub use super::sem_store::{sem_count_is_stored_and_checked, sem_store_keeps_permits};
use crate::factory::{Factory, key, skip};
use crate::poll::within;

pub(super) async fn sem<F: Factory + ?Sized>(f: &F, name: &str, permits: u32) -> Semaphore {
    Semaphore::new(&f.client().await.locker(), name, permits).expect("semaphore")
}

/// N permits go to N holders at once (distinct slots); the next one waits for a release.
pub async fn sem_permits_shared_up_to_n<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_share");
    let mut permits = Vec::new();
    for _ in 0..3 {
        let s = sem(f, &name, 3).await;
        permits.push(s.try_acquire().await.expect("try").expect("a permit is free"));
    }
    let mut slots: Vec<u32> = permits.iter().map(|p| p.slot()).collect();
    slots.sort();
    assert_eq!(slots, [0, 1, 2], "each permit holds its own slot");
    let d = sem(f, &name, 3).await;
    assert!(d.try_acquire().await.expect("try").is_none(), "a fourth permit of three");
    let freed = permits.remove(1);
    let slot = freed.slot();
    freed.release().await.expect("release");
    let p = d.acquire().wait(Duration::from_secs(5)).acquire().await.expect("permit after release");
    assert_eq!(p.slot(), slot, "the freed slot is the only one");
    p.release().await.expect("release");
    for p in permits {
        p.release().await.expect("release");
    }
}

/// The seed scenario: 10 tasks (each its own client) x 1000 acquire/release on 3 permits; never
/// more than 3 holders, never two on one slot.
pub async fn sem_count_never_exceeded<F: Factory + ?Sized>(f: &F) {
    const TASKS: usize = 10;
    const ROUNDS: usize = 1000;
    const PERMITS: u32 = 3;
    let name = key("sem_count");
    let inside = Arc::new(AtomicUsize::new(0));
    let per_slot: Arc<Vec<AtomicUsize>> = Arc::new((0..PERMITS).map(|_| AtomicUsize::new(0)).collect());
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let s = sem(f, &name, PERMITS).await;
        let (inside, per_slot, most, done) = (inside.clone(), per_slot.clone(), most.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let p =
                    s.acquire().lease(Duration::from_secs(10)).wait(Duration::from_secs(60)).acquire().await;
                let p = p.expect("acquire under contention");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= PERMITS as usize, "{now} holders of {PERMITS} permits");
                most.fetch_max(now, Ordering::SeqCst);
                assert_eq!(
                    per_slot[p.slot() as usize].fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders of one slot"
                );
                tokio::task::yield_now().await;
                per_slot[p.slot() as usize].fetch_sub(1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                p.release().await.expect("release");
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    let started = tokio::time::Instant::now();
    let all = async {
        for t in tasks {
            t.await.expect("task");
        }
    };
    if tokio::time::timeout(Duration::from_secs(300), all).await.is_err() {
        panic!(
            "contended permits: {} of {} acquisitions done in {:?}",
            done.load(Ordering::SeqCst),
            TASKS * ROUNDS,
            started.elapsed()
        );
    }
    eprintln!(
        "[{}] sem_count_never_exceeded: {} acquisitions in {:?}, at most {} holders at once",
        f.label(),
        TASKS * ROUNDS,
        started.elapsed(),
        most.load(Ordering::SeqCst)
    );
}

/// A waiter blocked on a full semaphore gets the permit a holder releases.
pub async fn sem_waiter_wakes_on_release<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_wake");
    let a = sem(f, &name, 2).await;
    let p1 = a.acquire().lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let p2 = a.acquire().lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let b = sem(f, &name, 2).await;
    let waiter = tokio::spawn(async move { b.acquire().wait(Duration::from_secs(20)).acquire().await });
    // Give the waiter time to block; if it has not, the assertions below still hold.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "waiter must block while every permit is held");
    let slot = p2.slot();
    p2.release().await.expect("release");
    let p = within(Duration::from_secs(10), "waiter", waiter).await.expect("task").expect("permit");
    assert_eq!(p.slot(), slot);
    p.release().await.expect("release");
    p1.release().await.expect("release");
}

/// A full semaphore times out with a typed error naming the semaphore, and the abandoned waits
/// leave every slot as it was.
pub async fn sem_timeout_is_typed<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_timeout");
    let a = sem(f, &name, 2).await;
    let held = [
        a.try_acquire().await.expect("try").expect("free"),
        a.try_acquire().await.expect("try").expect("free"),
    ];
    let b = sem(f, &name, 2).await;
    match b.acquire().wait(Duration::from_millis(200)).acquire().await {
        Err(LockError::Timeout { key, .. }) => assert_eq!(key, name),
        other => panic!("expected a timeout, got {other:?}"),
    }
    for p in held {
        p.release().await.expect("release");
    }
    let mut again = Vec::new();
    for _ in 0..2 {
        again
            .push(b.acquire().wait(Duration::from_secs(5)).acquire().await.expect("both permits free again"));
    }
    for p in again {
        p.release().await.expect("release");
    }
}

/// A holder that crashes (abandons its permit and drops its client) gives the permit back when
/// its lease or session ends: no permit leak.
pub async fn sem_crashed_holder_permit_returns<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_crash");
    let lease = f.lease();
    let c = f.client().await;
    let s = Semaphore::new(&c.locker(), &name, 1).expect("semaphore");
    let p = s.acquire().lease(lease).try_acquire().await.expect("try").expect("free");
    p.abandon();
    drop((s, c));
    let b = sem(f, &name, 1).await;
    let p =
        b.acquire().lease(lease).wait(Duration::from_secs(15)).acquire().await.expect("permit after crash");
    p.release().await.expect("release");
}

/// `available()` is the number of free permits (or a typed `Unsupported`).
pub async fn sem_available_counts<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_avail");
    let s = sem(f, &name, 3).await;
    match s.available().await {
        Ok(n) => assert_eq!(n, 3),
        Err(e @ LockError::Unsupported { .. }) => return skip(&f.label(), "sem_available_counts", e),
        Err(e) => panic!("available: {e}"),
    }
    let other = sem(f, &name, 3).await;
    let p1 = other.try_acquire().await.expect("try").expect("free");
    let p2 = other.try_acquire().await.expect("try").expect("free");
    assert_eq!(s.available().await.expect("available"), 1);
    p1.release().await.expect("release");
    assert_eq!(s.available().await.expect("available"), 2);
    p2.release().await.expect("release");
    assert_eq!(s.available().await.expect("available"), 3);
}

/// Shrinking N while more permits are held: the holders of slots >= N keep them; a handle with
/// the smaller N grants only slots below N and counts only those as available.
pub async fn sem_shrink_keeps_holders_and_limits_new_grants<F: Factory + ?Sized>(f: &F) {
    let name = key("sem_shrink");
    let big = sem(f, &name, 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(big.try_acquire().await.expect("try").expect("free"));
    }
    held.sort_by_key(|p| p.slot());
    let mut small = sem(f, &name, 3).await;
    small.resize(2).await.expect("shrink");
    assert_eq!(small.permits(), 2);
    assert!(small.try_acquire().await.expect("try").is_none(), "slots 0 and 1 are held");
    let inspect = small.available().await;
    if let Ok(n) = &inspect {
        assert_eq!(*n, 0);
    }
    // The holder of slot 2 (beyond the new N) keeps it until it releases...
    assert!(!held[2].is_lost());
    let beyond = held.pop().expect("slot 2");
    assert_eq!(beyond.slot(), 2);
    beyond.release().await.expect("release of a slot beyond N");
    // ...and its release frees no permit for the smaller handle.
    assert!(small.try_acquire().await.expect("try").is_none(), "slot 2 is not a permit of two");
    if inspect.is_ok() {
        assert_eq!(small.available().await.expect("available"), 0);
    }
    let first = held.remove(0);
    first.release().await.expect("release");
    if inspect.is_ok() {
        assert_eq!(small.available().await.expect("available"), 1);
    }
    let p = small.acquire().wait(Duration::from_secs(5)).acquire().await.expect("slot 0 is free");
    assert_eq!(p.slot(), 0);
    p.release().await.expect("release");
    for p in held {
        p.release().await.expect("release");
    }
    if let Err(e) = inspect {
        skip(&f.label(), "sem_shrink_keeps_holders_and_limits_new_grants (available part)", e);
    }
}

/// A permit's lost signal fires when its slot's lock is severed behind the holder's back.
pub async fn sem_lost_signal_fires<F: Factory + ?Sized>(f: &F) {
    let c = f.client().await;
    let lease = f.lease();
    let s = Semaphore::new(&c.locker().with_watchdog_lease(lease).expect("lease"), key("sem_lost"), 2)
        .expect("semaphore");
    let p = s.try_acquire().await.expect("try").expect("free");
    if let Err(u) = c.faults.sever(p.key()).await {
        return skip(&f.label(), "sem_lost_signal_fires", u);
    }
    within(lease * 10 + Duration::from_secs(5), "permit lost signal", p.lost()).await;
    assert!(p.is_lost());
    assert!(matches!(p.release().await, Err(LockError::LeaseLost { .. })));
}

/// Bad input gets typed errors: 0 or too many permits, an empty or too long name; the longest
/// accepted name works.
pub async fn sem_bad_input<F: Factory + ?Sized>(f: &F) {
    let l = f.client().await.locker();
    for n in [0, MAX_PERMITS + 1, u32::MAX] {
        assert!(matches!(Semaphore::new(&l, "n", n), Err(LockError::InvalidConfig { .. })), "{n} permits");
    }
    let ok = Semaphore::new(&l, key("sem_bad"), MAX_PERMITS).expect("MAX_PERMITS permits");
    assert!(matches!(ok.clone().with_permits(0), Err(LockError::InvalidConfig { .. })));
    assert!(matches!(Semaphore::new(&l, "", 1), Err(LockError::InvalidKey { .. })));
    assert!(matches!(Semaphore::new(&l, "line\nbreak", 1), Err(LockError::InvalidKey { .. })));
    let mut longest = key("sem_max");
    while longest.len() < MAX_KEY_BYTES - 5 {
        longest.push('x');
    }
    assert!(matches!(Semaphore::new(&l, format!("{longest}x"), 1), Err(LockError::InvalidKey { .. })));
    let s = Semaphore::new(&l, &longest, MAX_PERMITS).expect("longest name");
    let p = s.try_acquire().await.expect("try").expect("free");
    assert!(s.slot_key(MAX_PERMITS - 1).len() <= MAX_KEY_BYTES);
    p.release().await.expect("release");
    // Its stored count's record and its many gate have valid keys too.
    assert!(s.count_key().len() <= MAX_KEY_BYTES);
    s.acquire().try_acquire_many(2).await.expect("try many").expect("free").release().await.expect("release");
    let wait = ok.acquire().wait(Duration::MAX).acquire().await;
    assert!(matches!(wait, Err(LockError::InvalidWait { .. })), "{wait:?}");
}
