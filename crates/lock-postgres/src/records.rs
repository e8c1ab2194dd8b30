//! Records (`sql/record_*.sql`) in the table `<table>_recs`: the number in the row with
//! mark `''`, one row per mark token. Each op is one autocommit statement, idempotent when
//! sent again, then one read of the record; both bounded like `inspect`.

use lock_core::backend::{Record, RecordOp, unsupported};
use lock_core::{LockError, Result};
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use crate::error::{NAME, classify};
use crate::session::{Advisory, answered_by};

/// A number as the column's `bigint`.
fn stored(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| LockError::InvalidConfig {
        reason: format!("a record's number must fit 63 bits, not {v}"),
    })
}

impl Advisory {
    pub(crate) async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let name = key.as_bytes();
        let bound = Instant::now() + self.server_idle();
        let write = match op {
            RecordOp::Get => None,
            RecordOp::Init(v) => {
                Some(sqlx::query(AssertSqlSafe(self.sql().record_init.as_str())).bind(name).bind(stored(v)?))
            }
            RecordOp::Set(v) => {
                Some(sqlx::query(AssertSqlSafe(self.sql().record_set.as_str())).bind(name).bind(stored(v)?))
            }
            RecordOp::Mark(token) => {
                Some(sqlx::query(AssertSqlSafe(self.sql().record_mark.as_str())).bind(name).bind(token))
            }
            RecordOp::Delete => {
                Some(sqlx::query(AssertSqlSafe(self.sql().record_delete.as_str())).bind(name))
            }
            _ => return Err(unsupported(NAME, "this record operation")),
        };
        if let Some(write) = write {
            answered_by("record write", bound, write.execute(self.pool())).await?;
        }
        let read =
            sqlx::query(AssertSqlSafe(self.sql().record_read.as_str())).bind(name).fetch_one(self.pool());
        let row = answered_by("record read", bound, read).await?;
        let value: Option<i64> = row.try_get("value").map_err(classify)?;
        let marks: i64 = row.try_get("marks").map_err(classify)?;
        Ok(Record { value: value.map(|v| v as u64), marks: marks as u64 })
    }
}
