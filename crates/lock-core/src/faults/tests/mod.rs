use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Faults, FaultyBackend, Op};
use crate::backend::{AcquireRequest, Attempt, LockBackend, RecordOp, RenewItem, Side};
use crate::backend::{Admin, Notes, Notify, RaiseFence, Records, WaitQueue};
use crate::{FencingToken, LeaseSignal, LockError, Locker, MemoryBackend, OwnerToken};

mod probe;

const LEASE: Duration = Duration::from_secs(30);

fn request<'a>(key: &'a str, owner: OwnerToken, signal: &'a LeaseSignal) -> AcquireRequest<'a> {
    AcquireRequest { key, owner, lease: LEASE, wait_until: None, signal, side: Side::Exclusive }
}

fn memory() -> (MemoryBackend, FaultyBackend, Faults) {
    let table = MemoryBackend::new();
    let (faulty, faults) = FaultyBackend::wrap(Arc::new(table.clone()));
    (table, faulty, faults)
}

#[tokio::test]
async fn unarmed_it_is_the_memory_backend() {
    let (table, b, faults) = memory();
    assert_eq!(b.capabilities(), table.capabilities());
    assert_eq!(b.identity(), table.identity());
    let locker = Locker::new(Arc::new(b));
    let guard = locker.try_lock("k").await.expect("try").expect("free");
    assert!(table.inspect("k").await.expect("inspect").held);
    assert!(faults.is_held("k"));
    guard.release().await.expect("release");
    assert!(!faults.is_held("k"));
    assert_eq!(faults.calls(Op::TryAcquire), 1);
    assert_eq!(faults.calls(Op::Release), 1);
}

#[tokio::test]
async fn failed_calls_never_reach_the_store() {
    let (table, b, faults) = memory();
    let (owner, signal) = (OwnerToken::random(), LeaseSignal::new());
    faults.fail_next(Op::TryAcquire, 2);
    for _ in 0..2 {
        let e = b.try_acquire(&request("k", owner, &signal)).await.expect_err("injected");
        assert!(matches!(e, LockError::Backend { backend: "memory", temporary: true, .. }), "{e}");
        assert!(!table.inspect("k").await.expect("inspect").held);
    }
    assert!(matches!(b.try_acquire(&request("k", owner, &signal)).await, Ok(Attempt::Acquired(_))));
    assert_eq!(faults.calls(Op::TryAcquire), 3);
}

/// Calls `op` on `b`; its error, if any.
async fn call(b: &FaultyBackend, op: Op) -> Option<LockError> {
    let (owner, signal) = (OwnerToken::random(), LeaseSignal::new());
    let item = [RenewItem { key: "k", owner, lease: LEASE }];
    match op {
        Op::TryAcquire => b.try_acquire(&request("k", owner, &signal)).await.err(),
        Op::Release => b.release("k", owner).await.err(),
        Op::Renew => b.renew(&item).await.err(),
        Op::Inspect => b.inspect("k").await.err(),
        Op::LeaveQueue => b.leave_queue("k", owner).await.err(),
        Op::Subscribe => b.subscribe("k").await.err(),
        Op::SetNote => b.set_note("k", owner, "n").await.err(),
        Op::Note => b.note("k").await.err(),
        Op::RaiseFence => b.raise_fence("k", owner, FencingToken(1)).await.err(),
        Op::List => b.list("", 1).await.err(),
        Op::Evict => b.evict("k", FencingToken(1)).await.err(),
        Op::Record => b.record("k", RecordOp::Get).await.err(),
    }
}

/// Each call fails alone when armed, every one of them once the store is down, and none
/// once healed.
#[tokio::test]
async fn each_call_fails_when_armed() {
    let (_table, b, faults) = memory();
    for &op in Op::ALL {
        faults.fail_all(op);
        for &other in Op::ALL {
            let failed = call(&b, other).await;
            match failed {
                Some(e) if other == op => {
                    assert!(e.is_temporary() && e.to_string().contains(op.name()), "{e}")
                }
                None if other == op => panic!("{op} was let through"),
                Some(e) => panic!("{other} failed with {op} armed: {e}"),
                None => {}
            }
        }
        faults.heal();
    }
    faults.outage();
    for &op in Op::ALL {
        assert!(call(&b, op).await.is_some_and(|e| e.is_temporary()), "{op} during the outage");
    }
    faults.heal();
    for &op in Op::ALL {
        assert!(call(&b, op).await.is_none(), "{op} after heal");
    }
}

