//! Raw floors measured in the same run: the backend's bare round trip, and the bare commands of
//! one acquire + release, sent by the client crate without the lock library.
//!
//! A floor is by definition the store's own client, so [`PROBES`] is the one place that pairs
//! URL schemes with drivers; which statements stand for one acquire + release follows from the
//! target's capabilities.

use std::future::Future;
use std::pin::Pin;

use dlock::backend::Capability;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::error::{BenchError, Result};
use crate::scenarios::{hist, us};
use crate::targets::Target;

/// The floor of one target.
#[derive(Debug)]
pub struct Floor {
    /// What the round trip is (`PING`, `SELECT 1`, `exists`).
    pub rtt_label: &'static str,
    /// What the acquire+release pair is.
    pub pair_label: &'static str,
    /// 99th percentile round trip (µs).
    pub rtt_p99: u64,
    /// 99th percentile acquire+release pair (µs).
    pub pair_p99: u64,
    /// Median round trip (µs).
    pub rtt_p50: Option<u64>,
    /// Median acquire+release pair (µs).
    pub pair_p50: Option<u64>,
}

type FloorFuture<'a> = Pin<Box<dyn Future<Output = Result<Floor>> + Send + 'a>>;

/// A raw client that measures the floor of the URLs with these schemes.
struct Probe {
    schemes: &'static [&'static str],
    measure: for<'a> fn(&'a str, Capability, usize) -> FloorFuture<'a>,
}

