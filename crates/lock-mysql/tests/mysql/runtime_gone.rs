//! A `Locker` (and a guard) over the session-bound modes dropped after its runtime has shut
//! down: nothing panics, and the connection a hold had is closed, so the server frees the lock.
//!
//! Run: `cargo test -p lock-mysql --test mysql runtime_gone::`.

use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use lock_mysql::{Mode, lock_name};
use lock_testkit::eventually;
use lock_testkit::runtime_gone::{dropped_after_the_runtime, runtime, taken_again};

use crate::common;

use common::{builder, hex, shared_url as url, statements_like};

async fn new_locker(url: &str, mode: Mode) -> Locker {
    Locker::new(std::sync::Arc::new(builder(url, mode).build().await.expect("build")))
}

/// A `Locker` holding a lock (and its guard), or one whose lock was released (its connection
/// then kept for the next hold), dropped after its runtime shut down; another client then takes
/// the key.
fn drop_after_the_runtime(mode: Mode, release_first: bool) {
    let url = url();
    let k = format!("runtime-gone-{}", OwnerToken::random());
    dropped_after_the_runtime(|| new_locker(&url, mode), &k, release_first, Duration::from_secs(10));
}

#[test]
fn pessimistic_locker_holding_a_lock_dropped_after_its_runtime() {
    drop_after_the_runtime(Mode::Pessimistic, false);
}

#[test]
fn pessimistic_locker_dropped_after_its_runtime() {
    drop_after_the_runtime(Mode::Pessimistic, true);
}

#[test]
fn named_locker_holding_a_lock_dropped_after_its_runtime() {
    drop_after_the_runtime(Mode::NamedLock, false);
}

#[test]
fn named_locker_dropped_after_its_runtime() {
    drop_after_the_runtime(Mode::NamedLock, true);
}

/// How many statements naming `name` (as a hex literal) run on the server now.
async fn statements_naming(admin: &MySqlPool, name: &str) -> i64 {
    statements_like(admin, &format!("%X'{}'%", hex(name))).await
}

/// An acquisition waiting in the server's queue, dropped after its runtime shut down (the future
/// outlived the runtime that polled it): no panic, and neither the wait nor the hold (whose
/// keeper went with the runtime) is left: another client takes the key.
fn waiting_acquisition_dropped_after_the_runtime(mode: Mode) {
    let url = url();
    let k = format!("runtime-gone-wait-{}", OwnerToken::random());
    let name = if mode == Mode::NamedLock { lock_name(&k) } else { k.clone() };
    let rt = runtime();
    let (held, waiting) = rt.block_on(async {
        let admin = MySqlPoolOptions::new().max_connections(1).connect(&url).await.expect("admin pool");
        let g = new_locker(&url, mode).await.try_lock(&k).await.expect("try").expect("free");
        let (waiter, k2) = (new_locker(&url, mode).await, k.clone());
        let mut waiting = Box::pin(async move { waiter.lock(&k2).wait(Duration::from_secs(10)).acquire().await });
        tokio::select! {
            r = &mut waiting => panic!("granted while held: {r:?}"),
            () = eventually(Duration::from_secs(10), "the waiter queues", || async { statements_naming(&admin, &name).await > 0 }) => {}
        }
        (g, waiting)
    });
    drop(rt);
    drop(waiting);
    drop(held);
    taken_again(|| new_locker(&url, mode), &k, Duration::from_secs(10));
}

#[test]
fn pessimistic_waiting_acquisition_dropped_after_its_runtime() {
    waiting_acquisition_dropped_after_the_runtime(Mode::Pessimistic);
}

#[test]
fn named_waiting_acquisition_dropped_after_its_runtime() {
    waiting_acquisition_dropped_after_the_runtime(Mode::NamedLock);
}
