//! Helpers shared by the fault test binaries: the shared server, backends with a short
//! keep-alive, an administrator pool, fresh keys and the advisory key's rows in `pg_locks`.

// Each test binary uses its own subset.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_postgres::sqlx::postgres::{PgPool, PgPoolOptions};
use lock_postgres::{PgLock, advisory_key};
use lock_postgres_testing::try_shared_postgres;
use lock_testkit::server::require_servers;

pub const KEEPALIVE: Duration = Duration::from_millis(100);

/// The shared server's (lock role URL, administrator URL), or `None` after printing why not.
pub fn shared() -> Option<(String, String)> {
    if let Some(url) = lock_postgres_testing::external_url() {
        return Some((url.clone(), url));
    }
    match try_shared_postgres() {
        Ok(s) => Some((s.url(), s.admin_url())),
        Err(e) if e.is_missing_binary() && !require_servers() => {
            eprintln!("SKIPPED postgres faults: {e}");
            None
        }
        Err(e) => panic!("shared postgres: {e}"),
    }
}

pub async fn backend(url: &str) -> Arc<PgLock> {
    let lock = PgLock::builder()
        .url(url)
        .keepalive(KEEPALIVE)
        .acquire_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("build");
    Arc::new(lock)
}

/// `N` clients of [`backend`]s on `url`, each with its own pool.
pub async fn lockers<const N: usize>(url: &str) -> [Locker; N] {
    let mut all = Vec::with_capacity(N);
    for _ in 0..N {
        all.push(Locker::new(backend(url).await));
    }
    all.try_into().unwrap_or_else(|_| unreachable!("N lockers made"))
}

pub async fn admin(url: &str) -> PgPool {
    PgPoolOptions::new().max_connections(2).connect(url).await.expect("admin pool")
}

pub fn key(case: &str) -> String {
    format!("faults-{case}-{}", OwnerToken::random())
}

/// `(classid, objid)` of the advisory key of `name`, as `pg_locks` shows it.
pub fn lock_ids(name: &str) -> (i64, i64) {
    let k = advisory_key(name) as u64;
    (i64::from((k >> 32) as u32), i64::from(k as u32))
}

/// `(granted, waiting)` rows of `pg_locks` for the advisory key of `name`.
pub async fn advisory_locks(admin: &PgPool, name: &str) -> (i64, i64) {
    let (classid, objid) = lock_ids(name);
    lock_postgres::sqlx::query_as(
        "SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) FROM pg_locks \
         WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1",
    )
    .bind(classid)
    .bind(objid)
    .fetch_one(admin)
    .await
    .expect("pg_locks")
}
