//! The raw PostgreSQL floor: the bare advisory lock on one connection.

use lock_testkit::side::{DriverError, RawFloor, strip_query, time};

/// The bare advisory lock: `pg_try_advisory_lock` + `pg_advisory_unlock`, one round trip each,
/// on one connection (no fence counter, no pool, no keeper).
pub(crate) async fn postgres(url: &str, n: usize) -> Result<RawFloor, DriverError> {
    use lock_postgres::sqlx::{self, Connection};
    let con = sqlx::PgConnection::connect(strip_query(url)).await?;
    let con = tokio::sync::Mutex::new(con);
    let rtt = time(n, |_| async {
        let mut c = con.lock().await;
        sqlx::query("SELECT 1").execute(&mut *c).await.map(drop)
    })
    .await?;
    let pair = time(n, |i| {
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
    Ok(RawFloor::new("SELECT 1", "pg_try_advisory_lock + pg_advisory_unlock", rtt, pair))
}
