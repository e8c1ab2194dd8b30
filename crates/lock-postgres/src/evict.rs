//! Force-unlock (`Admin::evict`): a session advisory lock goes only with its session, so
//! the holder's session is ended, after checking in the same transaction that the name's fence
//! is the one the operator inspected (`sql/evict_*.sql`).

use lock_core::{FencingToken, Result};
use sqlx::AssertSqlSafe;
use tokio::time::Instant;

use crate::keys::{advisory_key, lock_ids};
use crate::session::{Advisory, answered_by};

impl Advisory {
    /// Ends the session holding `key` if the name's fence is `fence`; `false` when it is not,
    /// or nobody holds the key exclusively. The fence row stays locked until the holder's
    /// session is gone, so no later grant can be the one ended. A grant racing in (it took the
    /// advisory lock and waits for the row) may be ended instead: its acquisition fails and is
    /// retried, never held with a stale fence.
    pub(crate) async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let (classid, objid) = lock_ids(advisory_key(key));
        // The termination waits up to 5 s for the session to go; the rest is two statements.
        let bound = Instant::now() + self.server_idle() * 2 + std::time::Duration::from_secs(5);
        let mut tx = answered_by("evict", bound, self.pool().begin()).await?;
        let current: Option<i64> = answered_by(
            "evict",
            bound,
            sqlx::query_scalar(AssertSqlSafe(self.sql().evict_fence.as_str()))
                .bind(key.as_bytes())
                .fetch_optional(&mut *tx),
        )
        .await?;
        if current.and_then(|f| u64::try_from(f).ok()) != Some(fence.0) {
            return Ok(false); // the transaction rolls back as it is dropped
        }
        let ended: bool = answered_by(
            "evict",
            bound,
            sqlx::query_scalar(AssertSqlSafe(self.sql().evict_holder.as_str()))
                .bind(classid)
                .bind(objid)
                .fetch_one(&mut *tx),
        )
        .await?;
        answered_by("evict", bound, tx.commit()).await?;
        Ok(ended)
    }
}
