//! What an uncontended acquisition and its release cost, pinned as counts of round trips
//! (`MySqlLock::round_trips`, `testing` feature), never as times: pessimistic, one batch
//! (session bounds, BEGIN, the NOWAIT lock with its fencing token) and one COMMIT; optimistic,
//! one statement to acquire and one to release; named (`GET_LOCK`, MariaDB), one batch (session
//! bounds, GET_LOCK with its fencing token) and one release batch (`RELEASE_ALL_LOCKS()`, the
//! session's timeouts restored).

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_mysql::{Mode, MySqlLock};
use lock_testkit::server::{external_url, shared_mariadb};

const ROUNDS: u64 = 10;

async fn backend(mode: Mode) -> Arc<MySqlLock> {
    let url = external_url("mysql").unwrap_or_else(|| shared_mariadb().url());
    // A keep-alive far longer than the test: no ping is counted.
    let lock = MySqlLock::builder().url(url).mode(mode).keepalive(Duration::from_secs(60)).build();
    Arc::new(lock.await.expect("build"))
}

/// Round trips of `ROUNDS` acquire+release pairs on a key that exists and is free, through
/// `try_lock` and through `acquire()` with a wait.
async fn per_pair(mode: Mode) -> (u64, u64) {
    let lock = backend(mode).await;
    let locker = Locker::new(lock.clone());
    let key = format!("round-trips-{mode:?}-{}", OwnerToken::random());
    // First use creates the row (more statements, once per key).
    locker.try_lock(&key).await.expect("try_lock").expect("free").release().await.expect("release");
    let before = lock.round_trips();
    for _ in 0..ROUNDS {
        locker.try_lock(&key).await.expect("try_lock").expect("free").release().await.expect("release");
    }
    let tried = lock.round_trips() - before;
    let before = lock.round_trips();
    for _ in 0..ROUNDS {
        let g = locker.lock(&key).wait(Duration::from_secs(5)).acquire().await.expect("acquire");
        g.release().await.expect("release");
    }
    (tried, lock.round_trips() - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_acquire_and_release_take_two_round_trips() {
    assert_eq!(per_pair(Mode::Pessimistic).await, (2 * ROUNDS, 2 * ROUNDS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_acquire_and_release_take_two_round_trips() {
    assert_eq!(per_pair(Mode::Optimistic).await, (2 * ROUNDS, 2 * ROUNDS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_lock_acquire_and_release_take_two_round_trips() {
    assert_eq!(per_pair(Mode::NamedLock).await, (2 * ROUNDS, 2 * ROUNDS));
}
