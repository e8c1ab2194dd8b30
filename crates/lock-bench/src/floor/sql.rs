//! The raw SQL floors: MySQL/MariaDB's and PostgreSQL's bare lock statements.

#[cfg(feature = "mysql")]
use dlock::backend::Capability;

use super::{Floor, floor, strip_query, time};
use crate::error::{BenchError, Result};

#[cfg(feature = "mysql")]
pub(super) async fn mysql(url: &str, caps: Capability, n: usize) -> Result<Floor> {
    use dlock::lock_mysql::sqlx::{self, Connection};
    const WHAT: &str = "mysql floor";
    let mut con = sqlx::MySqlConnection::connect(strip_query(url)).await.map_err(BenchError::driver(WHAT))?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS dlock_bench_floor (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB",
    )
    .execute(&mut con)
    .await
    .map_err(BenchError::driver(WHAT))?;
    sqlx::query("INSERT IGNORE INTO dlock_bench_floor VALUES (1, 0)")
        .execute(&mut con)
        .await
        .map_err(BenchError::driver(WHAT))?;
    let con = tokio::sync::Mutex::new(con);
    let rtt = time(WHAT, n, |_| async {
        let mut c = con.lock().await;
        sqlx::query("SELECT 1").execute(&mut *c).await.map(drop)
    })
    .await?;
    if !caps.native_wait {
        // Without the server's lock queue, acquire and release are one autocommit CAS
        // statement each.
        let pair = time(WHAT, n, |_| async {
            let mut c = con.lock().await;
            for _ in 0..2 {
                sqlx::query("UPDATE dlock_bench_floor SET v = v + 1 WHERE id = 1 AND v >= 0")
                    .execute(&mut *c)
                    .await?;
            }
            Ok::<_, sqlx::Error>(())
        })
        .await?;
        return Ok(floor("SELECT 1", "2 x autocommit UPDATE ... WHERE (CAS)", rtt, pair));
    }
    // Waiting in the server's lock queue: a locking read inside a transaction.
    let pair = time(WHAT, n, |_| async {
        let mut c = con.lock().await;
        let mut tx = c.begin().await?;
        sqlx::query("SELECT id FROM dlock_bench_floor WHERE id = 1 FOR UPDATE").execute(&mut *tx).await?;
        tx.commit().await
    })
    .await?;
    Ok(floor("SELECT 1", "BEGIN; SELECT ... FOR UPDATE; COMMIT", rtt, pair))
}

/// The bare advisory lock: `pg_try_advisory_lock` + `pg_advisory_unlock`, one round trip each,
/// on one connection (no fence counter, no pool, no keeper).
#[cfg(feature = "postgres")]
pub(super) async fn postgres(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_postgres::sqlx::{self, Connection};
    const WHAT: &str = "postgres floor";
    let con = sqlx::PgConnection::connect(strip_query(url)).await.map_err(BenchError::driver(WHAT))?;
    let con = tokio::sync::Mutex::new(con);
    let rtt = time(WHAT, n, |_| async {
        let mut c = con.lock().await;
        sqlx::query("SELECT 1").execute(&mut *c).await.map(drop)
    })
    .await?;
    let pair = time(WHAT, n, |i| {
        let con = &con;
        async move {
            let mut c = con.lock().await;
            let key = i64::try_from(i).unwrap_or(0) ^ 0x646c_6f63_6b00_0000;
            let _: bool =
                sqlx::query_scalar("SELECT pg_try_advisory_lock($1)").bind(key).fetch_one(&mut *c).await?;
            let _: bool =
                sqlx::query_scalar("SELECT pg_advisory_unlock($1)").bind(key).fetch_one(&mut *c).await?;
            Ok::<_, sqlx::Error>(())
        }
    })
    .await?;
    Ok(floor("SELECT 1", "pg_try_advisory_lock + pg_advisory_unlock", rtt, pair))
}
