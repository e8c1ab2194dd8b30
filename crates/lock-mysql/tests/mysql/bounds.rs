//! Every statement has a client-side bound: against a paused (SIGSTOPped) server, a release,
//! an acquisition with a deadline and a try answer by the deadline or within the server's idle
//! bound, not when the server wakes up, in every mode; and an attempt with a deadline keeps it
//! through its pool checkout.
//!
//! Run: `cargo test -p lock-mysql --test mysql bounds::`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, LockBackend, Side};
use lock_core::{LeaseSignal, Locker, OwnerToken};
use lock_mysql::sqlx::mysql::MySqlPoolOptions;
use lock_mysql::{Mode, MySqlLock};
use lock_mysql_testing::MariaDbServer;
use lock_testkit::stall::{Bounds, paused_server_answers_in_time};
use lock_testkit::within;
use tokio::time::Instant;

use crate::common;

/// How a test's clients reach the server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pool {
    /// The backend's own pool (no ping before a checkout).
    Own,
    /// A pool of the caller's with sqlx's defaults: every checkout pings the connection first,
    /// so against the paused server each checkout waits for the server.
    Pinging,
}

async fn backend(url: &str, mode: Mode, pool: Pool) -> Arc<MySqlLock> {
    match pool {
        Pool::Own => common::backend(url, mode).await,
        Pool::Pinging => {
            let pool = MySqlPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(2))
                .connect(url)
                .await
                .expect("pool");
            let b = MySqlLock::builder().pool(pool).mode(mode).keepalive(common::KEEPALIVE);
            Arc::new(b.build().await.expect("build"))
        }
    }
}

async fn locker(url: &str, mode: Mode) -> Locker {
    let locker = Locker::new(backend(url, mode, Pool::Own).await);
    if mode != Mode::Optimistic {
        return locker;
    }
    // A statement abandoned to the paused server can still land when it resumes: an attempt
    // cut off then holds its key until the lease ends, as any grant its undo could not reach.
    // A short lease keeps the check after the resume quick.
    locker.with_watchdog_lease(Duration::from_secs(1)).expect("lease")
}

async fn paused_server(mode: Mode, bounds: Bounds) {
    let server = Arc::new(MariaDbServer::start().expect("start private mariadbd"));
    let url = server.url();
    let (a, b) = (locker(&url, mode).await, locker(&url, mode).await);
    // The test keeps its own handle: the server must outlive the helper's last `stall`.
    let s = server.clone();
    let stall = move |on: bool| if on { s.pause() } else { s.resume() }.expect("SIGSTOP / SIGCONT");
    let key = format!("bounds-{mode:?}-{}", OwnerToken::random());
    paused_server_answers_in_time(&a, &b, &key, Arc::new(stall), bounds).await;
}

/// Session-bound modes: a release answers within the server's idle bound for a 100 ms
/// keep-alive (three periods, at least 2 s), a try within the pool's checkout timeout (2 s here)
/// plus that; a wait within 1 s of its deadline (the server's own timeout, then `KILL QUERY`
/// 250 ms after it).
const SESSION: Bounds = Bounds {
    release: Duration::from_secs(2),
    attempt: Duration::from_secs(4),
    wait_grace: Duration::from_secs(1),
    slack: Duration::from_millis(750),
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_pessimistic_release_wait_and_try_answer_in_time() {
    paused_server(Mode::Pessimistic, SESSION).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_named_release_wait_and_try_answer_in_time() {
    paused_server(Mode::NamedLock, SESSION).await;
}

/// An attempt that may wait until a deadline answers "held" 250 ms after it, its pool checkout
/// included, where the checkout waited out the pool's acquire timeout (2 s here): a session
/// mode's first hold needs a holding connection of its own, which a paused server never
/// finishes opening, and a pinging pool's checkout waits for the paused server. Asked of the
/// backend itself: the core gives up on a late attempt at the same bound, so `acquire()` would
/// not tell.
async fn paused_server_first_checkout(mode: Mode, pool: Pool) {
    let server = Arc::new(MariaDbServer::start().expect("start private mariadbd"));
    let backend = backend(&server.url(), mode, pool).await;
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.pause()).await.expect("join").expect("SIGSTOP");
    let wait = Duration::from_secs(1);
    let signal = LeaseSignal::new();
    let t = Instant::now();
    let req = AcquireRequest {
        key: "first-checkout",
        owner: OwnerToken::random(),
        lease: Duration::from_secs(5),
        wait_until: Some(t + wait),
        signal: &signal,
        side: Side::Exclusive,
    };
    let tried = within(wait * 5, "an attempt that may wait 1 s", backend.try_acquire(&req)).await;
    let took = t.elapsed();
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.resume()).await.expect("join").expect("SIGCONT");
    println!("paused server, {mode:?}: an attempt that may wait 1 s answered after {took:?}");
    assert!(matches!(tried, Ok(Attempt::Held { .. })), "{tried:?}");
    assert!(took < wait + Duration::from_millis(600), "answered after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_pessimistic_first_checkout_keeps_the_deadline() {
    paused_server_first_checkout(Mode::Pessimistic, Pool::Own).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_named_first_checkout_keeps_the_deadline() {
    paused_server_first_checkout(Mode::NamedLock, Pool::Own).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_optimistic_checkout_on_a_pinging_pool_keeps_the_deadline() {
    paused_server_first_checkout(Mode::Optimistic, Pool::Pinging).await;
}

/// Optimistic mode: every statement answers within the pool's acquire timeout (2 s here), a
/// wait 250 ms after its deadline, its pool checkout included (a try may first wait for the
/// undo of the cut-off wait, within the same bound). The slack keeps a 1 s wait's bound at
/// 1.6 s: a checkout that waited out the pool's acquire timeout answered at 2 s.
const OPTIMISTIC: Bounds = Bounds {
    release: Duration::from_secs(2),
    attempt: Duration::from_secs(2),
    wait_grace: Duration::from_millis(250),
    slack: Duration::from_millis(350),
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_optimistic_release_wait_and_try_answer_in_time() {
    paused_server(Mode::Optimistic, OPTIMISTIC).await;
}
