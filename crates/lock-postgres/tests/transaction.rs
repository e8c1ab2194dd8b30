//! Locks inside the caller's own transaction (`PgLock::lock_in_transaction`): held until that
//! transaction commits or rolls back, exclusive with this backend's session locks of the same
//! key (both ways), fenced above every earlier holder, and a wait that times out leaves the
//! transaction usable.
//!
//! Run: `cargo test -p lock-postgres --test transaction`.

use std::time::Duration;

use lock_core::{LockError, Locker};

mod common;
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
