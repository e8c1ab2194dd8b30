//! The seed's optimistic business update, as a helper: no lock at all, just a version check.

use lock_core::LockError;
use sqlx::{AssertSqlSafe, Executor, MySql};

use crate::error::classify;
use crate::sql::{render, validate_table_name};

/// Decrement `stock` of row `id` by `amount` if the row is still at `expected_version`, bumping
/// the version (seed 001, "数据库乐观锁"):
///
/// ```sql
/// UPDATE <table> SET stock = stock - ?, version = version + 1 WHERE id = ? AND version = ?
/// ```
///
/// Returns `true` when the update won. On `false` someone changed the row since it was read:
/// re-read `stock, version` and decide again (the usual loop is read, check the stock, call
/// this, repeat on `false`). `table` must have columns `id`, `stock` and `version` and is
/// validated as an identifier. Works on a pool, a connection or inside a transaction.
///
/// # Errors
/// [`LockError::InvalidConfig`] for a bad table name; backend errors.
pub async fn decrement_stock_cas<'e, E>(
    executor: E,
    table: &str,
    id: i64,
    amount: i64,
    expected_version: i64,
) -> Result<bool, LockError>
where
    E: Executor<'e, Database = MySql>,
{
    validate_table_name(table)?;
    let sql = render(include_str!("../sql/business_decrement_stock.sql"), table);
    let res = sqlx::query(AssertSqlSafe(sql))
        .bind(amount)
        .bind(id)
        .bind(expected_version)
        .execute(executor)
        .await
        .map_err(classify)?;
    // CLIENT_FOUND_ROWS: matched rows. The version always changes, so matched == changed.
    Ok(res.rows_affected() == 1)
}
