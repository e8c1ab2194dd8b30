//! PostgreSQL behind PgBouncer: a transaction-pooling one is refused when building (a session
//! lock would stay with a server session other clients get next), through a URL or the
//! caller's pool; a session-pooling one locks as PostgreSQL itself; and code in a transaction
//! through the transaction pooler locks in it with `lock_in_transaction` on a `PgLock` built on
//! a direct connection.
//!
//! Run: `cargo test -p lock-postgres --test postgres pgbouncer::`.

use std::str::FromStr;
use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_postgres::PgLock;
use lock_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use lock_postgres_testing::{PgBouncer, PgServer, try_shared_postgres};
use lock_testkit::server::or_skip;

use crate::common;
use common::key;

/// The shared PostgreSQL and a PgBouncer in `mode` in front of it.
fn bouncer(mode: &str) -> Option<(&'static PgServer, PgBouncer)> {
    let pg = or_skip("postgres", try_shared_postgres())?;
    let bouncer = or_skip("pgbouncer", PgBouncer::start(pg, mode))?;
    Some((pg, bouncer))
}

fn refused_as_pooled(built: Result<PgLock, LockError>) {
    let err = built.expect_err("a transaction pooler must be refused");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("transaction-pooling") && msg.contains("lock_in_transaction"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_is_refused_when_building() {
    for mode in ["transaction", "statement"] {
        let Some((_pg, bouncer)) = bouncer(mode) else { return };
        refused_as_pooled(PgLock::from_url(&bouncer.url()).await);
        let pool = PgPoolOptions::new().max_connections(4).connect_lazy_with(
            PgConnectOptions::from_str(&bouncer.url()).expect("url").statement_cache_capacity(0),
        );
        refused_as_pooled(PgLock::builder().pool(pool).build().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_pooler_locks_as_postgres_itself() {
    let Some((_pg, bouncer)) = bouncer("session") else { return };
    let a =
        Locker::new(std::sync::Arc::new(PgLock::from_url(&bouncer.url()).await.expect("session pooling")));
    let b =
        Locker::new(std::sync::Arc::new(PgLock::from_url(&bouncer.url()).await.expect("session pooling")));
    let k = key("bouncer-session");
    let held = a.try_lock(&k).await.expect("try").expect("free");
    assert!(b.try_lock(&k).await.expect("try").is_none(), "held by the other client");
    let waiting = b.lock(&k).wait(Duration::from_secs(5)).acquire();
    let (released, next) = tokio::join!(held.release(), waiting);
    released.expect("release");
    next.expect("the waiter gets it").release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_through_the_pooler_locks_in_it() {
    let Some((pg, bouncer)) = bouncer("transaction") else { return };
    let direct = PgLock::from_url(&pg.url()).await.expect("direct");
    // A transaction pooler keeps no prepared statement between transactions.
    let opts = PgConnectOptions::from_str(&bouncer.url()).expect("url").statement_cache_capacity(0);
    let pooled = PgPoolOptions::new().max_connections(4).connect_with(opts).await.expect("pool");
    let k = key("bouncer-xact");
    let mut tx = pooled.begin().await.expect("begin");
    let fence = direct.lock_in_transaction(&mut tx, &k, Duration::from_secs(2)).await.expect("lock");
    let mut other = pooled.begin().await.expect("begin");
    assert_eq!(direct.try_lock_in_transaction(&mut other, &k).await.expect("try"), None, "held by tx");
    tx.commit().await.expect("commit");
    let next =
        direct.try_lock_in_transaction(&mut other, &k).await.expect("try").expect("released at commit");
    assert!(next > fence, "{next:?} after {fence:?}");
    other.rollback().await.expect("rollback");
}
