//! Locks inside the caller's own transaction (`pg_advisory_xact_lock`): the server releases
//! them when the transaction commits or rolls back, so the work and the lock end together and
//! nothing is left to release. They exclude, and are excluded by, this backend's session locks
//! of the same key. For code that already runs in a transaction: a lock held across a
//! transaction-pooling PgBouncer must be one of these (a session lock would stay with a
//! server connection other clients then get).

use std::time::Duration;

use lock_core::{FencingToken, LockError, Result, validate_key};
use sqlx::{AssertSqlSafe, PgConnection};

use crate::PgLock;
use crate::error::{LOCK_NOT_AVAILABLE, NAME, classify, sqlstate};
use crate::key::advisory_key;

/// Waits for the key for the rest of the caller's transaction (bounded by `lock_timeout`).
const WAIT: &str = "SELECT pg_advisory_xact_lock($1)";
/// One try for the rest of the caller's transaction: whether it is held.
const TRY: &str = "SELECT pg_try_advisory_xact_lock($1)";

impl PgLock {
    /// Take `key` inside the transaction `tx` (a `&mut *transaction` of the caller's
    /// `sqlx::Transaction`), waiting up to `wait`; held until that transaction ends. Answers
    /// the hold's fencing token, larger than every earlier holder's of `key`, session or
    /// transaction.
    ///
    /// # Errors
    /// [`LockError::Timeout`] when `wait` ran out (the transaction stays usable: the wait runs
    /// in a savepoint); invalid keys; backend errors.
    pub async fn lock_in_transaction(
        &self,
        tx: &mut PgConnection,
        key: &str,
        wait: Duration,
    ) -> Result<FencingToken> {
        validate_key(key)?;
        let started = std::time::Instant::now();
        // The wait's bound is this statement's only: the savepoint restores the caller's
        // lock_timeout, and keeps the transaction usable when the wait times out.
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        sqlx::raw_sql("SAVEPOINT dlock_xact_wait").execute(&mut *tx).await.map_err(classify)?;
        let waited = async {
            sqlx::query("SELECT set_config('lock_timeout', $1, true)")
                .bind(format!("{ms}ms"))
                .execute(&mut *tx)
                .await?;
            sqlx::query(WAIT).bind(advisory_key(key)).execute(&mut *tx).await
        }
        .await;
        match waited {
            Ok(_) => {
                // RELEASE keeps the lock (transaction-scoped locks outlive their savepoint)
                // and drops the savepoint's lock_timeout.
                sqlx::raw_sql("RELEASE SAVEPOINT dlock_xact_wait")
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
                self.xact_fence(key).await
            }
            Err(e) => {
                sqlx::raw_sql("ROLLBACK TO SAVEPOINT dlock_xact_wait; RELEASE SAVEPOINT dlock_xact_wait")
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
                if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) {
                    return Err(LockError::Timeout { key: key.to_owned(), waited: started.elapsed() });
                }
                Err(classify(e))
            }
        }
    }

    /// One try of `key` inside the transaction `tx`: its fencing token, or `None` when another
    /// session or transaction holds it.
    ///
    /// # Errors
    /// Invalid keys; backend errors.
    pub async fn try_lock_in_transaction(
        &self,
        tx: &mut PgConnection,
        key: &str,
    ) -> Result<Option<FencingToken>> {
        validate_key(key)?;
        let held: bool =
            sqlx::query_scalar(TRY).bind(advisory_key(key)).fetch_one(&mut *tx).await.map_err(classify)?;
        if !held {
            return Ok(None);
        }
        self.xact_fence(key).await.map(Some)
    }

    /// The fence of a transaction's lock, drawn on the pool (`sql/xact_fence.sql`).
    async fn xact_fence(&self, key: &str) -> Result<FencingToken> {
        let fence: i64 = sqlx::query_scalar(AssertSqlSafe(self.sessions.sql().xact_fence.as_str()))
            .bind(key.as_bytes())
            .fetch_one(self.pool())
            .await
            .map_err(classify)?;
        u64::try_from(fence)
            .map(FencingToken)
            .map_err(|_| LockError::permanent(NAME, format!("a negative fence {fence} in the fence table")))
    }
}
