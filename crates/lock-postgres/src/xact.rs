//! Locks inside the caller's own transaction (`pg_advisory_xact_lock`): the server releases
//! them when the transaction commits or rolls back, so the work and the lock end together and
//! nothing is left to release. They exclude, and are excluded by, this backend's session locks
//! of the same key. For code that already runs in a transaction: a lock held across a
//! transaction-pooling PgBouncer must be one of these (a session lock would stay with a
//! server connection other clients then get).

use std::time::Duration;

use lock_core::{FencingToken, LockError, Result, validate_key};
use sqlx::{AssertSqlSafe, PgConnection, Row};
use tokio::time::Instant;

use crate::PgLock;
use crate::error::{LOCK_NOT_AVAILABLE, NAME, classify, sqlstate};
use crate::keys::advisory_key;
use crate::session::answered_by;

/// Waits for the key for the rest of the caller's transaction (bounded by `lock_timeout`),
/// then puts back the caller's `lock_timeout` ($2): a `SET LOCAL` in a savepoint outlives its
/// `RELEASE`. The subquery (`OFFSET 0`: not flattened) is the restore's input row, so the wait
/// has ended before the restore runs.
const WAIT: &str = "SELECT set_config('lock_timeout', $2, true) \
                    FROM (SELECT pg_advisory_xact_lock($1) OFFSET 0) AS waited";
/// One try for the rest of the caller's transaction: whether it is held.
const TRY: &str = "SELECT pg_try_advisory_xact_lock($1)";
/// The wait runs in a savepoint, so a timeout leaves the caller's transaction usable (and
/// `ROLLBACK TO` undoes the savepoint's `lock_timeout`). One round trip: the savepoint, the
/// caller's `lock_timeout` (for the restore), and the wait's own.
fn savepoint(wait_ms: u64) -> String {
    format!(
        "SAVEPOINT dlock_xact_wait; SELECT current_setting('lock_timeout'); \
         SET LOCAL lock_timeout = {wait_ms}"
    )
}
const RELEASE: &str = "RELEASE SAVEPOINT dlock_xact_wait";
const UNDO: &str = "ROLLBACK TO SAVEPOINT dlock_xact_wait; RELEASE SAVEPOINT dlock_xact_wait";

impl PgLock {
    /// Take `key` inside the transaction `tx` (a `&mut *transaction` of the caller's
    /// `sqlx::Transaction`), waiting up to `wait`; held until that transaction ends. Answers
    /// the hold's fencing token, larger than every earlier holder's of `key`, session or
    /// transaction.
    ///
    /// Every statement has a client-side bound (the server's idle bound, plus `wait` for the
    /// wait). On any error other than `Timeout` the transaction may hold the lock without a
    /// fence, or be in an unknown state: roll it back.
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
        let started = Instant::now();
        // Each statement answers within the server's idle bound; the wait within `wait` more
        // (no later than a far future: `Duration::MAX` is a wait, not an overflow).
        let bound = |extra: Duration| {
            let now = Instant::now();
            let far = now + Duration::from_secs(86_400 * 365);
            let by = self.sessions.server_idle().checked_add(extra).and_then(|d| now.checked_add(d));
            by.map_or(far, |b| b.min(far))
        };
        // The wait's bound is this statement's only: it is set in a savepoint, which keeps the
        // transaction usable when the wait times out, and the caller's value is put back.
        // Whole milliseconds, at least 1 (0 means no bound), at most what the setting takes.
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).clamp(1, i32::MAX as u64);
        let rows = answered_by(
            "savepoint",
            bound(Duration::ZERO),
            sqlx::raw_sql(AssertSqlSafe(savepoint(ms))).fetch_all(&mut *tx),
        )
        .await?;
        let callers: String = match rows.first() {
            Some(row) => row.try_get(0).map_err(classify)?,
            None => return Err(LockError::permanent(NAME, "no lock_timeout in the savepoint's answer")),
        };
        let waited = tokio::time::timeout_at(
            bound(wait),
            sqlx::query(WAIT).bind(advisory_key(key)).bind(&callers).execute(&mut *tx),
        )
        .await;
        match waited {
            Ok(Ok(_)) => {
                // RELEASE keeps the lock (transaction-scoped locks outlive their savepoint)
                // and the caller's lock_timeout, which the wait's statement put back.
                answered_by(
                    "release savepoint",
                    bound(Duration::ZERO),
                    sqlx::raw_sql(RELEASE).execute(&mut *tx),
                )
                .await?;
                self.xact_fence(key).await
            }
            Ok(Err(e)) => {
                // ROLLBACK TO also undoes the savepoint's lock_timeout.
                answered_by(
                    "rollback to savepoint",
                    bound(Duration::ZERO),
                    sqlx::raw_sql(UNDO).execute(&mut *tx),
                )
                .await?;
                if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) {
                    return Err(LockError::Timeout { key: key.to_owned(), waited: started.elapsed() });
                }
                Err(classify(e))
            }
            // No answer within the bound: the connection's state is unknown, so the caller's
            // transaction cannot be trusted either (roll it back).
            Err(_) => Err(LockError::temporary(NAME, "no answer from the server in time (transaction lock)")),
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
        let bound = Instant::now() + self.sessions.server_idle();
        let held: bool =
            answered_by("try", bound, sqlx::query_scalar(TRY).bind(advisory_key(key)).fetch_one(&mut *tx))
                .await?;
        if !held {
            return Ok(None);
        }
        self.xact_fence(key).await.map(Some)
    }

    /// The fence of a transaction's lock, drawn on the pool (`sql/xact_fence.sql`).
    async fn xact_fence(&self, key: &str) -> Result<FencingToken> {
        let fence: i64 = answered_by(
            "fence",
            Instant::now() + self.sessions.server_idle(),
            sqlx::query_scalar(AssertSqlSafe(self.sessions.sql().xact_fence.as_str()))
                .bind(key.as_bytes())
                .fetch_one(self.pool()),
        )
        .await?;
        u64::try_from(fence)
            .map(FencingToken)
            .map_err(|_| LockError::permanent(NAME, format!("a negative fence {fence} in the fence table")))
    }
}
