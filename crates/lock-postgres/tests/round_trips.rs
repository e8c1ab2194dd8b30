//! What an acquisition costs on the wire, counted (the `testing` feature): an uncontended
//! acquire + release is two round trips, by `try_lock` and by `acquire()` with a wait.
//!
//! Run: `cargo test -p lock-postgres --test round_trips`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_postgres::PgLock;
use lock_testkit::server::{external_url, or_skip, try_shared_postgres};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_acquire_and_release_cost_two_round_trips() {
    let url = match external_url("postgres") {
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
