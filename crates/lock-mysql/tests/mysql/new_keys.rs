//! Many new keys at once, in pessimistic mode. A locking read of a missing row takes a gap lock
//! under REPEATABLE READ, and a creator's insert gives way to its neighbours' gap locks: 512
//! clients on 512 new keys retried each acquisition 54 times (the bench's scale curve, 9
//! acquisitions/s). Holding transactions run at READ COMMITTED, where a locking read locks only
//! the rows it finds.
//!
//! Run: `cargo test -p lock-mysql --test mysql new_keys::` (this binary's server is its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lock_core::faults::Op;
use lock_core::{Locker, OwnerToken};
use lock_mysql::Mode;
use lock_testkit::hooked::hooked;

use crate::common;

/// Backends, and clients on each: enough creators at once that the gap locks met every time.
const BACKENDS: usize = 4;
const CLIENTS: usize = 128;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_new_keys_at_once_are_each_taken_in_one_attempt() {
    let url = common::shared_url();
    let attempts = Arc::new(AtomicU64::new(0));
    let mut lockers = Vec::new();
    for _ in 0..BACKENDS {
        let seen = attempts.clone();
        let hooked = hooked(common::backend(&url, Mode::Pessimistic).await, move |call| {
            if matches!(call, Op::TryAcquire) {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        lockers.push(Locker::new(Arc::new(hooked)));
    }
    let run = OwnerToken::random();
    let mut tasks = Vec::new();
    for i in 0..BACKENDS * CLIENTS {
        let l = lockers[i % BACKENDS].clone();
        tasks.push(tokio::spawn(async move {
            let g = l.try_lock(format!("new-{run}-{i}")).await.expect("try_lock");
            g.expect("a new key nobody else takes is free").release().await.expect("release");
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    assert_eq!(
        attempts.load(Ordering::Relaxed),
        (BACKENDS * CLIENTS) as u64,
        "attempts for as many new keys"
    );
}
