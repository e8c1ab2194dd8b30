//! Locks inside the caller's own transaction (`PgLock::lock_in_transaction`): held until that
//! transaction commits or rolls back, exclusive with this backend's session locks of the same
//! key (both ways), fenced above every earlier holder, and a wait that times out leaves the
//! transaction usable; a grant, a timeout or an error leaves the caller's settings as they were.
//!
//! Run: `cargo test -p lock-postgres --test postgres transaction::`.

use std::time::Duration;

use lock_core::{LockError, Locker};

use crate::common;
use common::{backend, key, shared};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_lives_and_ends_with_its_transaction() {
    let Some((url, _)) = shared() else { return };
    let pg = backend(&url).await;
    let session = Locker::new(backend(&url).await);
    let k = key("xact");

    // A session holder excludes the transaction; its fence is the floor for the next.
    let held = session.try_lock(&k).await.expect("try").expect("free");
    let floor = held.fence().expect("fenced");
    let mut tx = pg.pool().begin().await.expect("begin");
    assert_eq!(pg.try_lock_in_transaction(&mut tx, &k).await.expect("try"), None, "the session holds it");
    // A bounded wait that runs out is a Timeout, and the transaction goes on.
    let waited = pg.lock_in_transaction(&mut tx, &k, Duration::from_millis(200)).await;
    assert!(matches!(waited, Err(LockError::Timeout { .. })), "{waited:?}");
    let one: i32 = lock_postgres::sqlx::query_scalar("SELECT 1").fetch_one(&mut *tx).await.expect("usable");
    assert_eq!(one, 1);
    held.release().await.expect("release");

    // Taken in the transaction: the session side is refused until the transaction commits.
    let fence = pg.lock_in_transaction(&mut tx, &k, Duration::from_secs(5)).await.expect("free now");
    assert!(fence > floor, "{fence:?} after {floor:?}");
    assert!(session.try_lock(&k).await.expect("try").is_none(), "held by the transaction");
    tx.commit().await.expect("commit");
    let after = session.try_lock(&k).await.expect("try").expect("released at commit");
    assert!(after.fence().expect("fenced") > fence, "the next holder's fence is larger");
    after.release().await.expect("release");

    // A rollback releases it too; the fence drawn stays used (it was committed on its own).
    let mut tx = pg.pool().begin().await.expect("begin");
    let rolled = pg.try_lock_in_transaction(&mut tx, &k).await.expect("try").expect("free");
    assert!(session.try_lock(&k).await.expect("try").is_none(), "held by the transaction");
    tx.rollback().await.expect("rollback");
    let next = session.try_lock(&k).await.expect("try").expect("released at rollback");
    assert!(
        next.fence().expect("fenced") > rolled,
        "a rolled-back transaction's token is not handed out again"
    );
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_transactions_exclude_each_other() {
    let Some((url, _)) = shared() else { return };
    let pg = backend(&url).await;
    let k = key("xact-pair");
    let mut a = pg.pool().begin().await.expect("begin");
    let mut b = pg.pool().begin().await.expect("begin");
    pg.try_lock_in_transaction(&mut a, &k).await.expect("try").expect("free");
    assert_eq!(pg.try_lock_in_transaction(&mut b, &k).await.expect("try"), None, "a holds it");
    let waiting = {
        let pg = pg.clone();
        let k = k.clone();
        tokio::spawn(async move {
            let fence = pg.lock_in_transaction(&mut b, &k, Duration::from_secs(10)).await;
            (fence, b)
        })
    };
    a.commit().await.expect("commit");
    let (fence, b) = waiting.await.expect("task");
    fence.expect("b gets it when a commits");
    b.rollback().await.expect("rollback");
    assert!(matches!(
        pg.try_lock_in_transaction(&mut pg.pool().begin().await.expect("begin"), "").await,
        Err(LockError::InvalidKey { .. })
    ));
}

/// `(lock_timeout, statement_timeout)` as the caller's transaction sees them.
async fn settings(tx: &mut lock_postgres::sqlx::PgConnection) -> (String, String) {
    lock_postgres::sqlx::query_as(
        "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')",
    )
    .fetch_one(&mut *tx)
    .await
    .expect("settings")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_leaves_the_callers_settings_as_they_were() {
    use lock_postgres::sqlx::{Connection, query, query_scalar};
    let Some((url, admin_url)) = shared() else { return };
    let (pg, admin) = (backend(&url).await, common::admin(&admin_url).await);
    let session = Locker::new(backend(&url).await);
    let mut conn = pg.pool().acquire().await.expect("connection");
    let pid: i32 = query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *conn).await.expect("pid");
    let mut tx = conn.begin().await.expect("begin");
    // The server's defaults first, then values the caller set in its transaction.
    for set in [None, Some("SET LOCAL lock_timeout = '7s'; SET LOCAL statement_timeout = '9s'")] {
        if let Some(set) = set {
            lock_postgres::sqlx::raw_sql(set).execute(&mut *tx).await.expect("set");
        }
        let before = settings(&mut tx).await;
        let (k, held) = (key("xact-settings"), key("xact-settings-held"));
        pg.lock_in_transaction(&mut tx, &k, Duration::from_secs(5)).await.expect("granted");
        assert_eq!(settings(&mut tx).await, before, "after a grant");

        let holder = session.try_lock(&held).await.expect("try").expect("free");
        let waited = pg.lock_in_transaction(&mut tx, &held, Duration::from_millis(200)).await;
        assert!(matches!(waited, Err(LockError::Timeout { .. })), "{waited:?}");
        assert_eq!(settings(&mut tx).await, before, "after a timeout");

        // A wait ended by an error of the server's (a cancel, as an administrator's).
        let waiting = pg.lock_in_transaction(&mut tx, &held, Duration::from_secs(20));
        let cancel = async {
            let (admin, held) = (&admin, &held);
            lock_testkit::eventually(Duration::from_secs(10), "the wait queued", move || async move {
                common::advisory_locks(admin, held).await.1 == 1
            })
            .await;
            query("SELECT pg_cancel_backend($1)").bind(pid).execute(admin).await.expect("cancel");
        };
        let (waited, ()) = tokio::join!(waiting, cancel);
        assert!(waited.is_err() && !matches!(waited, Err(LockError::Timeout { .. })), "{waited:?}");
        assert_eq!(settings(&mut tx).await, before, "after an error");
        holder.release().await.expect("release");
    }
    tx.rollback().await.expect("rollback");
    assert_eq!(settings(&mut conn).await, ("0".to_owned(), "0".to_owned()), "the session's own");
}
