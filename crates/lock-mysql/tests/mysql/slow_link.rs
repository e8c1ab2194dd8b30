//! A lock granted after a wait, over a slow link: the holder is told it lost the lock before
//! the server can free it (the server's idle clock starts when it sends the grant, before the
//! grant arrives); in both session-bound modes.
//!
//! Run: `cargo test -p lock-mysql --test mysql slow_link::`.

use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_mysql::sqlx::mysql::MySqlPoolOptions;
use lock_mysql::{Mode, lock_name};
use lock_testkit::slow_link::{proxied, waited_grant_over_a_slow_link};

use crate::common;

use common::{backend, hex, shared_url, statements_like_except};

async fn locker(url: &str, mode: Mode) -> Locker {
    Locker::new(backend(url, mode).await)
}

async fn slow_link(mode: Mode) {
    let url = shared_url();
    let (proxy, slow_url) = proxied(&url).await;
    let (first, observer) = (locker(&url, mode).await, locker(&url, mode).await);
    let slow = locker(&slow_url, mode).await;
    let key = format!("slow-link-{mode:?}-{}", OwnerToken::random());
    // A waiting statement names the key (pessimistic) or its lock name (get_lock) as a hex
    // literal.
    let named = match mode {
        Mode::NamedLock => hex(lock_name(&key).as_bytes()),
        _ => hex(key.as_bytes()),
    };
    let waiting = format!("%X'{named}'%");
    // Not the named mode's first try, `GET_LOCK(.., 0.000000)`, which names the lock too: seen
    // in passing, it would let the observer queue before the slow client's wait arrives.
    let not_a_try = "%, 0.000000)%";
    let pool = MySqlPoolOptions::new().max_connections(1).connect(&url).await.expect("pool");
    let queued = || {
        let (pool, waiting) = (pool.clone(), waiting.clone());
        async move { usize::try_from(statements_like_except(&pool, &waiting, not_a_try).await).unwrap_or(0) }
    };
    // The 100 ms keep-alive: the server's idle bound (wait_timeout) is its floor, 2 s.
    let server_idle = Duration::from_secs(2);
    waited_grant_over_a_slow_link(&first, &slow, &observer, &proxy, &key, queued, server_idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_waited_grant_over_a_slow_link_is_never_held_past_the_session() {
    slow_link(Mode::Pessimistic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_lock_waited_grant_over_a_slow_link_is_never_held_past_the_session() {
    slow_link(Mode::NamedLock).await;
}
