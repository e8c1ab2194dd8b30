//! The raw MySQL/MariaDB floor: the bare lock statements on one connection.

use lock_core::backend::Capability;
use lock_testkit::side::{DriverError, RawFloor, strip_query, time};

pub(crate) async fn mysql(url: &str, caps: Capability, n: usize) -> Result<RawFloor, DriverError> {
    use lock_mysql::sqlx::{self, Connection};
    let mut con = sqlx::MySqlConnection::connect(strip_query(url)).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS dlock_bench_floor (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB",
    )
    .execute(&mut con)
    .await?;
    sqlx::query("INSERT IGNORE INTO dlock_bench_floor VALUES (1, 0)").execute(&mut con).await?;
    let con = tokio::sync::Mutex::new(con);
    let rtt = time(n, |_| async {
        let mut c = con.lock().await;
        sqlx::query("SELECT 1").execute(&mut *c).await.map(drop)
    })
    .await?;
    if !caps.native_wait {
        // Without the server's lock queue, acquire and release are one autocommit CAS
        // statement each.
        let pair = time(n, |_| async {
            let mut c = con.lock().await;
            for _ in 0..2 {
                sqlx::query("UPDATE dlock_bench_floor SET v = v + 1 WHERE id = 1 AND v >= 0")
                    .execute(&mut *c)
                    .await?;
            }
            Ok::<_, sqlx::Error>(())
        })
        .await?;
        return Ok(RawFloor::new("SELECT 1", "2 x autocommit UPDATE ... WHERE (CAS)", rtt, pair));
    }
    // Waiting in the server's lock queue: a locking read inside a transaction.
    let pair = time(n, |_| async {
        let mut c = con.lock().await;
        let mut tx = c.begin().await?;
        sqlx::query("SELECT id FROM dlock_bench_floor WHERE id = 1 FOR UPDATE").execute(&mut *tx).await?;
        tx.commit().await
    })
    .await?;
    Ok(RawFloor::new("SELECT 1", "BEGIN; SELECT ... FOR UPDATE; COMMIT", rtt, pair))
}
