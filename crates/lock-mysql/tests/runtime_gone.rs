//! A `Locker` (and a guard) over the session-bound modes dropped after its runtime has shut
//! down: nothing panics, and the connection a hold had is closed, so the server frees the lock.
//!
//! Run: `cargo test -p lock-mysql --test runtime_gone`.

use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use lock_mysql::{Mode, MySqlLock, lock_name};
use lock_testkit::eventually;
use lock_testkit::server::{external_url, shared_mariadb};

fn url() -> String {
    external_url("mysql").unwrap_or_else(|| shared_mariadb().url())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
}

async fn new_locker(url: &str, mode: Mode) -> Locker {
    let lock = MySqlLock::builder()
        .url(url)
        .mode(mode)
        .keepalive(Duration::from_millis(100))
        .build()
        .await
        .expect("build");
    Locker::new(std::sync::Arc::new(lock))
}

/// Another client, on a runtime of its own, takes `k` (once the server has seen the dropped
/// connections go).
fn taken_again(url: &str, mode: Mode, k: &str) {
    runtime().block_on(async {
        let other = new_locker(url, mode).await;
        eventually(Duration::from_secs(10), "the key is free again", || async {
            match other.try_lock(k).await.expect("try") {
                Some(g) => g.release().await.is_ok(),
                None => false,
            }
        })
        .await;
    });
}

/// Take a key on a runtime of its own (releasing it again with `release_first`: the connection
/// is then kept for the next hold), shut that runtime down, then drop the guard and the
/// `Locker`. Another client then takes the key.
fn drop_after_the_runtime(mode: Mode, release_first: bool) {
    let url = url();
    let k = format!("runtime-gone-{}", OwnerToken::random());
    let rt = runtime();
    let (locker, guard) = rt.block_on(async {
        let l = new_locker(&url, mode).await;
        let g = l.try_lock(&k).await.expect("try").expect("free");
        if release_first {
            g.release().await.expect("release");
            return (l, None);
        }
        (l, Some(g))
    });
    drop(rt);
    drop(guard);
    drop(locker);

    taken_again(&url, mode, &k);
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
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    lock_mysql::sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND INFO NOT LIKE '%PROCESSLIST%'",
    )
    .bind(format!("%X'{hex}'%"))
    .fetch_one(admin)
    .await
    .expect("processlist")
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
    taken_again(&url, mode, &k);
}

#[test]
fn pessimistic_waiting_acquisition_dropped_after_its_runtime() {
    waiting_acquisition_dropped_after_the_runtime(Mode::Pessimistic);
}

#[test]
fn named_waiting_acquisition_dropped_after_its_runtime() {
    waiting_acquisition_dropped_after_the_runtime(Mode::NamedLock);
}
