//! What an acquisition costs on the wire, counted (the `testing` feature): an uncontended
//! acquire + release is two round trips, by `try_lock` and by `acquire()` with a wait; so is a
//! waited one of a key this backend lately found held (the wait, then the release).
//!
//! Run: `cargo test -p lock-postgres --test postgres round_trips::`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_postgres::PgLock;
use lock_postgres_testing::try_shared_postgres;
use lock_testkit::eventually;
use lock_testkit::server::or_skip;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_acquire_and_release_cost_two_round_trips() {
    let url = match lock_postgres_testing::external_url() {
        Some(u) => u,
        None => match or_skip("postgres", try_shared_postgres()) {
            Some(s) => s.url(),
            None => return,
        },
    };
    // A keep-alive far longer than the test: no ping is counted.
    let lock = Arc::new(
        PgLock::builder().url(&url).keepalive(Duration::from_secs(60)).build().await.expect("build"),
    );
    let l = Locker::new(lock.clone());
    let k = format!("trips-{}", OwnerToken::random());
    let before = lock.round_trips();
    l.lock(&k)
        .lease(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("try")
        .expect("free")
        .release()
        .await
        .expect("release");
    assert_eq!(lock.round_trips() - before, 2, "try_lock + release");
    let before = lock.round_trips();
    let g = l
        .lock(&k)
        .lease(Duration::from_secs(30))
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("acquire");
    g.release().await.expect("release");
    assert_eq!(lock.round_trips() - before, 2, "acquire() on a free key + release");
}

/// A waiter whose kept connection knows its backend pid, on a key it found held a moment ago,
/// joins the server's queue in its first round trip: a try first would only fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waited_acquire_of_a_key_lately_found_held_takes_two_round_trips() {
    let Some((url, admin_url)) = common::shared() else { return };
    // The waiter's keep-alive far longer than the test: on a loaded machine the tests' 100 ms
    // one let a ping in before the release, and let the connection the try used (which knows
    // its pid) age out of the kept ones before the wait (3 round trips seen, not 2).
    let waiter = Arc::new(
        PgLock::builder().url(&url).keepalive(Duration::from_secs(60)).build().await.expect("build"),
    );
    let holder = common::backend(&url).await;
    let key = common::key("round-trips-contended");
    let (h, w) = (Locker::new(holder), Locker::new(waiter.clone()));
    let lease = Duration::from_secs(30);
    let held = h.lock(&key).lease(lease).try_acquire().await.expect("try").expect("free");
    // The waiter finds the key held; its connection, which now knows its pid, is kept.
    assert!(w.lock(&key).lease(lease).try_acquire().await.expect("try").is_none(), "held");
    let before = waiter.round_trips();
    let k = key.clone();
    let task = tokio::spawn(async move {
        let g = w.lock(&k).lease(lease).wait(Duration::from_secs(5)).acquire().await.expect("acquire");
        g.release().await.expect("release");
    });
    let admin = common::admin(&admin_url).await;
    eventually(Duration::from_secs(10), "the waiter waits in the server's queue", || async {
        common::advisory_locks(&admin, &key).await.1 == 1
    })
    .await;
    held.release().await.expect("release");
    task.await.expect("waiter");
    assert_eq!(waiter.round_trips() - before, 2, "the waiting statement and the release");
}
