//! Helpers shared by the test binaries (`mod common;` in each; cargo builds only the files
//! directly under `tests/`): the shared server, backends with a short keep-alive, an
//! administrator pool and the server's running statements.

// Each test binary uses its own subset.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use lock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use lock_mysql::{Mode, MySqlLock, MySqlLockBuilder};
use lock_mysql_testing::shared_mariadb;

/// The keep-alive of the tests' backends: the server's idle bound for a holding session is then
/// its floor, 2 s.
pub const KEEPALIVE: Duration = Duration::from_millis(100);

/// `LOCK_TEST_MYSQL_URL`, else the private mariadbd this test process shares.
pub fn shared_url() -> String {
    lock_mysql_testing::external_url().unwrap_or_else(|| shared_mariadb().url())
}

/// A builder on `url` in `mode` with the [`KEEPALIVE`].
pub fn builder(url: &str, mode: Mode) -> MySqlLockBuilder {
    MySqlLock::builder().url(url).mode(mode).keepalive(KEEPALIVE)
}

/// A backend on `url` in `mode` with the [`KEEPALIVE`] and a 2 s acquire timeout.
pub async fn backend(url: &str, mode: Mode) -> Arc<MySqlLock> {
    Arc::new(builder(url, mode).acquire_timeout(Duration::from_secs(2)).build().await.expect("build"))
}

pub async fn admin(url: &str) -> MySqlPool {
    MySqlPoolOptions::new().max_connections(2).connect(url).await.expect("admin pool")
}

/// A condition true on a session whose idle bounds are the server's: a holding session sets its
/// own, and a connection back in the pool must have them reset.
pub const IDLE_BOUNDS_ARE_GLOBAL: &str = "@@SESSION.wait_timeout = @@GLOBAL.wait_timeout \
    AND @@SESSION.idle_transaction_timeout = @@GLOBAL.idle_transaction_timeout \
    AND @@SESSION.idle_write_transaction_timeout = @@GLOBAL.idle_write_transaction_timeout \
    AND @@SESSION.idle_readonly_transaction_timeout = @@GLOBAL.idle_readonly_transaction_timeout";

/// How many statements matching `pattern` (LIKE) run on the server now, the query itself not
/// counted; the same user's threads are visible without the PROCESS privilege.
pub async fn statements_like(pool: &MySqlPool, pattern: &str) -> i64 {
    statements_like_except(pool, pattern, "%PROCESSLIST%").await
}

/// Until a statement like `pattern` runs on the server (a waiter waits in its queue), for at
/// most 10 s; `what` names the wait in the failure.
pub async fn until_running(pool: &MySqlPool, pattern: &str, what: &str) {
    lock_testkit::eventually(Duration::from_secs(10), what, || statements_like(pool, pattern).map(|n| n > 0))
        .await;
}

/// [`statements_like`], leaving out the statements that are also like `except` (and this
/// count's own query).
pub async fn statements_like_except(pool: &MySqlPool, pattern: &str, except: &str) -> i64 {
    lock_mysql::sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE INFO LIKE ? AND INFO NOT LIKE ? AND INFO NOT LIKE '%PROCESSLIST%'",
    )
    .bind(pattern)
    .bind(except)
    .fetch_one(pool)
    .await
    .expect("processlist")
}

/// How many sessions wait in a `GET_LOCK` like `pattern` now: in the server's `User lock`
/// state, so a statement that merely names `GET_LOCK` (a `PREPARE` on a connection being
/// warmed, a try that answers at once) is not counted.
pub async fn lock_waits_like(pool: &MySqlPool, pattern: &str) -> i64 {
    lock_mysql::sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE ?",
    )
    .bind(pattern)
    .fetch_one(pool)
    .await
    .expect("processlist")
}

/// `bytes` in lower-case hex, as a statement's `X'..'` literal names a key or lock name.
pub fn hex(bytes: impl AsRef<[u8]>) -> String {
    bytes.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}
