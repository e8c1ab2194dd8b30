//! `fencing(false)` (URL `?fencing=false`): a grant writes nothing (no fence row), its guard has
//! no token, the capability flags say so, and what names a hold by its token (notes,
//! force-unlock) answers `Unsupported`; unfenced and fenced clients of one name exclude each
//! other. The conformance suite runs unfenced too (`tests/postgres.rs`, module `unfenced`).
//!
//! Run: `cargo test -p lock-postgres --test postgres unfenced::`.

use std::sync::Arc;

use lock_core::{LockBackend, LockError, Locker};
use lock_postgres::PgLock;
use lock_postgres::sqlx;

use crate::common;
use common::{admin, backend, key, shared};
use lock_core::backend::{Admin, Notes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_grant_writes_nothing_and_says_so() {
    let Some((url, admin_url)) = shared() else { return };
    let sep = if url.contains('?') { '&' } else { '?' };
    let pg = Arc::new(PgLock::from_url(&format!("{url}{sep}fencing=false")).await.expect("build"));
    assert!(!pg.is_fenced());
    let caps = pg.capabilities();
    assert!(!caps.fencing && pg.notes().is_none(), "{caps:?}");
    let unfenced = Locker::new(pg.clone());
    let fenced = Locker::new(backend(&url).await);
    let k = key("unfenced");

    let held = unfenced.try_lock(&k).await.expect("try").expect("free");
    assert_eq!(held.fence(), None, "no token without fencing");
    let admin = admin(&admin_url).await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM dlock_fence WHERE name = $1")
        .bind(k.as_bytes())
        .fetch_one(&admin)
        .await
        .expect("count");
    assert_eq!(rows, 0, "an unfenced grant writes no fence row");
    assert!(fenced.try_lock(&k).await.expect("try").is_none(), "a fenced client is kept out");
    for refused in [pg.evict(&k, lock_core::FencingToken(1)).await.map(|_| ()), pg.note(&k).await.map(|_| ())]
    {
        assert!(matches!(refused, Err(LockError::Unsupported { .. })), "{refused:?}");
    }
    held.release().await.expect("release");

    let theirs = fenced.try_lock(&k).await.expect("try").expect("free again");
    assert!(theirs.fence().is_some());
    assert!(unfenced.try_lock(&k).await.expect("try").is_none(), "an unfenced client is kept out");
    theirs.release().await.expect("release");
}
