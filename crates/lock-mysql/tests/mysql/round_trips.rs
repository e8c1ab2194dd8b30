//! What an uncontended acquisition and its release cost, pinned as counts of round trips
//! (`MySqlLock::round_trips`, `testing` feature), never as times: pessimistic, one batch
//! (session bounds, BEGIN, the NOWAIT lock with its fencing token) and one COMMIT; optimistic,
//! one statement to acquire and one to release; named (`GET_LOCK`, MariaDB), one batch (session
//! bounds, GET_LOCK with its fencing token) and one release batch (`RELEASE_ALL_LOCKS()`, the
//! session's timeouts restored). An acquisition that waits in the server's queue: in
//! pessimistic mode the waiting statement and `SELECT CONNECTION_ID()` before it; in named mode
//! none, since its one batch waits in `GET_LOCK` (as a bare `GET_LOCK(name, wait)` caller's
//! does); never a re-anchoring ping after a short wait. A pessimistic acquisition of a key the
//! backend lately found held waits from its first request.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_mysql::{Mode, MySqlLock};
use lock_testkit::eventually;

use crate::common;

const ROUNDS: u64 = 10;

async fn backend(mode: Mode) -> Arc<MySqlLock> {
    // A keep-alive far longer than the test: no ping is counted.
    let lock =
        MySqlLock::builder().url(common::shared_url()).mode(mode).keepalive(Duration::from_secs(60)).build();
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

/// Round trips of one acquisition that waits in the server's queue behind a holder in another
/// backend (another pool), and of its release, as the waiter's backend counts them; the holder
/// releases once the waiter has sent `waiting` requests (it waits in the server by then).
/// `kept`: the waiter held and released the key once before, so it waits on the connection it
/// kept, whose id it knows.
async fn waited_pair(mode: Mode, waiting: u64, kept: bool) -> u64 {
    let (holder, waiter) = (backend(mode).await, backend(mode).await);
    let key = format!("round-trips-waited-{mode:?}-{}", OwnerToken::random());
    // On a kept connection the wait is the prepared statement, shown with its placeholders (no
    // other test of this binary prepares one).
    let statement = match kept {
        false => format!("%GET_LOCK(%{}%", common::hex(lock_mysql::lock_name(&key))),
        true => "%GET_LOCK(?, ?)%".to_owned(),
    };
    let (h, w) = (Locker::new(holder), Locker::new(waiter.clone()));
    h.try_lock(&key).await.expect("try_lock").expect("free").release().await.expect("release");
    if kept {
        w.try_lock(&key).await.expect("try_lock").expect("free").release().await.expect("release");
    }
    let held = h.try_lock(&key).await.expect("try_lock").expect("free");
    let before = waiter.round_trips();
    let task = tokio::spawn(async move {
        let g = w.lock(&key).wait(Duration::from_secs(5)).acquire().await.expect("acquire");
        g.release().await.expect("release");
    });
    eventually(Duration::from_secs(5), "the waiter waits", || {
        let sent = waiter.round_trips() - before;
        async move { sent >= waiting }
    })
    .await;
    if mode == Mode::NamedLock {
        // Its one batch is in the server's GET_LOCK queue.
        let admin = common::admin(&common::shared_url()).await;
        common::until_running(&admin, &statement, "the batch waits in GET_LOCK").await;
    }
    held.release().await.expect("release");
    task.await.expect("waiter");
    waiter.round_trips() - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_waited_acquire_and_release_take_four_round_trips() {
    // The first batch found the key held once a second request is counted.
    assert_eq!(waited_pair(Mode::Pessimistic, 2, false).await, 4);
}

/// On a kept connection the id is known: no statement to ask it before waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_waited_acquire_and_release_on_a_kept_connection_take_three_round_trips() {
    assert_eq!(waited_pair(Mode::Pessimistic, 2, true).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_lock_waited_acquire_and_release_take_two_round_trips() {
    assert_eq!(waited_pair(Mode::NamedLock, 1, false).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_lock_waited_acquire_and_release_on_a_kept_connection_take_two_round_trips() {
    assert_eq!(waited_pair(Mode::NamedLock, 1, true).await, 2);
}

/// A key the backend found held within the last second is waited for from the first request,
/// as a bare `GET_LOCK(name, wait)` caller does: no NOWAIT try that would only fail, in a
/// hand-over where the server's time is what the next holder waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_waited_acquire_of_a_key_lately_found_held_takes_two_round_trips() {
    let (holder, waiter) = (backend(Mode::Pessimistic).await, backend(Mode::Pessimistic).await);
    let key = format!("round-trips-contended-{}", OwnerToken::random());
    let (h, w) = (Locker::new(holder), Locker::new(waiter.clone()));
    h.try_lock(&key).await.expect("try_lock").expect("free").release().await.expect("release");
    // The waiter's kept connection knows its id.
    w.try_lock(&key).await.expect("try_lock").expect("free").release().await.expect("release");
    let held = h.try_lock(&key).await.expect("try_lock").expect("free");
    assert!(w.try_lock(&key).await.expect("try_lock").is_none(), "the waiter finds the key held");
    let before = waiter.round_trips();
    let k = key.clone();
    let task = tokio::spawn(async move {
        let g = w.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("acquire");
        g.release().await.expect("release");
    });
    let admin = common::admin(&common::shared_url()).await;
    let waiting = format!("%SET STATEMENT%FOR SELECT%{}%FOR UPDATE%", common::hex(key.as_bytes()));
    common::until_running(&admin, &waiting, "the waiter waits in the server's queue").await;
    held.release().await.expect("release");
    task.await.expect("waiter");
    assert_eq!(waiter.round_trips() - before, 2, "the waiting statement and the COMMIT");
}
