//! Fences of one key strictly increase in the order its holds are granted, under contention, in
//! every mode. In optimistic mode on MariaDB a new row's fence was drawn from the sequence when
//! the statement began, before it waited for the row: a statement that drew, stalled while
//! another client took, used and released the key (deleting its row), then created the row,
//! granted a fence below the one before it (a fenced resource would have refused the rightful
//! holder, and accepted the stale one).
//!
//! Run: `cargo test -p lock-mysql --test fences`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_mysql::Mode;
use tokio::time::Instant;

mod common;

/// Backends (each its own pool), and clients on each.
const BACKENDS: usize = 4;
const CLIENTS: usize = 6;
const RUN: Duration = Duration::from_secs(4);

/// Every grant of one key, in the order they were granted (each checked while still held, so
/// the order is the lock's): the fences that were not above the grant before them.
async fn regressions(mode: Mode) -> (usize, usize) {
    let url = common::shared_url();
    let key = format!("fences-{mode:?}-{}", OwnerToken::random());
    let last = Arc::new(Mutex::new((0u64, 0usize, 0usize)));
    let mut tasks = Vec::new();
    for _ in 0..BACKENDS {
        let locker = Locker::new(common::backend(&url, mode).await);
        for _ in 0..CLIENTS {
            let (locker, key, last) = (locker.clone(), key.clone(), last.clone());
            tasks.push(tokio::spawn(async move {
                let end = Instant::now() + RUN;
                while Instant::now() < end {
                    let Some(g) = locker.try_lock(&key).await.expect("try_lock") else { continue };
                    let fence = g.fence().expect("a fenced mode").0;
                    {
                        let mut l = last.lock().expect("tally");
                        if fence <= l.0 {
                            eprintln!("{mode:?}: fence {fence} granted after {}", l.0);
                            l.2 += 1;
                        }
                        l.0 = l.0.max(fence);
                        l.1 += 1;
                    }
                    g.release().await.expect("release");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let l = last.lock().expect("tally");
    (l.1, l.2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_fences_increase_in_grant_order() {
    let (grants, regressed) = regressions(Mode::Optimistic).await;
    eprintln!("optimistic: {grants} grants, {regressed} fences not above the one before");
    assert!(grants > 100, "too few grants to judge: {grants}");
    assert_eq!(regressed, 0, "of {grants} grants, {regressed} fences were not above the grant before");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_and_get_lock_fences_increase_in_grant_order() {
    for mode in [Mode::Pessimistic, Mode::NamedLock] {
        let (grants, regressed) = regressions(mode).await;
        eprintln!("{mode:?}: {grants} grants, {regressed} fences not above the one before");
        assert!(grants > 100, "{mode:?}: too few grants to judge: {grants}");
        assert_eq!(
            regressed, 0,
            "{mode:?}: of {grants} grants, {regressed} fences were not above the grant before"
        );
    }
}