const PROBES: &[Probe] = &[
    Probe { schemes: &["memory"], measure: |_, _, n| Box::pin(memory(n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redis", "rediss"], measure: |url, _, n| Box::pin(redis(url, n)) },
    #[cfg(feature = "mysql")]
    Probe { schemes: &["mysql", "mariadb"], measure: |url, caps, n| Box::pin(mysql(url, caps, n)) },
    #[cfg(feature = "zk")]
    Probe { schemes: &["zk", "zookeeper"], measure: |url, _, n| Box::pin(zk(url, n)) },
    #[cfg(feature = "etcd")]
    Probe { schemes: &["etcd"], measure: |url, _, n| Box::pin(etcd(url, n)) },
    #[cfg(feature = "postgres")]
    Probe { schemes: &["postgres", "postgresql"], measure: |url, _, n| Box::pin(postgres(url, n)) },
];

/// Measure the floor of `t` (whose backend declares `caps`) with `n` samples each.
pub async fn measure(t: &Target, caps: Capability, n: usize) -> Result<Floor> {
    let scheme = t.scheme();
    let probe = PROBES.iter().find(|p| p.schemes.contains(&scheme.as_str()));
    match probe {
        Some(p) => (p.measure)(&t.url, caps, n).await,
        None => Err(BenchError::NoFloor { scheme }),
    }
}

async fn time<F, Fut, E>(what: &'static str, n: usize, mut f: F) -> Result<Histogram<u64>>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<crate::error::DriverError>,
{
    let mut h = hist()?;
    for i in 0..n {
        let t0 = Instant::now();
        f(i).await.map_err(BenchError::driver(what))?;
        h.saturating_record(us(t0.elapsed()));
    }
    Ok(h)
}

fn floor(
    rtt_label: &'static str,
    pair_label: &'static str,
    rtt: Histogram<u64>,
    pair: Histogram<u64>,
) -> Floor {
    let (r, p) = (rtt.value_at_quantile(0.5), pair.value_at_quantile(0.5));
    let (r99, p99) = (rtt.value_at_quantile(0.99), pair.value_at_quantile(0.99));
    Floor { rtt_label, pair_label, rtt_p99: r99, pair_p99: p99, rtt_p50: Some(r), pair_p50: Some(p) }
}

async fn memory(n: usize) -> Result<Floor> {
    let m = tokio::sync::Mutex::new(0u64);
    let bump = |_: usize| async {
        *m.lock().await += 1;
        Ok::<_, std::convert::Infallible>(())
    };
    let rtt = time("memory floor", n, bump).await?;
    let pair = time("memory floor", n, bump).await?;
    Ok(floor("tokio Mutex lock+unlock", "tokio Mutex lock+unlock", rtt, pair))
}

/// The URL without its query: the floor's raw client takes none of the backend's options.
#[cfg(any(feature = "redis", feature = "mysql", feature = "postgres"))]
fn strip_query(url: &str) -> &str {
    url.split_once('?').map_or(url, |(u, _)| u)
}

#[cfg(feature = "redis")]
async fn redis(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_redis::redis;
    use redis::IntoConnectionInfo;
    const WHAT: &str = "redis floor";
    let info = strip_query(url).into_connection_info().map_err(BenchError::driver(WHAT))?;
    // The floor gets the same socket settings as the backend (Nagle off).
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    let client = redis::Client::open(info.set_tcp_settings(tcp)).map_err(BenchError::driver(WHAT))?;
    let con = client.get_multiplexed_async_connection().await.map_err(BenchError::driver(WHAT))?;
    let unlock = redis::Script::new(
        "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
    );
    let rtt = time(WHAT, n, |_| {
        let mut c = con.clone();
        async move { redis::cmd("PING").query_async::<String>(&mut c).await.map(drop) }
    })
    .await?;
    let pair = time(WHAT, n, |i| {
        let mut c = con.clone();
        let unlock = &unlock;
        async move {
            let k = format!("dlock-floor-{i}");
            let _: Option<String> = redis::cmd("SET")
                .arg(&k)
                .arg("tok")
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut c)
                .await?;
            let _: i64 = unlock.key(&k).arg("tok").invoke_async(&mut c).await?;
            Ok::<_, redis::RedisError>(())
        }
    })
    .await?;
    Ok(floor("PING", "SET NX PX + EVALSHA unlock", rtt, pair))
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str, caps: Capability, n: usize) -> Result<Floor> {
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
async fn postgres(url: &str, n: usize) -> Result<Floor> {
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

/// The bare etcd v3 lock steps: one transaction that puts a key if absent and reads the
/// queue's head, and one delete (no lease, no keep-alive, no watch).
#[cfg(feature = "etcd")]
async fn etcd(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_etcd::etcd_client::{
        self as etcd, Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
    };
    const WHAT: &str = "etcd floor";
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = hosts.split(['/', '?']).next().unwrap_or(hosts);
    let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
    let client = etcd::Client::connect(endpoints, None).await.map_err(BenchError::driver(WHAT))?;
    let rtt = time(WHAT, n, |_| {
        let mut kv = client.kv_client();
        async move { kv.get("/dlock-floor", None).await.map(drop) }
    })
    .await?;
    let pair = time(WHAT, n, |i| {
        let mut kv = client.kv_client();
        async move {
            let key = format!("/dlock-floor/{i:x}");
            let head = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
            let txn =
                Txn::new().when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)]).and_then([
                    TxnOp::put(key.as_str(), "", None),
                    TxnOp::get("/dlock-floor/", Some(head.with_limit(1))),
                ]);
            kv.txn(txn).await?;
            kv.delete(key, None).await.map(drop)
        }
    })
    .await?;
    Ok(floor("get", "txn put-if-absent + head read, delete", rtt, pair))
}

#[cfg(feature = "zk")]
async fn zk(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_zk::zookeeper_client as zkc;
    const WHAT: &str = "zk floor";
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = hosts.split_once('/').map_or(hosts, |(h, _)| h);
    let client = zkc::Client::connector().connect(hosts).await.map_err(BenchError::driver(WHAT))?;
    let rtt = time(WHAT, n, |_| {
        let c = client.clone();
        async move { c.check_stat("/").await.map(drop) }
    })
    .await?;
    let opts = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    let pair = time(WHAT, n, |_| {
        let c = client.clone();
        let opts = &opts;
        async move {
            let (_, seq) = c.create("/dlock-floor-", b"", opts).await?;
            c.delete(&format!("/dlock-floor-{seq}"), None).await
        }
    })
    .await?;
    Ok(floor("exists", "create ephemeral-sequential + delete", rtt, pair))
}
