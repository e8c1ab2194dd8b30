//! Fenced writes on the user's own PostgreSQL transaction.
//!
//! A holder paused past its lease can wake and write after the next holder did; the lock
//! cannot stop that write, the database can. [`Fences::admit`] raises the resource's
//! watermark to the writer's fence in the caller's transaction, or refuses a fence older than
//! one already admitted. The row it raises stays locked until that transaction ends, so a newer
//! holder's `admit` waits for the older writer's commit: every admitted write lands in fence
//! order, and none after a newer one.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool, guard: lock_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! use lock_postgres::fenced::Fences;
//!
//! let fences = Fences::default();
//! fences.create_table(&pool).await?; // once, at set-up
//! let fence = guard.fence().expect("a fenced lock");
//! let mut tx = pool.begin().await?;
//! fences.admit(&mut tx, "account:42", fence).await?; // refused: roll back, the lock was lost
//! sqlx::query("UPDATE accounts SET balance = balance - 30 WHERE id = 42").execute(&mut *tx).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

use lock_core::FencingToken;
use lock_core::fenced::{FenceError, as_i64, judge};
use sqlx::{AssertSqlSafe, Executor, Postgres, Transaction};

use crate::validate_table_name;

/// The watermark table's name unless one is chosen.
pub const DEFAULT_TABLE: &str = "dlock_fences";

/// The watermarks of fenced resources, one row a resource in a table of the caller's database.
#[derive(Clone, Debug)]
pub struct Fences {
    create: String,
    admit: String,
}

impl Default for Fences {
    fn default() -> Self {
        Self::with_sql(DEFAULT_TABLE)
    }
}

impl Fences {
    /// The watermarks kept in `table` (lowercase letters, digits and `_`, at most 63).
    pub fn new(table: &str) -> lock_core::Result<Self> {
        validate_table_name(table)?;
        Ok(Self::with_sql(table))
    }

    fn with_sql(table: &str) -> Self {
        Self {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {table} (resource TEXT PRIMARY KEY, fence BIGINT NOT NULL)"
            ),
            // One statement, so a resend admits nothing more: raising to the greater is
            // idempotent, and the stored value says whether this writer's fence was the top.
            admit: format!(
                "INSERT INTO {table} AS f (resource, fence) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET fence = GREATEST(f.fence, EXCLUDED.fence) \
                 RETURNING fence"
            ),
        }
    }

    /// Creates the table if it is missing (at set-up, by a role allowed to).
    pub async fn create_table<'c, E: Executor<'c, Database = Postgres>>(
        &self,
        db: E,
    ) -> Result<(), sqlx::Error> {
        db.execute(AssertSqlSafe(self.create.clone())).await.map(drop)
    }

    /// Admits `fence` for `resource` in `tx`, before the write it guards; refuses it with
    /// [`FenceError::Stale`] when a newer fence was admitted before. After a refusal, roll the
    /// transaction back: the caller's lock was lost and taken again.
    ///
    /// While an older writer's transaction holds the resource's row, this waits for it in the
    /// server, as long as the caller's `lock_timeout` (by default no bound) or
    /// `statement_timeout` allows: the call changes no setting of the caller's, so the bound
    /// is the caller's to choose.
    ///
    /// Under `REPEATABLE READ` or `SERIALIZABLE`, a newer holder's commit that this transaction
    /// cannot see ends in a serialization failure ([`FenceError::Store`]), which is also a
    /// refusal to write.
    pub async fn admit(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        resource: &str,
        fence: FencingToken,
    ) -> Result<(), FenceError<sqlx::Error>> {
        let wanted = as_i64(fence)?;
        let stored: i64 = sqlx::query_scalar(AssertSqlSafe(self.admit.clone()))
            .bind(resource)
            .bind(wanted)
            .fetch_one(&mut **tx)
            .await
            .map_err(FenceError::Store)?;
        // The column holds only fences admitted through `as_i64`: never negative.
        judge(resource, fence, FencingToken(stored.unsigned_abs()))?;
        Ok(())
    }
}
