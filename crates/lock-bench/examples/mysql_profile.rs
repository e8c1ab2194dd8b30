//! Where the time of one uncontended pessimistic MySQL acquire + release goes (issue 14).
//!
//! Starts a private MariaDB (lock-testkit) and times, interleaved so that noise hits every
//! variant alike, the floor (`BEGIN; SELECT ... FOR UPDATE; COMMIT` on a dedicated connection)
//! against the backend's own batches sent by hand with sqlx, with one part changed at a time,
//! the client-side costs alone, and the library's full path. Prints the median of each.
//!
//! `cargo run --release -p lock-bench --example mysql_profile -- [iterations]`

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use dlock::backend::{AcquireRequest, Attempt, Side};
use dlock::lock_mysql::sqlx::{
    self, AssertSqlSafe, Connection, Executor, MySqlConnection, Row, mysql::MySqlPoolOptions,
};
use dlock::{LeaseSignal, Locker, OwnerToken};
use lock_mysql_testing::MariaDbServer;
use tokio::time::Instant;

const SET: &str = "SET SESSION wait_timeout = 6, net_read_timeout = 6, net_write_timeout = 6, \
    idle_transaction_timeout = 6, idle_readonly_transaction_timeout = 6, idle_write_transaction_timeout = 6;\n";
const RESTORE: &str = "SET SESSION wait_timeout = @@GLOBAL.wait_timeout, net_read_timeout = @@GLOBAL.net_read_timeout, \
    net_write_timeout = @@GLOBAL.net_write_timeout, idle_transaction_timeout = @@GLOBAL.idle_transaction_timeout, \
    idle_readonly_transaction_timeout = @@GLOBAL.idle_readonly_transaction_timeout, \
    idle_write_transaction_timeout = @@GLOBAL.idle_write_transaction_timeout";

type Op<'a> =
    Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Result<(), Box<dyn std::error::Error>>> + 'a>> + 'a>;

fn hex(k: &str) -> String {
    let mut s = String::from("X'");
    for b in k.bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s.push('\'');
    s
}

/// Run a text batch to its end.
async fn batch(c: &mut MySqlConnection, sql: String) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(sql)).fetch_all(c).await.map(drop)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3000);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let server = MariaDbServer::start()?;
    let url = server.url();
    rt.block_on(run(&url, n))
}

