//! Records (`sql/record_*.sql`) in the table `<table>_recs`, the same in every mode: the
//! number in the row with mark `''`, one row per mark token. Each op is one autocommit
//! statement, idempotent when sent again, then one read; both bounded by the pool's acquire
//! timeout.

use lock_core::Result;
use lock_core::backend::{Record, RecordOp, unsupported};
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use crate::backend::MySqlLock;
use crate::error::{self, NAME};
use crate::session::answered_by;
use crate::sql::render;

impl MySqlLock {
    /// Create the records table unless it exists; not `strict` (at build), a user that may not
    /// create it still builds, and its records answer with the server's error.
    pub(crate) async fn migrate_records(&self, strict: bool) -> Result<()> {
        let schema = render(include_str!("../sql/records_schema.sql"), &self.table);
        let why =
            "may not create the records table: latches and stored semaphore counts fail until it exists";
        self.create_side_table(&format!("{}_recs", self.table), &schema, strict, why).await
    }

    pub(crate) async fn record_op(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let bound = Instant::now() + self.pool.options().get_acquire_timeout();
        let sql = |template: &str| render(template, &self.table).to_string();
        let name = key.as_bytes();
        let write = match op {
            RecordOp::Get => None,
            RecordOp::Init(v) => Some(
                sqlx::query(AssertSqlSafe(sql(include_str!("../sql/record_init.sql")))).bind(name).bind(v),
            ),
            RecordOp::Set(v) => Some(
                sqlx::query(AssertSqlSafe(sql(include_str!("../sql/record_set.sql")))).bind(name).bind(v),
            ),
            RecordOp::Mark(token) => Some(
                sqlx::query(AssertSqlSafe(sql(include_str!("../sql/record_mark.sql"))))
                    .bind(name)
                    .bind(token.as_bytes())
                    .bind(name),
            ),
            RecordOp::Delete => {
                Some(sqlx::query(AssertSqlSafe(sql(include_str!("../sql/record_delete.sql")))).bind(name))
            }
            _ => return Err(unsupported(NAME, "this record operation")),
        };
        if let Some(write) = write {
            answered_by(bound, write.execute(&self.pool)).await?;
        }
        let read =
            sqlx::query(AssertSqlSafe(sql(include_str!("../sql/record_read.sql")))).bind(name).bind(name);
        let row = answered_by(bound, read.fetch_one(&self.pool)).await?;
        let value: Option<u64> = row.try_get("value").map_err(error::classify)?;
        let marks: i64 = row.try_get("marks").map_err(error::classify)?;
        Ok(Record { value, marks: u64::try_from(marks).unwrap_or(0) })
    }
}
