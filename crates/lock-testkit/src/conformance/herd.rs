//! A release wakes one waiter, not the herd.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::Locker;
use tokio::task::JoinSet;

use crate::factory::{Factory, key, skip};
use crate::hooked::counting;
use crate::poll::{eventually, within};
use lock_core::faults::Op;

/// Waiters queued on one key.
const WAITERS: usize = 24;
/// How long each waiter holds the lock: long enough that waiters woken with it find it held.
const HOLD: Duration = Duration::from_millis(2);
/// Attempts allowed per acquisition of the chain: the woken waiter's, one more from each
/// further member that tells a quorum's listener of the same release (up to 3 of 5), an attempt
/// that raced a release, a first attempt still on its way when the chain began. A herd (every
/// waiter woken by every release) costs about `WAITERS / 2` per acquisition (12.5 here) on top
/// of those.
const ATTEMPTS_PER_GRANT: usize = 6;

/// 3c. `WAITERS` waiters of one client queued on a held key, then released in a chain (each
/// waiter holds the lock for `HOLD`): every waiter gets the lock, and the whole chain
/// costs at most `ATTEMPTS_PER_GRANT` attempts per acquisition. A store whose waiters can only
/// poll (no notification, no wait on the server) is skipped: its attempts count time, not
/// wake-ups.
pub async fn release_wakes_no_herd<F: Factory + ?Sized>(f: &F) {
    let case = "release_wakes_no_herd";
    let backend = f.client().await.backend.clone();
    if !(backend.notify().is_some() || backend.capabilities().native_wait || backend.queue().is_some()) {
        return skip(&f.label(), case, "waiters poll: no release notification and no wait on the server");
    }
    let (hooked, tries) = counting(backend, Op::TryAcquire);
    let locker = Locker::new(Arc::new(hooked));
    let k = key("herd");
    let held =
        locker.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let mut waiters = JoinSet::new();
    for _ in 0..WAITERS {
        let (l, k) = (locker.clone(), k.clone());
        waiters.spawn(async move {
            let g = l.lock(&k).lease(Duration::from_secs(30)).wait(Duration::from_secs(20)).acquire().await?;
            // The work done under the lock, while the others wait.
            tokio::time::sleep(HOLD).await;
            g.release().await
        });
    }
    // Every waiter's first attempt has been refused before the chain starts.
    eventually(Duration::from_secs(10), "every waiter's first attempt", || async {
        tries.load(Ordering::SeqCst) > WAITERS
    })
    .await;
    let before = tries.load(Ordering::SeqCst);
    held.release().await.expect("release");
    within(Duration::from_secs(30), "the chain of waiters", async {
        while let Some(done) = waiters.join_next().await {
            done.expect("waiter task").expect("every waiter gets the lock and releases it");
        }
    })
    .await;
    let chain = tries.load(Ordering::SeqCst) - before;
    eprintln!("{}: {chain} attempts for a chain of {WAITERS} acquisitions", f.label());
    assert!(
        chain <= WAITERS * ATTEMPTS_PER_GRANT,
        "{chain} attempts for a chain of {WAITERS} acquisitions: releases wake a herd"
    );
}
