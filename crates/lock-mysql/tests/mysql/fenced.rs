//! `lock_mysql::fenced`: the user's own transaction refuses a write whose fence is older than
//! one admitted before, against the real server.
//!
//! Run: `cargo test -p lock-mysql --test mysql fenced::`.

use std::time::Duration;

use lock_core::fenced::FenceError;
use lock_core::{FencingToken, Locker, OwnerToken};
use lock_mysql::Mode;
use lock_mysql::fenced::{Fences, MAX_RESOURCE};
use lock_mysql::sqlx::{self, AssertSqlSafe, MySqlPool};

use crate::common;

/// A table of fences and one account row at 100, both private to the calling test.
async fn ledger(db: &MySqlPool) -> (Fences, String) {
    let id = OwnerToken::random().to_string();
    let fences = Fences::new(&format!("fences_{}", &id[..12])).expect("table name");
    fences.create_table(db).await.expect("create fences");
    let accounts = format!("accounts_{}", &id[..12]);
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {accounts} (id INT PRIMARY KEY, balance INT NOT NULL) ENGINE=InnoDB"
    )))
    .execute(db)
    .await
    .expect("create accounts");
    sqlx::query(AssertSqlSafe(format!("INSERT INTO {accounts} VALUES (42, 100)")))
        .execute(db)
        .await
        .expect("insert");
    (fences, accounts)
}

/// Takes 30 from the account in one transaction, admitted by `fence` first.
async fn withdraw(
    db: &MySqlPool,
    fences: &Fences,
    accounts: &str,
    resource: &str,
    fence: FencingToken,
) -> Result<(), FenceError<sqlx::Error>> {
    let mut tx = db.begin().await.expect("begin");
    fences.admit(&mut tx, resource, fence).await?;
    sqlx::query(AssertSqlSafe(format!("UPDATE {accounts} SET balance = balance - 30 WHERE id = 42")))
        .execute(&mut *tx)
        .await
        .expect("update");
    tx.commit().await.expect("commit");
    Ok(())
}

async fn balance(db: &MySqlPool, accounts: &str) -> i32 {
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT balance FROM {accounts} WHERE id = 42")))
        .fetch_one(db)
        .await
        .expect("read")
}

/// The classic failure: the holder is paused past its fixed lease, the next holder takes the
/// lock (the database's clock says the lease ran out) and writes, and the paused holder wakes
/// and writes with its older fence. The database refuses that late write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused() {
    let url = common::shared_url();
    let db = common::admin(&url).await;
    let (fences, accounts) = ledger(&db).await;
    let a = Locker::new(common::backend(&url, Mode::Optimistic).await);
    let b = Locker::new(common::backend(&url, Mode::Optimistic).await);
    let k = format!("fenced-{}", OwnerToken::random());

    let ga = a.lock(&k).lease(Duration::from_millis(300)).try_acquire().await.expect("try").expect("free");
    let fa = ga.fence().expect("fenced");
    // The holder is paused now: nothing renews its lease. The next holder waits it out.
    let gb = b.lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("the next holder");
    let fb = gb.fence().expect("fenced");
    assert!(fb > fa, "{fb} after {fa}");
    withdraw(&db, &fences, &accounts, "account:42", fb).await.expect("the holder writes");

    let late =
        withdraw(&db, &fences, &accounts, "account:42", fa).await.expect_err("the late write is refused");
    let stale = late.stale().expect("refused as stale");
    assert_eq!((stale.fence(), stale.seen(), stale.resource()), (fa, fb, "account:42"));
    assert_eq!(balance(&db, &accounts).await, 70, "only the current holder's write landed");
    gb.release().await.expect("release");
}

/// A resent or repeated admit of one fence is admitted again, an older one is refused, and
/// input no column can hold is refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hold_writes_again_and_an_older_fence_is_refused() {
    let url = common::shared_url();
    let db = common::admin(&url).await;
    let (fences, accounts) = ledger(&db).await;
    let r = "account:42";
    let mut tx = db.begin().await.expect("begin");
    for _ in 0..2 {
        fences.admit(&mut tx, r, FencingToken(7)).await.expect("admitted, twice in one transaction");
    }
    tx.commit().await.expect("commit");
    withdraw(&db, &fences, &accounts, r, FencingToken(7)).await.expect("the same hold writes again");
    let older = withdraw(&db, &fences, &accounts, r, FencingToken(6)).await.expect_err("older");
    assert_eq!(older.stale().map(|s| s.seen()), Some(FencingToken(7)));
    let huge = withdraw(&db, &fences, &accounts, r, FencingToken(u64::MAX)).await.expect_err("too large");
    assert!(matches!(huge, FenceError::Invalid { .. }), "{huge}");
    let long = "r".repeat(MAX_RESOURCE + 1);
    let long = withdraw(&db, &fences, &accounts, &long, FencingToken(9)).await.expect_err("too long");
    assert!(matches!(long, FenceError::Invalid { .. }), "{long}");
    assert!(Fences::new("x`; DROP TABLE y").is_err(), "a table name that is not a plain name");
    assert_eq!(balance(&db, &accounts).await, 70);
    withdraw(&db, &fences, &accounts, "ACCOUNT:42", FencingToken(1))
        .await
        .expect("another resource, by case");
    assert_eq!(balance(&db, &accounts).await, 40);
}

/// The settings an admit could be tempted to change, as the caller's session sees them.
const SETTINGS: &str = "SELECT CONCAT_WS(',', @@SESSION.tx_isolation, @@SESSION.innodb_lock_wait_timeout, \
    @@SESSION.lock_wait_timeout, @@SESSION.autocommit, @@SESSION.sql_mode, @@SESSION.max_statement_time)";

/// An admit runs in the caller's transaction and leaves its settings as they were, in the
/// transaction and after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admit_leaves_the_callers_settings_as_they_were() {
    let url = common::shared_url();
    let db = common::admin(&url).await;
    let (fences, _) = ledger(&db).await;
    let mut conn = db.acquire().await.expect("connection");
    let before: String = sqlx::query_scalar(SETTINGS).fetch_one(&mut *conn).await.expect("settings");
    let mut tx = sqlx::Acquire::begin(&mut *conn).await.expect("begin");
    let chosen: String = sqlx::query_scalar(SETTINGS).fetch_one(&mut *tx).await.expect("settings");
    fences.admit(&mut tx, "settings", FencingToken(1)).await.expect("admit");
    let during: String = sqlx::query_scalar(SETTINGS).fetch_one(&mut *tx).await.expect("settings");
    assert_eq!(during, chosen, "inside the caller's transaction");
    tx.commit().await.expect("commit");
    let after: String = sqlx::query_scalar(SETTINGS).fetch_one(&mut *conn).await.expect("settings");
    assert_eq!(after, before, "on the caller's connection after it");
}
