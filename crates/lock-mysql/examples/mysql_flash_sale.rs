//! The seeds' flash sale ("秒杀") on MySQL / MariaDB: buyers race for the stock of one item,
//! first under a lock-mysql lock, then with the seed's lock-free optimistic update
//! (`UPDATE ... SET stock = stock - ?, version = version + 1 WHERE id = ? AND version = ?`).
//! Either way exactly the stock is sold, never more.
//!
//! ```sh
//! MYSQL_URL='mysql://user:password@127.0.0.1:3306/test?mode=optimistic' \
//!     cargo run -p lock-mysql --example mysql_flash_sale
//! ```
//!
//! It creates (and refills) a table `seckill_good` in that database.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::Locker;
use lock_mysql::MySqlLock;
use lock_mysql::sqlx::{self, mysql::MySqlPool};

type Error = Box<dyn std::error::Error + Send + Sync>;

const STOCK: i64 = 100;
const BUYERS: usize = 8;

/// The seed's optimistic business update: take `amount` of item `id` if the row is still at
/// `version`. `false` means someone changed it since it was read: read again and decide again.
async fn decrement_stock(pool: &MySqlPool, id: i64, amount: i64, version: i64) -> Result<bool, Error> {
    let done = sqlx::query(
        "UPDATE seckill_good SET stock = stock - ?, version = version + 1 WHERE id = ? AND version = ?",
    )
    .bind(amount)
    .bind(id)
    .bind(version)
    .execute(pool)
    .await?;
    // sqlx sets CLIENT_FOUND_ROWS: matched rows; the version always changes, so matched == changed.
    Ok(done.rows_affected() == 1)
}

async fn read(pool: &MySqlPool) -> Result<(i64, i64), Error> {
    Ok(sqlx::query_as("SELECT stock, version FROM seckill_good WHERE id = 1").fetch_one(pool).await?)
}

async fn refill(pool: &MySqlPool) -> Result<(), Error> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS seckill_good (id BIGINT PRIMARY KEY, stock BIGINT NOT NULL, \
         version BIGINT NOT NULL); REPLACE INTO seckill_good VALUES (1, 100, 0)",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Every buyer takes one unit at a time under the lock until the stock is gone.
async fn sell_under_lock(locker: Locker, pool: MySqlPool, sold: Arc<AtomicU64>) -> Result<(), Error> {
    loop {
        let guard = locker.lock("seckill/1").wait(Duration::from_secs(10)).acquire().await?;
        let (stock, version) = read(&pool).await?;
        // Under the lock nobody else writes, so the version check always passes here.
        let took = stock > 0 && decrement_stock(&pool, 1, 1, version).await?;
        guard.release().await?;
        if !took {
            return Ok(());
        }
        sold.fetch_add(1, Ordering::Relaxed);
    }
}

/// Without any lock: read, try the versioned update, and on a lost race read again.
async fn sell_lock_free(pool: MySqlPool, sold: Arc<AtomicU64>) -> Result<(), Error> {
    loop {
        let (stock, version) = read(&pool).await?;
        if stock <= 0 {
            return Ok(());
        }
        if decrement_stock(&pool, 1, 1, version).await? {
            sold.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn report(what: &str, pool: &MySqlPool, sold: &AtomicU64) -> Result<(), Error> {
    let (left, _) = read(pool).await?;
    let sold = sold.load(Ordering::Relaxed);
    println!("{what}: sold {sold} of {STOCK}, {left} left");
    if i64::try_from(sold)? + left != STOCK || left != 0 {
        return Err(format!("{what}: the books do not balance").into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let Ok(url) = std::env::var("MYSQL_URL") else {
        println!("set MYSQL_URL to run the flash sale, for example:");
        println!(
            "  MYSQL_URL='mysql://root@127.0.0.1:3306/test' cargo run -p lock-mysql --example mysql_flash_sale"
        );
        return Ok(());
    };
    let backend = MySqlLock::builder().url(url).build().await?;
    let pool = backend.pool().clone();
    println!("{:?} lock on MySQL/MariaDB {}", backend.mode(), backend.server_version());
    let locker = Locker::new(Arc::new(backend));

    refill(&pool).await?;
    let sold = Arc::new(AtomicU64::new(0));
    let buyers: Vec<_> = (0..BUYERS)
        .map(|_| tokio::spawn(sell_under_lock(locker.clone(), pool.clone(), sold.clone())))
        .collect();
    for b in buyers {
        b.await??;
    }
    report("under the lock", &pool, &sold).await?;

    refill(&pool).await?;
    let sold = Arc::new(AtomicU64::new(0));
    let buyers: Vec<_> =
        (0..BUYERS).map(|_| tokio::spawn(sell_lock_free(pool.clone(), sold.clone()))).collect();
    for b in buyers {
        b.await??;
    }
    report("lock-free versioned update", &pool, &sold).await
}
