//! Fenced writes on the user's own MySQL/MariaDB transaction.
//!
//! A holder paused past its lease can wake and write after the next holder did; the lock
//! cannot stop that write, the database can. [`Fences::admit`] raises the resource's
//! watermark to the writer's fence in the caller's transaction, or refuses a fence older than
//! one already admitted. The upsert locks the resource's row until that transaction ends, so a
//! newer holder's `admit` waits for the older writer's commit: every admitted write lands in
//! fence order, and none after a newer one. The table must be InnoDB (the default engine).
//!
//! ```no_run
//! # async fn demo(pool: sqlx::MySqlPool, guard: lock_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! use lock_mysql::fenced::Fences;
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
use sqlx::{AssertSqlSafe, Executor, MySql, Transaction};

use crate::validate_table_name;

/// The watermark table's name unless one is chosen.
pub const DEFAULT_TABLE: &str = "dlock_fences";

/// The longest resource name, in characters (the key column's width).
pub const MAX_RESOURCE: usize = 255;

/// The watermarks of fenced resources, one row a resource in a table of the caller's database.
#[derive(Clone, Debug)]
pub struct Fences {
    create: String,
    raise: String,
    read: String,
}

impl Default for Fences {
    fn default() -> Self {
        Self::with_sql(DEFAULT_TABLE)
    }
}

impl Fences {
    /// The watermarks kept in `table` (ASCII letters, digits and `_`).
    pub fn new(table: &str) -> lock_core::Result<Self> {
        validate_table_name(table)?;
        Ok(Self::with_sql(table))
    }

    fn with_sql(table: &str) -> Self {
        Self {
            // A binary collation: resources differing in case or accents are different rows.
            create: format!(
                "CREATE TABLE IF NOT EXISTS `{table}` (resource VARCHAR({MAX_RESOURCE}) CHARACTER SET utf8mb4 \
                 COLLATE utf8mb4_bin PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=InnoDB"
            ),
            // Raising to the greater is idempotent, so a resent statement admits nothing more.
            raise: format!(
                "INSERT INTO `{table}` (resource, fence) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE fence = GREATEST(fence, VALUES(fence))"
            ),
            // A locking read: the newest committed row (the upsert holds its lock already).
            read: format!("SELECT fence FROM `{table}` WHERE resource = ? FOR UPDATE"),
        }
    }

    /// Creates the table if it is missing (at set-up, by a user allowed to).
    pub async fn create_table<'c, E: Executor<'c, Database = MySql>>(
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
    /// server, as long as the caller's `innodb_lock_wait_timeout` (50 s by default) allows:
    /// the call changes no setting of the caller's, so the bound is the caller's to choose.
    ///
    /// Two statements: the upsert, then a locking read of what it stored, since MySQL has no
    /// `RETURNING` for it.
    pub async fn admit(
        &self,
        tx: &mut Transaction<'_, MySql>,
        resource: &str,
        fence: FencingToken,
    ) -> Result<(), FenceError<sqlx::Error>> {
        let wanted = as_i64(fence)?;
        if resource.chars().count() > MAX_RESOURCE {
            return Err(FenceError::Invalid {
                reason: format!("resource name longer than {MAX_RESOURCE} characters"),
            });
        }
        sqlx::query(AssertSqlSafe(self.raise.clone()))
            .bind(resource)
            .bind(wanted)
            .execute(&mut **tx)
            .await
            .map_err(FenceError::Store)?;
        let stored: i64 = sqlx::query_scalar(AssertSqlSafe(self.read.clone()))
            .bind(resource)
            .fetch_one(&mut **tx)
            .await
            .map_err(FenceError::Store)?;
        // The column holds only fences admitted through `as_i64`: never negative.
        judge(resource, fence, FencingToken(stored.unsigned_abs()))?;
        Ok(())
    }
}
