//! Every statement has a client-side bound: against a paused (SIGSTOPped) server, a release,
//! an acquisition with a deadline and a try answer by the deadline or within the server's idle
//! bound, not when the server wakes up.
//!
//! Run: `cargo test -p lock-postgres --test bounds`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locker;
use lock_testkit::server::{PgServer, or_skip};
use lock_testkit::within;
use tokio::time::Instant;

mod common;
use common::{backend, key};

/// The server's idle bound for the tests' keep-alive (three periods, at least 2 s): the
/// longest a request without a deadline may go unanswered.
const IDLE_BOUND: Duration = Duration::from_secs(2);
/// What a loaded machine may add to a bound.
const SLACK: Duration = Duration::from_millis(750);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_release_wait_and_try_answer_in_time() {
    let Some(server) = or_skip("postgres", PgServer::start()) else { return };
    let server = Arc::new(server);
    let url = server.url();
    let (a, b) = (Locker::new(backend(&url).await), Locker::new(backend(&url).await));
    let k = key("paused-bounds");
    let g = a.try_lock(&k).await.expect("try").expect("free");
    // Two idle connections in b's pool, so its requests reach the (paused) server at once
    // instead of waiting for a connection.
    let (x, y) = (key("warm-x"), key("warm-y"));
    let (gx, gy) = (b.try_lock(&x).await.expect("try"), b.try_lock(&y).await.expect("try"));
    gx.expect("free").release().await.expect("release");
    gy.expect("free").release().await.expect("release");

    let s = server.clone();
    tokio::task::spawn_blocking(move || s.pause()).await.expect("join").expect("SIGSTOP");

    let t = Instant::now();
    let released = within(IDLE_BOUND + SLACK * 2, "release", g.release()).await;
    let took = t.elapsed();
    assert!(released.is_err(), "a release the server never answered: {released:?}");
    assert!(took < IDLE_BOUND + SLACK, "release answered after {took:?}");

    let wait = Duration::from_secs(1);
    let t = Instant::now();
    let waited =
        within(wait + SLACK * 2, "acquire with a 1 s deadline", b.lock(&k).wait(wait).acquire()).await;
    let took = t.elapsed();
    assert!(waited.is_err(), "granted by a paused server: {waited:?}");
    assert!(took < wait + SLACK, "acquire().wait(1s) answered after {took:?}");

    let t = Instant::now();
    let tried = within(IDLE_BOUND + SLACK * 2, "try", b.try_lock(&k)).await;
    let took = t.elapsed();
    assert!(tried.is_err(), "a try the server never answered: {tried:?}");
    assert!(took < IDLE_BOUND + SLACK, "try answered after {took:?}");

    let s = server.clone();
    tokio::task::spawn_blocking(move || s.resume()).await.expect("join").expect("SIGCONT");
    // Nothing the abandoned requests did survives: the key is free for another client.
    let g =
        within(Duration::from_secs(10), "after resume", b.lock(&k).wait(Duration::from_secs(8)).acquire())
            .await
            .expect("acquire after resume");
    g.release().await.expect("release");
}
