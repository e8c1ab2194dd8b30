//! A grant answered after its lease ran out by this machine's clock (the request was held up on
//! its way, then granted) is not handed out as a guard already lost: a waiting acquisition
//! goes on under a fresh owner token, which gets the key once the dead grant's lease ends, and
//! a try answers "held". Real time: the hold-up is the fault, a stalled request.

use std::sync::Arc;
use std::time::Duration;

use lock_core::faults::{Faults, FaultyBackend, Op};
use lock_core::{Locker, MemoryBackend};

const LEASE: Duration = Duration::from_millis(300);

/// A locker whose first attempt is held up until `release_after` has run.
fn stalled() -> (Locker, Faults) {
    let (backend, faults) = FaultyBackend::wrap(Arc::new(MemoryBackend::new()));
    faults.stall_forever(Op::TryAcquire);
    (Locker::new(Arc::new(backend)), faults)
}

/// Once an attempt is on its way, it stays there for twice the lease (time passing is the
/// fault), then reaches the store, which grants it.
async fn release_after_two_leases(faults: &Faults) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    while faults.calls(Op::TryAcquire) == 0 {
        assert!(tokio::time::Instant::now() < give_up, "no attempt was sent");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(LEASE * 2).await;
    faults.heal();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquisition_is_not_handed_a_grant_answered_past_its_lease() {
    let (l, faults) = stalled();
    let waiting = tokio::spawn({
        let l = l.clone();
        async move { l.lock("late").lease(LEASE).wait(Duration::from_secs(10)).acquire().await }
    });
    release_after_two_leases(&faults).await;
    let g = waiting.await.expect("task").expect("granted once the dead grant's lease ended");
    assert!(!g.is_lost(), "handed out a guard already lost: {g:?}");
    assert!(faults.calls(Op::TryAcquire) >= 2, "the late grant was the one handed out");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_answered_past_its_lease_answers_held() {
    let (l, faults) = stalled();
    let trying = tokio::spawn({
        let l = l.clone();
        async move { l.lock("late-try").lease(LEASE).try_acquire().await }
    });
    release_after_two_leases(&faults).await;
    let got = trying.await.expect("task").expect("try");
    assert!(got.is_none(), "handed out a guard already lost: {got:?}");
    // The dead grant ends with its lease: the key is free again.
    let g = l.lock("late-try").wait(Duration::from_secs(5)).acquire().await.expect("free after the lease");
    g.release().await.expect("release");
}