#[tokio::test]
async fn a_lost_answer_was_applied() {
    let (table, b, faults) = memory();
    let (owner, signal) = (OwnerToken::random(), LeaseSignal::new());
    faults.lose_answers(Op::TryAcquire, 1);
    let e = b.try_acquire(&request("k", owner, &signal)).await.expect_err("answer lost");
    assert!(e.is_temporary(), "{e}");
    assert!(table.inspect("k").await.expect("inspect").held);
    // The store has it, so the wrapper can make the store forget it.
    assert_eq!(faults.lose("k").await.expect("lose"), 1);
    assert!(!table.inspect("k").await.expect("inspect").held);
}

#[tokio::test(start_paused = true)]
async fn latency_and_stalls_delay_calls_by_what_was_asked() {
    let (_table, b, faults) = memory();
    faults.latency(Duration::from_millis(40));
    faults.stall(Op::Note, Duration::from_secs(2));
    let start = Instant::now();
    b.inspect("k").await.expect("inspect");
    assert_eq!(start.elapsed(), Duration::from_millis(40));
    let start = Instant::now();
    b.note("k").await.expect("note");
    assert_eq!(start.elapsed(), Duration::from_millis(2040));
    faults.heal();
    let start = Instant::now();
    b.note("k").await.expect("note");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// A stalled call hangs until healed; one whose caller gave up never reached the store.
#[tokio::test(start_paused = true)]
async fn a_stalled_call_waits_for_heal_and_is_cancellation_safe() {
    let (table, b, faults) = memory();
    let b = Arc::new(b);
    let (owner, signal) = (OwnerToken::random(), LeaseSignal::new());
    faults.stall_forever(Op::TryAcquire);
    let gave_up =
        tokio::time::timeout(Duration::from_secs(3600), b.try_acquire(&request("k", owner, &signal))).await;
    assert!(gave_up.is_err(), "answered while stalled");
    assert!(!table.inspect("k").await.expect("inspect").held, "a dropped call reached the store");
    let stalled = tokio::spawn({
        let b = b.clone();
        async move { b.try_acquire(&request("k", owner, &LeaseSignal::new())).await }
    });
    // The spawned call counts once it has planned: then heal must release it.
    while faults.calls(Op::TryAcquire) < 2 {
        tokio::task::yield_now().await;
    }
    faults.heal();
    assert!(matches!(stalled.await.expect("task"), Ok(Attempt::Acquired(_))));
}

/// The holder's watchdog is refused at its next renewal and `lost()` fires; the store has
/// freed the key for others, as after a real expiry.
#[tokio::test(start_paused = true)]
async fn a_forgotten_hold_is_lost_and_free() {
    let (table, b, faults) = memory();
    let locker = Locker::new(Arc::new(b));
    let waiting = tokio::spawn({
        let locker = locker.clone();
        async move { locker.lock("k").wait(Duration::from_secs(5)).acquire().await }
    });
    faults.until_held("k").await;
    let guard = waiting.await.expect("task").expect("acquired");
    let start = Instant::now();
    assert_eq!(faults.lose("k").await.expect("lose"), 1);
    assert!(!table.inspect("k").await.expect("inspect").held);
    tokio::time::timeout(LEASE, guard.lost()).await.expect("lost within a lease");
    // At the watchdog's renewal, a third of the default 30 s lease after the grant.
    assert!(start.elapsed() <= LEASE / 3, "{:?}", start.elapsed());
    let other = locker.try_lock("k").await.expect("try").expect("freed for others");
    assert!(other.fence() > guard.fence());
    assert!(guard.release().await.is_err(), "the lost holder's release must say so");
    other.release().await.expect("release");
}

#[tokio::test]
async fn forgetting_takes_every_nesting_and_every_reader() {
    let (table, b, faults) = memory();
    let (owner, signal) = (OwnerToken::random(), LeaseSignal::new());
    for _ in 0..3 {
        assert!(matches!(b.try_acquire(&request("k", owner, &signal)).await, Ok(Attempt::Acquired(_))));
    }
    let readers = [OwnerToken::random(), OwnerToken::random()];
    for reader in readers {
        let req = AcquireRequest { side: Side::Read, ..request("r", reader, &signal) };
        assert!(matches!(b.try_acquire(&req).await, Ok(Attempt::Acquired(_))));
    }
    assert_eq!(faults.lose("k").await.expect("lose"), 1);
    assert_eq!(faults.lose("r").await.expect("lose"), 2);
    assert!(!table.inspect("k").await.expect("inspect").held);
    assert!(!table.inspect("r").await.expect("inspect").held);
    let items = [
        RenewItem { key: "k", owner, lease: LEASE },
        RenewItem { key: "r", owner: readers[0], lease: LEASE },
    ];
    assert_eq!(b.renew(&items).await.expect("renew"), [false, false]);
    assert!(!b.set_note("k", owner, "n").await.expect("note"));
    assert!(!b.release("k", owner).await.expect("release"));
    assert_eq!(faults.lose("k").await.expect("lose again"), 0);
}

/// A renewal batch with a forgotten hold among live ones answers each in its place.
#[tokio::test]
async fn a_batch_keeps_its_order() {
    let (_table, b, faults) = memory();
    let signal = LeaseSignal::new();
    let owners = [OwnerToken::random(), OwnerToken::random(), OwnerToken::random()];
    let keys = ["a", "b", "c"];
    for (key, owner) in keys.iter().zip(owners) {
        assert!(matches!(b.try_acquire(&request(key, owner, &signal)).await, Ok(Attempt::Acquired(_))));
    }
    assert_eq!(faults.lose("b").await.expect("lose"), 1);
    let items: Vec<_> =
        keys.iter().zip(owners).map(|(key, owner)| RenewItem { key, owner, lease: LEASE }).collect();
    assert_eq!(b.renew(&items).await.expect("renew"), [true, false, true]);
}

/// A store down for longer than the lease: the watchdog's renewals fail, the holder turns
/// uncertain, and `lost()` fires at the lease's local deadline, not before.
#[tokio::test(start_paused = true)]
async fn an_outage_longer_than_the_lease_loses_the_hold_at_its_deadline() {
    let (_table, b, faults) = memory();
    let locker = Locker::new(Arc::new(b));
    let guard = locker.try_lock("k").await.expect("try").expect("free");
    let start = Instant::now();
    faults.outage();
    tokio::time::timeout(2 * LEASE, guard.lost()).await.expect("lost");
    let waited = start.elapsed();
    assert!(waited > LEASE / 2 && waited <= LEASE, "lost after {waited:?}");
    assert!(faults.calls(Op::Renew) >= 2, "the watchdog retried");
}

/// A semaphore's permits and a read-write lock's reader hold parts under derived keys: all of
/// them are forgotten at once, and every holder learns it.
#[tokio::test(start_paused = true)]
async fn losing_everything_reaches_every_primitive() {
    let (table, b, faults) = memory();
    let locker = Locker::new(Arc::new(b));
    let permits = crate::Semaphore::new(&locker, "pool", 2).expect("semaphore");
    let permit = permits.try_acquire().await.expect("try").expect("a permit");
    let rw = crate::RwLock::new(&locker, "doc").expect("rwlock");
    let read = rw.read().wait(Duration::from_secs(1)).acquire().await.expect("read");
    let mutex = locker.try_lock("m").await.expect("try").expect("free");
    let keys = faults.held_keys();
    assert!(keys.len() >= 3, "{keys:?}");
    assert_eq!(faults.lose_all().await.expect("lose all"), keys.len());
    for key in &keys {
        assert!(!table.inspect(key).await.expect("inspect").held, "{key} still held");
    }
    let all_lost = async { tokio::join!(mutex.lost(), read.lost(), permit.lost()) };
    tokio::time::timeout(LEASE, all_lost).await.expect("every holder told within a lease");
    assert!(faults.held_keys().is_empty());
}

/// An error the code must not retry reaches it at once, through a wait, and only for the
/// call it was armed on.
#[tokio::test(start_paused = true)]
async fn an_error_of_the_tests_choosing_is_not_retried() {
    let (table, b, faults) = memory();
    let locker = Locker::new(Arc::new(b));
    faults.fail_with(Op::TryAcquire, || LockError::permission_denied("memory", "password rotated"));
    let start = Instant::now();
    let e = locker.lock("k").wait(Duration::from_secs(5)).acquire().await.expect_err("refused");
    assert!(matches!(e, LockError::PermissionDenied { .. }), "{e}");
    assert_eq!(start.elapsed(), Duration::ZERO, "a permanent refusal was retried");
    assert_eq!(faults.calls(Op::TryAcquire), 1);
    assert!(!table.inspect("k").await.expect("inspect").held);
    faults.heal();
    let guard = locker.try_lock("k").await.expect("healed").expect("free");
    guard.release().await.expect("release");
}
