//! What a connection carries back to the pool and what outlives the runtime: a wait that
//! fails after its grant leaves no advisory lock on a pooled connection, and a `Locker` dropped
//! after its runtime has shut down neither panics nor keeps its lock.
//!
//! Run: `cargo test -p lock-postgres --test postgres hygiene::`.

use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_postgres::sqlx;
use lock_testkit::runtime_gone::{dropped_after_the_runtime, runtime};
use lock_testkit::{eventually, within};

use crate::common;
use common::{admin, advisory_locks, backend, key, lock_ids, lockers, shared};

const ANSWER: Duration = Duration::from_secs(10);

/// The backend pid granted the advisory key of `name` while it waits for another lock (the
/// fence row), if there is one.
async fn blocked_holder(admin: &sqlx::PgPool, name: &str) -> Option<i32> {
    let (classid, objid) = lock_ids(name);
    sqlx::query_scalar(
        "SELECT a.pid FROM pg_locks a WHERE a.locktype = 'advisory' AND a.granted \
         AND a.classid = $1::bigint::oid AND a.objid = $2::bigint::oid AND a.objsubid = 1 \
         AND EXISTS (SELECT 1 FROM pg_locks w WHERE w.pid = a.pid AND NOT w.granted AND w.locktype <> 'advisory')",
    )
    .bind(classid)
    .bind(objid)
    .fetch_optional(admin)
    .await
    .expect("pg_locks")
}

/// A waiter granted the advisory lock whose fence write then fails (cancelled while another
/// transaction locks the fence row) does not pool its connection with the lock on it: once the
/// waiter is done and the row is free, a third client takes the key at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_failing_after_the_grant_pools_no_lock() {
    let Some((url, admin_url)) = shared() else { return };
    let admin = admin(&admin_url).await;
    let [a, b, c] = lockers(&url).await;
    let k = key("fence-write-fails");
    let g = a.try_lock(&k).await.expect("try").expect("free");

    // Another transaction locks the name's fence row: a grant's fence write waits for it.
    let mut row = admin.begin().await.expect("begin");
    sqlx::query("SELECT fence FROM dlock_fence WHERE name = $1 FOR UPDATE")
        .bind(k.as_bytes())
        .fetch_one(&mut *row)
        .await
        .expect("lock the fence row");

    let (b2, k2) = (b.clone(), k.clone());
    let waiter = tokio::spawn(async move { b2.lock(&k2).wait(ANSWER).acquire().await });
    eventually(ANSWER, "b waits for the advisory key", || async {
        advisory_locks(&admin, &k).await == (1, 1)
    })
    .await;
    g.release().await.expect("release");
    // b's wait is granted the key, then its fence write waits for the row: cancel it there.
    eventually(ANSWER, "b holds the key and waits for the fence row", || async {
        blocked_holder(&admin, &k).await.is_some()
    })
    .await;
    let pid = blocked_holder(&admin, &k).await.expect("b's pid");
    let cancelled: bool =
        sqlx::query_scalar("SELECT pg_cancel_backend($1)").bind(pid).fetch_one(&admin).await.expect("cancel");
    assert!(cancelled);
    row.rollback().await.expect("rollback");

    match within(ANSWER, "b's acquisition", waiter).await.expect("join") {
        Ok(g) => g.release().await.expect("b's release"),
        Err(e) => eprintln!("b did not acquire: {e}"),
    }
    let left = advisory_locks(&admin, &k).await;
    let got = c.try_lock(&k).await.expect("c's try");
    assert!(
        got.is_some(),
        "a pooled connection of b still holds the key (pg_locks granted/waiting {left:?})"
    );
    assert_eq!(left, (0, 0));
}

/// A `Locker` holding a lock (and its guard), or one whose lock was released, dropped after its
/// runtime shut down: no panic, and another client then takes the key.
fn drop_after_the_runtime(release_first: bool) {
    let Some((url, _)) = shared() else { return };
    let k = format!("runtime-gone-{}", OwnerToken::random());
    let locker = || async { Locker::new(backend(&url).await) };
    dropped_after_the_runtime(locker, &k, release_first, ANSWER);
}

#[test]
fn locker_holding_a_lock_dropped_after_its_runtime() {
    drop_after_the_runtime(false);
}

#[test]
fn locker_dropped_after_its_runtime() {
    drop_after_the_runtime(true);
}

/// An acquisition waiting in the server's queue, dropped after its runtime shut down (the future
/// outlived the runtime that polled it): no panic, and neither the wait nor the hold (whose
/// keeper went with the runtime) is left on the server.
#[test]
fn waiting_acquisition_dropped_after_its_runtime() {
    let Some((url, admin_url)) = shared() else { return };
    let k = format!("runtime-gone-wait-{}", OwnerToken::random());
    let rt = runtime();
    let (held, waiting) = rt.block_on(async {
        let admin = admin(&admin_url).await;
        let g = Locker::new(backend(&url).await).try_lock(&k).await.expect("try").expect("free");
        let (waiter, k2) = (Locker::new(backend(&url).await), k.clone());
        let mut waiting = Box::pin(async move { waiter.lock(&k2).wait(ANSWER).acquire().await });
        tokio::select! {
            r = &mut waiting => panic!("granted while held: {r:?}"),
            () = eventually(ANSWER, "the waiter queues", || async { advisory_locks(&admin, &k).await == (1, 1) }) => {}
        }
        (g, waiting)
    });
    drop(rt);
    drop(waiting);
    drop(held);
    runtime().block_on(async {
        let admin = admin(&admin_url).await;
        eventually(ANSWER, "nothing left on the server", || async {
            advisory_locks(&admin, &k).await == (0, 0)
        })
        .await;
    });
}