async fn run(url: &str, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let backend = dlock::from_url(&format!("{url}?mode=pessimistic")).await?;
    let locker = Locker::new(backend.clone());
    let pool = MySqlPoolOptions::new().max_connections(8).test_before_acquire(false).connect(url).await?;
    let floor = MySqlConnection::connect(url).await?;
    let ded = MySqlConnection::connect(url).await?;
    let mut auto0 = MySqlConnection::connect(url).await?;
    auto0.execute("SET SESSION autocommit = 0").await?;
    auto0.execute(AssertSqlSafe(SET.trim_end().trim_end_matches(';').to_owned())).await?;
    for k in ["pf", "pa", "pb", "pc", "pd", "pe", "pg", "ph", "pi"] {
        sqlx::query("INSERT IGNORE INTO dlock_rows (name) VALUES (?)").bind(k).execute(&pool).await?;
    }
    let lock = |k: &str, nextval: bool| {
        let sel = if nextval { "NEXTVAL(`dlock_rows_fence`)" } else { "0" };
        format!("SELECT {sel}, CONNECTION_ID() FROM `dlock_rows` WHERE name = {} FOR UPDATE NOWAIT", hex(k))
    };
    let (floor, ded, auto0) =
        (&tokio::sync::Mutex::new(floor), &tokio::sync::Mutex::new(ded), &tokio::sync::Mutex::new(auto0));
    let holders = MySqlPoolOptions::new()
        .max_connections(8)
        .test_before_acquire(false)
        .after_connect(|c, _| {
            Box::pin(async move {
                c.execute(AssertSqlSafe(format!("SET SESSION autocommit = 0, {}", &SET[12..SET.len() - 2])))
                    .await
                    .map(drop)
            })
        })
        .connect(url)
        .await?;
    let (pool, holders) = (&pool, &holders);
    let lock = &lock;
    let mut ops: Vec<(&str, Op<'_>)> = vec![
        (
            "floor: conn.begin(); FOR UPDATE (prepared); commit [dedicated conn]",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = floor.lock().await;
                    let mut tx = c.begin().await?;
                    sqlx::query("SELECT name FROM dlock_rows WHERE name = 'pf' FOR UPDATE")
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(())
                })
            }),
        ),
        (
            "before 4d4ef93: pool.acquire; SET+BEGIN+NEXTVAL lock; COMMIT+restore",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = pool.acquire().await?;
                    batch(&mut c, format!("{SET}BEGIN;\n{}", lock("pa", true))).await?;
                    batch(&mut c, format!("COMMIT;\n{RESTORE}")).await?;
                    Ok(())
                })
            }),
        ),
        (
            "before 4d4ef93, on a dedicated conn (no pool)",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = ded.lock().await;
                    batch(&mut c, format!("{SET}BEGIN;\n{}", lock("pb", true))).await?;
                    batch(&mut c, format!("COMMIT;\n{RESTORE}")).await?;
                    Ok(())
                })
            }),
        ),
        (
            "pool, no SET/restore: BEGIN+NEXTVAL lock; COMMIT",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = pool.acquire().await?;
                    batch(&mut c, format!("BEGIN;\n{}", lock("pc", true))).await?;
                    batch(&mut c, "COMMIT".to_owned()).await?;
                    Ok(())
                })
            }),
        ),
        (
            "pool, no SET, no NEXTVAL: BEGIN+lock; COMMIT",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = pool.acquire().await?;
                    batch(&mut c, format!("BEGIN;\n{}", lock("pd", false))).await?;
                    batch(&mut c, "COMMIT".to_owned()).await?;
                    Ok(())
                })
            }),
        ),
        (
            "pool, no SET: BEGIN+NEXTVAL lock; ROLLBACK",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = pool.acquire().await?;
                    batch(&mut c, format!("BEGIN;\n{}", lock("pe", true))).await?;
                    batch(&mut c, "ROLLBACK".to_owned()).await?;
                    Ok(())
                })
            }),
        ),
        (
            "dedicated, no SET: text BEGIN+NEXTVAL lock; COMMIT",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = ded.lock().await;
                    batch(&mut c, format!("BEGIN;\n{}", lock("pg", true))).await?;
                    batch(&mut c, "COMMIT".to_owned()).await?;
                    Ok(())
                })
            }),
        ),
        (
            "dedicated, autocommit=0 + bounds once: prepared NEXTVAL lock; COMMIT",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = auto0.lock().await;
                    let r = sqlx::query(
                        "SELECT NEXTVAL(`dlock_rows_fence`), CONNECTION_ID() FROM `dlock_rows` WHERE name = ? FOR UPDATE NOWAIT",
                    )
                    .bind("ph")
                    .fetch_one(&mut *c)
                    .await?;
                    let _: i64 = r.try_get(0)?;
                    batch(&mut c, "COMMIT".to_owned()).await?;
                    Ok(())
                })
            }),
        ),
        (
            "dedicated, autocommit=0 + bounds once: text NEXTVAL lock; COMMIT",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = auto0.lock().await;
                    batch(&mut c, lock("pi", true)).await?;
                    batch(&mut c, "COMMIT".to_owned()).await?;
                    Ok(())
                })
            }),
        ),
        (
            "since 4d4ef93, by hand: pool with after_connect (autocommit=0 + bounds), prepared lock; COMMIT",
            Box::new(move || {
                Box::pin(async move {
                    let mut c = holders.acquire().await?;
                    let r = sqlx::query(
                        "SELECT NEXTVAL(`dlock_rows_fence`), CONNECTION_ID() FROM `dlock_rows` WHERE name = ? FOR UPDATE NOWAIT",
                    )
                    .bind("pc")
                    .fetch_one(&mut *c)
                    .await?;
                    let _: i64 = r.try_get(0)?;
                    batch(&mut c, "COMMIT".to_owned()).await?;
                    Ok(())
                })
            }),
        ),
        (
            "client: pool.acquire() + drop (return ping in background)",
            Box::new(move || {
                Box::pin(async move {
                    drop(pool.acquire().await?);
                    Ok(())
                })
            }),
        ),
        (
            "client: spawn keeper task + mpsc/oneshot release round",
            Box::new(move || {
                Box::pin(async move {
                    let (tx, mut rx) = tokio::sync::mpsc::channel::<tokio::sync::oneshot::Sender<()>>(4);
                    tokio::spawn(async move {
                        if let Some(r) = rx.recv().await {
                            let _ = r.send(());
                        }
                    });
                    let (otx, orx) = tokio::sync::oneshot::channel();
                    tx.send(otx).await.map_err(|_| "send")?;
                    orx.await?;
                    Ok(())
                })
            }),
        ),
        (
            "backend.try_acquire + backend.release (no Locker)",
            Box::new({
                let backend = backend.clone();
                move || {
                    let backend = backend.clone();
                    Box::pin(async move {
                        let signal = LeaseSignal::new();
                        let owner = OwnerToken::random();
                        let req = AcquireRequest {
                            key: "lb",
                            owner,
                            lease: Duration::from_secs(10),
                            wait_until: None,
                            signal: &signal,
                            side: Side::Exclusive,
                        };
                        match backend.try_acquire(&req).await? {
                            Attempt::Acquired(_) => {}
                            other => return Err(format!("{other:?}").into()),
                        }
                        backend.release("lb", owner).await?;
                        Ok(())
                    })
                }
            }),
        ),
        (
            "library: Locker try_acquire + release (as lock-bench)",
            Box::new({
                let locker = &locker;
                move || {
                    Box::pin(async move {
                        let g = locker.lock("ll").lease(Duration::from_secs(10)).try_acquire().await?;
                        g.ok_or("held")?.release().await?;
                        Ok(())
                    })
                }
            }),
        ),
    ];
    let mut samples: Vec<Vec<u64>> = vec![Vec::with_capacity(n); ops.len()];
    for i in 0..(n + 200) {
        for (j, (_, op)) in ops.iter_mut().enumerate() {
            let t0 = Instant::now();
            op().await?;
            let us = t0.elapsed().as_nanos() as u64 / 1000;
            if i >= 200 {
                samples[j].push(us);
            }
        }
    }
    println!("{n} iterations each, interleaved; median (p50) and p90 in µs");
    for ((name, _), mut s) in ops.iter().zip(samples) {
        s.sort_unstable();
        println!("{:>6} {:>6}  {name}", s[s.len() / 2], s[s.len() * 9 / 10]);
    }
    Ok(())
}
