//! Fault tests against real mariadbd processes, by what goes wrong: the server and its sessions
//! (`server`), hostile or wrong input (`input`), cancelled and cut-off acquisitions (`cancel`),
//! and holds under faults (`holds`).
//!
//! Run: `cargo test -p lock-mysql --test mysql faults::`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, LockBackend, Side};
use lock_core::{LeaseSignal, LeaseState, LockError, Locker, OwnerToken};
use lock_mysql::sqlx::AssertSqlSafe;
use lock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use lock_mysql::{Mode, MySqlLock, validate_table_name};
use lock_mysql_testing::MariaDbServer;
use lock_testkit::{cut_after, within};
use tokio::time::Instant;

use crate::common;

mod cancel;
mod holds;
mod input;
mod server;

use common::{
    IDLE_BOUNDS_ARE_GLOBAL, KEEPALIVE, admin, backend, builder, shared_url, statements_like, until_running,
};

fn key(case: &str) -> String {
    format!("faults-{case}-{}", OwnerToken::random())
}

/// Polls `cond` until it holds or `limit` passes; returns how long it took.
async fn until<F: Future<Output = bool>>(
    limit: Duration,
    what: &str,
    mut cond: impl FnMut() -> F,
) -> Duration {
    let t = Instant::now();
    while !cond().await {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    t.elapsed()
}

/// Asserts that `locker` is refused `key` on every attempt for `span`.
async fn refused_for(locker: &Locker, key: &str, span: Duration, what: &str) {
    let t = Instant::now();
    while t.elapsed() < span {
        if let Some(g) = locker.try_lock(key).await.expect("try") {
            let at = t.elapsed();
            g.release().await.expect("release");
            panic!("{what}: another client acquired after {at:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
